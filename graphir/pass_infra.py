"""Passes: the base class, results, context, typed options and the registry.

A pass is a frozen dataclass with a kebab-case ``name``, typed option fields with defaults, and
``run(module, ctx) -> PassResult``. It declares the facts (annotation keys) it ``requires`` and
``provides``; the pass manager runs a provider with its default options when a requirement is
missing. Passes register with :func:`register_pass` when their module is imported: the built-in ones
when ``graphir.passes`` is imported (which the driver layer does; the core never imports it),
third-party ones through the entry-point group ``graphir.passes`` (:func:`load_pass_plugins`) or
``graphir-opt --load-plugin=module_or_file.py``::

    @register_pass
    @dataclasses.dataclass(frozen=True)
    class UniformCost(Pass):
        \"\"\"Give every node the same compute time. Provides: cost.\"\"\"

        name: ClassVar[str] = "uniform-cost"
        provides: ClassVar[tuple[str, ...]] = ("cost",)
        seconds: float = 1e-6

        def run(self, module: Module, ctx: PassContext) -> PassResult:
            ...

A pass that offers several algorithms (``place{algo=heft}``, ``fuse{algo=rules}``) keeps them in a
*sub-registry*: each algorithm is a frozen dataclass derived from :class:`Algorithm` with its own
typed options. The pass names the registry (``algorithms``), the option that selects an entry
(``algorithm_selector``, e.g. ``algo``) and the field that holds the chosen algorithm's options
instance (``algorithm_field``). The pipeline parser resolves the selector first, then checks every
other option against the pass's own fields and that algorithm's fields, so ``place{algo=heft
time-limit=5}`` is an error with a caret; :meth:`Pass.spec` prints the algorithm's options inline.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import importlib.util
import inspect
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, TextIO, TypeVar, cast

import numpy as np

from graphir.errors import GraphIRError
from graphir.ir import Module

Stat = int | float | str


@dataclasses.dataclass(frozen=True)
class PassResult:
    """What a pass reports: whether it changed the module, and named statistics."""

    changed: bool = False
    stats: dict[str, Stat] = dataclasses.field(default_factory=dict[str, Stat])


@dataclasses.dataclass
class PassContext:
    """Per-run state shared by the passes of one pipeline.

    Attributes:
        seed: the pipeline seed; :meth:`rng` derives each pass's generator from it.
        verbose: print progress and auto-run notices to ``log_stream``.
        log_stream: where progress goes (stderr by default).
    """

    seed: int = 0
    verbose: bool = False
    log_stream: TextIO = dataclasses.field(default_factory=lambda: sys.stderr)
    pass_position: int = 0

    def rng(self) -> np.random.Generator:
        """A generator seeded by the pipeline seed and the pass position: deterministic per run."""
        return np.random.default_rng([self.seed, self.pass_position])

    def log(self, message: str) -> None:
        """Progress output (only with ``--verbose``)."""
        if self.verbose:
            print(message, file=self.log_stream, flush=True)


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """Base of the per-algorithm option classes a pass chooses among (placers, fusion algorithms...).

    A subclass is a frozen dataclass with a kebab-case ``name``, typed option fields with defaults
    (the same types as pass options) and a docstring whose first line is its one-line summary and
    whose ``Options:`` section documents each field.
    """

    name: ClassVar[str] = ""


AlgorithmRegistry = Mapping[str, type[Algorithm]]
"""Algorithms of one pass by name (e.g. :data:`graphir.passes.place.PLACERS`; read only here)."""


@dataclasses.dataclass(frozen=True)
class Pass:
    """Base of all passes (subclasses are frozen dataclasses).

    A pass with a sub-registry of algorithms sets ``algorithms`` (the registry),
    ``algorithm_selector`` (the field naming the algorithm, e.g. ``algo``), ``algorithm_field`` (the
    field holding the chosen :class:`Algorithm` instance, not an option of its own) and
    ``algorithm_kind`` (how error messages call an entry, e.g. ``placement algorithm``).
    """

    name: ClassVar[str] = ""
    requires: ClassVar[tuple[str, ...]] = ()
    provides: ClassVar[tuple[str, ...]] = ()
    algorithms: ClassVar[AlgorithmRegistry | None] = None
    algorithm_selector: ClassVar[str] = ""
    algorithm_field: ClassVar[str] = ""
    algorithm_kind: ClassVar[str] = "algorithm"

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Transform or analyse ``module`` in place."""
        raise NotImplementedError

    @classmethod
    def unknown_algorithm(cls, chosen: str) -> str:
        """The one-line message for a selector value that names no registered algorithm."""
        known = ", ".join(sorted(cls.algorithms or {}))
        return f"unknown {cls.algorithm_kind} '{chosen}' (known: {known})"

    def bind_algorithm(self) -> None:
        """For a pass with an algorithm sub-registry: check the selector, default the algorithm's options.

        Called from ``__post_init__`` (so an unknown name fails when the pipeline is parsed). Raises
        ``ValueError`` for an unknown name, or for an options instance of another algorithm.
        """
        registry = self.algorithms or {}
        chosen = getattr(self, self.algorithm_selector)
        if chosen not in registry:
            raise ValueError(self.unknown_algorithm(chosen))
        current = getattr(self, self.algorithm_field)
        if current is None:
            object.__setattr__(self, self.algorithm_field, registry[chosen]())
        elif current.name != chosen:
            raise ValueError(f"{self.algorithm_kind} '{current.name}' given for {self.algorithm_selector}={chosen}")

    def spec(self) -> str:
        """The pipeline text of this pass with its non-default options (``fuse{window=4}``).

        The chosen algorithm's non-default options follow the pass's own (``place{algo=ilp
        time-limit=5.0}``); the text parses back to an equal pass.
        """
        parts = _changed_options(self, skip=self.algorithm_field)
        if self.algorithm_field:
            parts += _changed_options(getattr(self, self.algorithm_field))
        return self.name + ("{" + " ".join(parts) + "}" if parts else "")


