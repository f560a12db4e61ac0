"""Emitters: the output formats of ``graphir-opt --emit=NAME``, registered by name.

An emitter takes the module and returns text (or writes files itself when it needs a path, such
as a report with pictures). The driver writes the text to ``-o FILE`` atomically, so a failed run
never leaves a partial output file behind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from graphir.ir import Module


@dataclasses.dataclass(frozen=True)
class Emitter:
    """One output format: ``emit(module) -> text`` and a one-line description."""

    name: str
    help: str
    emit: Callable[[Module], str]


EMITTERS: dict[str, Emitter] = {}


def register_emitter(name: str, help: str) -> Callable[[Callable[[Module], str]], Callable[[Module], str]]:
    """Decorator registering ``fn(module) -> str`` as ``--emit=name``."""

    def decorate(fn: Callable[[Module], str]) -> Callable[[Module], str]:
        EMITTERS[name] = Emitter(name, help, fn)
        return fn

    return decorate


def load_builtin_emitters() -> dict[str, Emitter]:
    """Import the built-in emitters (they register on import)."""
    import graphir.backends.json_export  # noqa: F401
    import graphir.backends.summary  # noqa: F401

    if "gir" not in EMITTERS:
        from graphir.printer import print_module

        register_emitter("gir", "the annotated module as .gir text")(print_module)
    return EMITTERS
