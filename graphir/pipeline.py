r"""Pipeline strings: ``a,b{key=value list=x,y},c`` (the xDSL/MLIR grammar).

Grammar::

    pipeline := pass (',' pass)*
    pass     := NAME ('{' (KEY '=' value)* '}')?
    value    := item (',' item)*          # several items make a list
    item     := [^ \\t,{}="]+ | '"' chars '"'

Options are separated by whitespace; kebab-case keys map to the pass's snake_case fields. Errors
carry the column and the pipeline text so the CLI can draw a caret under the offending part.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import cast

from graphir.errors import Location, PassOptionError
from graphir.pass_infra import Algorithm, OptionInfo, Pass, pass_options, registered_passes

_BARE_STOP = set(' \t,{}="')


@dataclasses.dataclass(frozen=True)
class OptionText:
    """One ``key=value`` as written, with the columns of key and value."""

    key: str
    value: str | list[str]
    key_col: int
    value_col: int


@dataclasses.dataclass(frozen=True)
class PassText:
    """One pass as written in the pipeline."""

    name: str
    col: int
    options: tuple[OptionText, ...]


class _Scanner:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def error(self, message: str, pos: int | None = None, notes: tuple[str, ...] = ()) -> PassOptionError:
        col = (self.pos if pos is None else pos) + 1
        return PassOptionError(message, Location("<pipeline>", 1, col, self.text), notes)

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\n":
            self.pos += 1

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def word(self, what: str) -> tuple[str, int]:
        start = self.pos
        while self.pos < len(self.text) and (self.text[self.pos].isalnum() or self.text[self.pos] in "-_."):
            self.pos += 1
        if start == self.pos:
            found = repr(self.peek()) if self.peek() else "end of pipeline"
            raise self.error(f"expected {what}, found {found}")
        return self.text[start : self.pos], start

    def item(self) -> str:
        if self.peek() == '"':
            start = self.pos
            self.pos += 1
            out: list[str] = []
            while self.pos < len(self.text) and self.text[self.pos] != '"':
                if self.text[self.pos] == "\\" and self.pos + 1 < len(self.text):
                    self.pos += 1
                out.append(self.text[self.pos])
                self.pos += 1
            if self.pos >= len(self.text):
                raise self.error("unterminated string in option value", start)
            self.pos += 1
            return "".join(out)
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in _BARE_STOP:
            self.pos += 1
        if start == self.pos:
            found = repr(self.peek()) if self.peek() else "end of pipeline"
            raise self.error(f"expected an option value, found {found}")
        return self.text[start : self.pos]


def parse_pipeline_text(text: str) -> list[PassText]:
    """Split a pipeline string into passes and raw options (no registry look-up)."""
    scanner = _Scanner(text)
    passes: list[PassText] = []
    scanner.skip_ws()
    if scanner.pos == len(text):
        return passes
    while True:
        scanner.skip_ws()
        name, col = scanner.word("a pass name")
        options: list[OptionText] = []
        scanner.skip_ws()
        if scanner.peek() == "{":
            open_pos = scanner.pos
            scanner.pos += 1
            while True:
                scanner.skip_ws()
                if scanner.peek() == "}":
                    scanner.pos += 1
                    break
                if not scanner.peek():
                    raise scanner.error(f"missing '}}' closing the options of '{name}'", open_pos)
                key, key_pos = scanner.word("an option name")
                if scanner.peek() != "=":
                    raise scanner.error(f"expected '=' after option '{key}'")
                scanner.pos += 1
                value_pos = scanner.pos
                items = [scanner.item()]
                while scanner.peek() == ",":
                    scanner.pos += 1
                    items.append(scanner.item())
                value: str | list[str] = items[0] if len(items) == 1 else items
                if any(o.key == key for o in options):
                    raise scanner.error(f"option '{key}' given twice for '{name}'", key_pos)
                options.append(OptionText(key, value, key_pos, value_pos))
        passes.append(PassText(name, col, tuple(options)))
        scanner.skip_ws()
        if scanner.pos == len(text):
            return passes
        if scanner.peek() != ",":
            raise scanner.error(f"expected ',' between passes, found {scanner.peek()!r}")
        scanner.pos += 1


def parse_pipeline(text: str) -> list[Pass]:
    """Parse ``text`` into pass instances, checking names, options and option types.

    For a pass with a sub-registry of algorithms (``place{algo=heft}``), the selecting option is
    resolved first (its default when absent), then every other option must be the pass's own or the
    chosen algorithm's.

    The passes a pipeline may name are the registered ones (:func:`~graphir.pass_infra.registered_passes`):
    the built-in passes once their package ``graphir.passes`` is imported (the driver layer imports
    it, :func:`graphir.driver.load_builtin_passes`), and the installed plugins.

    Raises:
        PassOptionError: unknown pass, algorithm or option, or a value of the wrong type, with a caret.
    """
    registry = registered_passes()
    scanner = _Scanner(text)
    out: list[Pass] = []
    for entry in parse_pipeline_text(text):
        cls = registry.get(entry.name)
        if cls is None:
            known = ", ".join(sorted(registry)) if registry else "none: import the built-in passes first"
            raise scanner.error(f"unknown pass '{entry.name}' (known passes: {known})", entry.col)
        options = pass_options(cls)
        kwargs: dict[str, object] = {}
        algorithm, algorithm_kwargs, algorithm_opts = _resolve_algorithm(scanner, cls, entry, options)
        for option in entry.options:
            info = options.get(option.key)
            target = kwargs
            if info is None and option.key in algorithm_opts:
                info, target = algorithm_opts[option.key], algorithm_kwargs
            if info is None:
                raise scanner.error(
                    _unknown_option(cls, entry.name, option.key, options, algorithm, algorithm_opts), option.key_col
                )
            target[info.field] = _convert(scanner, entry, option, info)
        if algorithm is not None:
            try:
                kwargs[cls.algorithm_field] = algorithm(**algorithm_kwargs)
            except (TypeError, ValueError) as exc:
                raise scanner.error(
                    f"invalid options for {cls.algorithm_kind} '{algorithm.name}' of pass '{entry.name}': {exc}",
                    entry.col,
                ) from None
        try:
            out.append(cls(**kwargs))
        except (TypeError, ValueError) as exc:
            raise scanner.error(f"invalid options for pass '{entry.name}': {exc}", entry.col) from None
    return out


MAX_OPTION_INT = 1 << 62
"""Largest magnitude of an integer option: passes hold counts and sizes in int64 arrays."""


def _items(value: object) -> Sequence[object]:
    """An option value's items: a list's, or the value alone."""
    return cast(Sequence[object], value) if isinstance(value, (list, tuple)) else (value,)


def _in_range(value: object) -> object:
    """``value`` itself; an int (or an int in a list) beyond :data:`MAX_OPTION_INT` is a ValueError."""
    for item in _items(value):
        if isinstance(item, int) and not isinstance(item, bool) and abs(item) > MAX_OPTION_INT:
            raise ValueError(f"{item} is out of range (limit 2^62)")
    return value


def _convert(scanner: _Scanner, entry: PassText, option: OptionText, info: OptionInfo) -> object:
    """The typed value of one option, or a caret error under the value."""
    try:
        return _in_range(info.convert(option.value))
    except ValueError as exc:
        shown = option.value if isinstance(option.value, str) else ",".join(option.value)
        raise scanner.error(
            f"bad value '{shown}' for option '{option.key}' of pass '{entry.name}' ({info.type_text}): {exc}",
            option.value_col,
        ) from None


def _resolve_algorithm(
    scanner: _Scanner, cls: type[Pass], entry: PassText, options: dict[str, OptionInfo]
) -> tuple[type[Algorithm] | None, dict[str, object], dict[str, OptionInfo]]:
    """The algorithm ``entry`` selects, and its options (``(None, {}, {})`` for a plain pass)."""
    algorithms = cls.algorithms
    if algorithms is None:
        return None, {}, {}
    selector = cls.algorithm_selector.replace("_", "-")
    chosen = next((option for option in entry.options if option.key == selector), None)
    if chosen is None:
        name = str(options[selector].default)
    else:
        name = str(_convert(scanner, entry, chosen, options[selector]))
    algorithm = algorithms.get(name)
    if algorithm is None:
        col = chosen.value_col if chosen is not None else entry.col
        raise scanner.error(
            f"unknown {cls.algorithm_kind} '{name}' for pass '{entry.name}' (known: {', '.join(sorted(algorithms))})",
            col,
        )
    return algorithm, {}, pass_options(algorithm)


def _unknown_option(
    cls: type[Pass],
    pass_name: str,
    key: str,
    options: dict[str, OptionInfo],
    algorithm: type[Algorithm] | None,
    algorithm_opts: dict[str, OptionInfo],
) -> str:
    """The message for option ``key``, which neither the pass nor its chosen algorithm has."""
    if algorithm is None:
        return f"unknown option '{key}' for pass '{pass_name}' (options: {', '.join(options) or 'none'})"
    selector = cls.algorithm_selector.replace("_", "-")
    own = ", ".join(algorithm_opts) or "none"
    return (
        f"unknown option '{key}' for {pass_name}{{{selector}={algorithm.name}}} "
        f"({algorithm.name} options: {own}; {pass_name} options: {', '.join(options)})"
    )