def _changed_options(obj: Any, skip: str = "") -> list[str]:
    """``key=value`` texts of the fields of dataclass ``obj`` that differ from their defaults."""
    parts: list[str] = []
    for field in dataclasses.fields(obj):
        if field.name == skip:
            continue
        value = getattr(obj, field.name)
        if value != field.default:
            parts.append(f"{_kebab(field.name)}={format_option(value)}")
    return parts


def _kebab(name: str) -> str:
    return name.replace("_", "-")


def format_option(value: Any) -> str:
    """An option value as pipeline text (re-parses to the same value)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        items = cast(tuple[object, ...], value)  # a list option's values
        return ",".join(format_option(v) for v in items) if items else '""'
    if isinstance(value, str) and (not value or any(c in ',{}"=\\' or c.isspace() for c in value)):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


# --------------------------------------------------------------------------- options


@dataclasses.dataclass(frozen=True)
class OptionInfo:
    """One pass option, as shown by ``--list-passes``."""

    name: str  # kebab-case
    field: str
    type_text: str
    default: Any
    convert: Callable[[str | list[str]], Any]


def _scalar_converter(tp: Any) -> tuple[str, Callable[[str], Any]]:
    if tp is bool:

        def to_bool(text: str) -> bool:
            if text.lower() in ("true", "1", "yes", "on"):
                return True
            if text.lower() in ("false", "0", "no", "off"):
                return False
            raise ValueError("expected true or false")

        return "bool", to_bool
    if tp is int:
        return "int", lambda text: int(text, 0)
    if tp is float:
        return "float", float
    if tp is str:
        return "str", str
    if typing.get_origin(tp) is Literal:
        choices = typing.get_args(tp)

        def to_choice(text: str) -> str:
            if text not in choices:
                raise ValueError(f"expected one of {', '.join(choices)}")
            return text

        return "|".join(choices), to_choice
    raise TypeError(f"unsupported option type {tp!r}")


def _option_converter(tp: Any) -> tuple[str, Callable[[str | list[str]], Any]]:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        inner = next(a for a in args if a is not type(None))
        text, conv = _option_converter(inner)

        def optional(raw: str | list[str]) -> Any:
            return None if raw in ("none", "None") else conv(raw)

        return text + "?", optional
    if origin is tuple:
        elem_text, elem = _scalar_converter(args[0])

        def to_tuple(raw: str | list[str]) -> tuple[Any, ...]:
            items = raw if isinstance(raw, list) else [raw] if raw != "" else []
            return tuple(elem(item) for item in items)

        return f"list<{elem_text}>", to_tuple
    scalar_text, scalar = _scalar_converter(tp)

    def single(raw: str | list[str]) -> Any:
        if isinstance(raw, list):
            raise ValueError("expected a single value, not a list")
        return scalar(raw)

    return scalar_text, single


def pass_options(cls: type[Pass] | type[Algorithm]) -> dict[str, OptionInfo]:
    """The options of a pass or algorithm class keyed by kebab-case name.

    A pass's ``algorithm_field`` is not an option: its algorithm's options are
    (:func:`algorithm_options`).
    """
    hints = typing.get_type_hints(cls)
    skip = getattr(cls, "algorithm_field", "")
    out: dict[str, OptionInfo] = {}
    for field in dataclasses.fields(cls):
        if field.name == skip:
            continue
        type_text, convert = _option_converter(hints[field.name])
        default = field.default if field.default is not dataclasses.MISSING else None
        out[_kebab(field.name)] = OptionInfo(_kebab(field.name), field.name, type_text, default, convert)
    return out


def algorithm_options(cls: type[Pass], algo: str) -> dict[str, OptionInfo]:
    """The options of algorithm ``algo`` of pass ``cls`` (KeyError: no such algorithm)."""
    assert cls.algorithms is not None, f"pass '{cls.name}' has no algorithms"
    return pass_options(cls.algorithms[algo])


def register_algorithm(pass_cls: type[Pass], cls: type[Algorithm]) -> type[Algorithm]:
    """Add ``cls`` to the sub-registry of ``pass_cls`` under ``cls.name``.

    Raises:
        TypeError: no name, the name is taken by another class, an option type is unsupported, or an
            option has the name of one of the pass's own options (it could not be told apart).
    """
    # The pass's own dict (PLACERS...), of its own algorithm class; each register_* passes that kind.
    registry = cast("dict[str, type[Algorithm]] | None", pass_cls.algorithms)
    assert registry is not None, f"pass '{pass_cls.name}' has no algorithms"
    if not cls.name:
        raise TypeError(f"{pass_cls.algorithm_kind} {cls.__name__} has no 'name'")
    existing = registry.get(cls.name)
    if existing is not None and (existing.__module__, existing.__qualname__) != (cls.__module__, cls.__qualname__):
        raise TypeError(
            f"{pass_cls.algorithm_kind} '{cls.name}' is already taken by {existing.__module__}.{existing.__qualname__}"
        )
    clashes = set(pass_options(cls)) & set(pass_options(pass_cls))
    if clashes:
        raise TypeError(
            f"{pass_cls.algorithm_kind} '{cls.name}' has options named like options of pass '{pass_cls.name}': "
            f"{', '.join(sorted(clashes))}"
        )
    registry[cls.name] = cls
    return cls


def plain_summary(obj: Any) -> str:
    """The first line of ``obj``'s docstring as plain text (RST literals and Sphinx roles unwrapped)."""
    doc = (inspect.getdoc(obj) or "").strip()
    if not doc:
        return ""
    first = doc.splitlines()[0].strip()
    first = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", first)
    return re.sub(r"``([^`]+)``", r"\1", first)


