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

from graphir.errors import Location, PassOptionError
from graphir.pass_infra import Pass, load_builtin_passes, pass_options

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
            out = []
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

    Raises:
        PassOptionError: unknown pass or option, or a value of the wrong type, with a caret.
    """
    registry = load_builtin_passes()
    scanner = _Scanner(text)
    out: list[Pass] = []
    for entry in parse_pipeline_text(text):
        cls = registry.get(entry.name)
        if cls is None:
            raise scanner.error(f"unknown pass '{entry.name}' (known passes: {', '.join(sorted(registry))})", entry.col)
        options = pass_options(cls)
        kwargs = {}
        for option in entry.options:
            info = options.get(option.key)
            if info is None:
                valid = ", ".join(options) or "none"
                raise scanner.error(
                    f"unknown option '{option.key}' for pass '{entry.name}' (options: {valid})", option.key_col
                )
            try:
                kwargs[info.field] = info.convert(option.value)
            except ValueError as exc:
                shown = option.value if isinstance(option.value, str) else ",".join(option.value)
                raise scanner.error(
                    f"bad value '{shown}' for option '{option.key}' of pass '{entry.name}' ({info.type_text}): {exc}",
                    option.value_col,
                ) from None
        try:
            out.append(cls(**kwargs))
        except (TypeError, ValueError) as exc:
            raise scanner.error(f"invalid options for pass '{entry.name}': {exc}", entry.col) from None
    return out
