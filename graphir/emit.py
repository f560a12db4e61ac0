"""Emitters: the output formats of ``graphir-opt --emit=NAME``, registered by name.

An emitter takes the module and returns text. The driver writes the text to ``-o FILE``
atomically, so a failed run never leaves a partial output file behind.

This module is the registry; the backends fill it when they are imported (each calls
:func:`register_emitter`, and a real-execution backend :func:`register_runner`). Which modules
those are is the driver's knowledge (the layer above the backends), never the core's.

An emitter that also writes side files (the report's JSON, pictures and DOT) registers with
``writes_files=True`` and is called as ``fn(module, output)``: ``output`` is the ``-o`` path, or
``None`` when the text goes to stdout (then it writes no side file). It derives the side files'
names from ``output`` and writes them itself (atomically, before the driver writes the text). For
such an emitter ``-o`` may name an existing directory: the text then goes to ``DIR/<name>.txt``
(:meth:`Emitter.text_path`).

The driver also publishes the pipeline it ran (:class:`PipelineRun`) in :data:`CURRENT_RUN` while
an emitter runs, so a report can name the passes and show their statistics; called from Python,
an emitter sees ``None`` there and shows the module alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from graphir.ir import Module


@dataclasses.dataclass(frozen=True)
class PipelineRun:
    """The passes the driver ran before emitting, in order.

    Attributes:
        passes: per executed pass, ``(spec, auto, stats)``: its pipeline text (``fuse{algo=cpd-topo}``),
            whether the pass manager inserted it as a prerequisite, and its statistics.
        chunk: with ``--split-input-file``, the chunk's position (from 0), so an emitter writing side
            files can keep one set per chunk; ``None`` for a whole input.
    """

    passes: tuple[tuple[str, bool, Mapping[str, int | float | str]], ...] = ()
    chunk: int | None = None


CURRENT_RUN: ContextVar[PipelineRun | None] = ContextVar("graphir_current_run", default=None)
"""The pipeline run being emitted (set by the driver around the emitter call; ``None`` otherwise)."""


@dataclasses.dataclass(frozen=True)
class Emitter:
    """One output format.

    Attributes:
        name: the ``--emit`` name.
        help: a one-line description.
        emit: ``fn(module) -> text``, or ``fn(module, output) -> text`` when ``writes_files``.
        writes_files: the emitter receives the ``-o`` path and writes side files next to it.
    """

    name: str
    help: str
    emit: Callable[..., str]
    writes_files: bool = False

    def run(self, module: Module, output: Path | None = None) -> str:
        """The emitted text; a file-writing emitter also gets ``output`` (``None``: stdout)."""
        if self.writes_files:
            return self.emit(module, output)
        return self.emit(module)

    def text_path(self, output: Path) -> Path:
        """Where ``-o output`` puts the text: ``output``, or ``output/<name>.txt`` for a directory."""
        if self.writes_files and output.is_dir():
            return output / f"{self.name}.txt"
        return output


EMITTERS: dict[str, Emitter] = {}


def register_emitter(
    name: str, help: str, *, writes_files: bool = False
) -> Callable[[Callable[..., str]], Callable[..., str]]:
    """Decorator registering ``fn(module) -> str`` as ``--emit=name``.

    With ``writes_files=True`` the function is ``fn(module, output: Path | None) -> str`` (see the
    module docstring).
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        EMITTERS[name] = Emitter(name, help, fn, writes_files)
        return fn

    return decorate


Runner = Callable[[Module, int, int], str]
"""``fn(module, steps, seed) -> one report line``: runs the placed module for real (``--run-tf=STEPS``)."""

RUNNERS: dict[str, Runner] = {}
"""Real-execution backends by name (``tf``); registered by the backends on import, like emitters."""


def register_runner(name: str, runner: Runner) -> None:
    """Make ``name`` a runner the driver can call after the pipeline (``--run-tf`` uses ``tf``)."""
    RUNNERS[name] = runner