# --------------------------------------------------------------------------- registry

PASSES: dict[str, type[Pass]] = {}
_loaded_plugins = False


_P = TypeVar("_P", bound=type[Pass])


def register_pass(cls: _P) -> _P:
    """Class decorator: make a pass available to pipelines under ``cls.name``."""
    if not cls.name:
        raise TypeError(f"pass {cls.__name__} has no 'name'")
    existing = PASSES.get(cls.name)
    if existing is not None and (existing.__module__, existing.__qualname__) != (cls.__module__, cls.__qualname__):
        raise TypeError(f"pass name '{cls.name}' is already taken by {existing.__module__}.{existing.__qualname__}")
    pass_options(cls)  # fail at registration on unsupported option types
    PASSES[cls.name] = cls
    return cls


def registered_passes() -> dict[str, type[Pass]]:
    """The pass registry, after the installed pass plugins (entry-point group ``graphir.passes``) are loaded.

    The built-in passes register themselves when their package is imported; the core never imports
    it. ``graphir-opt`` and :func:`graphir.driver.load_builtin_passes` do; a Python program that
    parses pipelines itself imports ``graphir.passes`` first.
    """
    load_pass_plugins()
    return PASSES


def load_pass_plugins() -> None:
    """Import the installed pass plugins (entry-point group ``graphir.passes``) once, without the built-ins.

    For a run with no passes: a plugin may register annotations its files use, while the built-in
    passes register none, so their import (a tenth of a second) can be skipped. (The entry-point
    group is named like the built-in passes' package; it is a group name, not a module the core imports.)
    """
    global _loaded_plugins
    if not _loaded_plugins:
        _loaded_plugins = True
        for entry in importlib.metadata.entry_points(group="graphir.passes"):
            try:
                entry.load()
            except Exception as exc:  # a broken plugin must not hide the built-ins
                raise GraphIRError(f"cannot load pass plugin '{entry.name}' ({entry.value}): {exc}") from exc


def load_plugin(spec: str) -> None:
    """Import a plugin by module name (``my_pkg.passes``) or file path (``examples/my_pass.py``)."""
    try:
        if spec.endswith(".py") or "/" in spec:
            path = Path(spec)
            if not path.is_file():
                raise GraphIRError(f"plugin file '{spec}' does not exist")
            module_name = f"graphir_plugin_{path.stem}"
            loader_spec = importlib.util.spec_from_file_location(module_name, path)
            assert loader_spec is not None and loader_spec.loader is not None
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[module_name] = module
            loader_spec.loader.exec_module(module)
        else:
            importlib.import_module(spec)
    except GraphIRError:
        raise
    except Exception as exc:
        raise GraphIRError(f"cannot load plugin '{spec}': {exc.__class__.__name__}: {exc}") from exc


def providers_of(fact: str) -> list[type[Pass]]:
    """Registered passes that provide ``fact``, in registration order."""
    return [cls for cls in PASSES.values() if fact in cls.provides]


FactCheck = Callable[[Module], bool]
FACT_CHECKS: dict[str, FactCheck] = {}
"""Custom checks for facts that are not simply 'every node has this annotation'."""


def fact_holds(module: Module, fact: str) -> bool:
    """Whether ``fact`` holds: a custom check, or every node carries the annotation ``fact``."""
    check = FACT_CHECKS.get(fact)
    if check is not None:
        return check(module)
    return all(fact in node.annotations for node in module.graph.nodes)
