"""The pass manager: runs a pipeline with prerequisites, verification, timing and IR printing.

For each pass the manager (1) checks the facts it ``requires`` and, for a missing one, runs the
first registered pass that ``provides`` it with default options (noted on stderr with
``--verbose`` and listed in ``--timing``), or fails naming what is missing; (2) runs the pass;
(3) verifies the module (on by default: after the first full check, only what the pass may have
invalidated, tracked by the graph's structure and annotation versions; ``verify_full`` checks
everything after every pass); (4) prints the IR when asked. A failure names the pass
and the passes that ran before it.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import TextIO

from graphir.errors import GraphIRError, PassError, PreconditionError, VerifyError
from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, fact_holds, providers_of
from graphir.printer import print_module
from graphir.verifier import VerifyState, verify


@dataclasses.dataclass(frozen=True)
class PassRecord:
    """One executed pass: the instance, whether the manager inserted it, its result and time."""

    pass_: Pass
    auto: bool
    result: PassResult
    seconds: float


@dataclasses.dataclass
class PassManager:
    """Runs passes in order over a module.

    Attributes:
        passes: the pipeline.
        verify_each: run the verifier after every pass (and once before the first).
        verify_full: make each of those a full check; by default a check after a pass skips the
            structural checks when the pass changed no structure (an annotating pass), and
            everything when it changed nothing (see :class:`~graphir.verifier.VerifyState`).
        print_ir_after_all: print the module after every pass.
        print_ir_after: names of passes after which to print the module.
        ir_stream: where printed IR goes (stderr, as in MLIR).
        auto_prerequisites: run providers of missing facts automatically.
    """

    passes: list[Pass]
    verify_each: bool = True
    verify_full: bool = False
    print_ir_after_all: bool = False
    print_ir_after: frozenset[str] = frozenset()
    ir_stream: TextIO = dataclasses.field(default_factory=lambda: sys.stderr)
    auto_prerequisites: bool = True
    records: list[PassRecord] = dataclasses.field(default_factory=list[PassRecord])
    _verified: VerifyState = dataclasses.field(default_factory=VerifyState, init=False, repr=False)

    def run(self, module: Module, ctx: PassContext | None = None) -> list[PassRecord]:
        """Run the pipeline; returns the records of every executed pass (auto-inserted ones too)."""
        ctx = ctx or PassContext()
        self.records = []
        self._verified = VerifyState()
        if self.verify_each:
            self._verify(module, None)
        for position, pass_ in enumerate(self.passes):
            ctx.pass_position = position
            self._ensure_requirements(module, pass_, ctx, chain=(pass_.name,))
            self._run_one(module, pass_, ctx, auto=False)
        return self.records

    def _ensure_requirements(self, module: Module, pass_: Pass, ctx: PassContext, chain: tuple[str, ...]) -> None:
        for fact in pass_.requires:
            if fact_holds(module, fact):
                continue
            providers = providers_of(fact)
            if not providers or not self.auto_prerequisites:
                hint = f"; run '{providers[0].name}' first" if providers else "; no registered pass provides it"
                raise PreconditionError(f"pass '{pass_.name}' requires '{fact}', which the module lacks{hint}")
            provider = providers[0]()
            if provider.name in chain:
                raise PreconditionError(
                    f"pass '{pass_.name}' requires '{fact}', but its provider '{provider.name}' needs it too"
                )
            ctx.log(f"graphir-opt: running '{provider.name}' to provide '{fact}' required by '{pass_.name}'")
            self._ensure_requirements(module, provider, ctx, chain + (provider.name,))
            self._run_one(module, provider, ctx, auto=True)
            if not fact_holds(module, fact):
                raise PreconditionError(f"pass '{provider.name}' ran but did not provide '{fact}' for '{pass_.name}'")

    def _before(self) -> str:
        if not self.records:
            return "as the first pass"
        names = ", ".join(f"'{r.pass_.name}'" for r in self.records)
        return f"after {names}"

    def _run_one(self, module: Module, pass_: Pass, ctx: PassContext, auto: bool) -> None:
        started = time.perf_counter()
        try:
            result = pass_.run(module, ctx)
        except GraphIRError as exc:
            if getattr(exc, "pass_context", False):
                raise  # already names the failing pass (a nested pipeline)
            wrapped = PassError(f"pass '{pass_.name}' failed {self._before()}: {exc.message}", exc.loc, exc.notes)
            wrapped.pass_context = True
            raise wrapped from exc
        except Exception as exc:
            # A bug in the pass, not a user error: keep the traceback (chained) but say where.
            raise RuntimeError(f"internal error in pass '{pass_.name}' ({self._before()}): {exc!r}") from exc
        seconds = time.perf_counter() - started
        self.records.append(PassRecord(pass_, auto, result, seconds))
        if self.verify_each:
            self._verify(module, pass_)
        if self.print_ir_after_all or pass_.name in self.print_ir_after:
            self.ir_stream.write(f"// -----// IR after {pass_.spec()} //----- //\n")
            print_module(module, self.ir_stream)

    def _verify(self, module: Module, after: Pass | None) -> None:
        try:
            verify(module, None if self.verify_full else self._verified)
        except VerifyError as exc:
            if after is None:
                raise
            raise VerifyError(
                f"verification failed after pass '{after.name}': {exc.message}", exc.loc, exc.notes
            ) from exc

    def timing_report(self) -> str:
        """A table of wall-clock seconds per executed pass (auto-inserted passes marked)."""
        total = sum(r.seconds for r in self.records) or 1e-12
        lines = ["===- Pass execution timing report -===", f"  Total: {total:.4f} s", "   seconds   share  pass"]
        for record in self.records:
            mark = " (auto: prerequisite)" if record.auto else ""
            lines.append(f"  {record.seconds:8.4f}  {100 * record.seconds / total:5.1f}%  {record.pass_.spec()}{mark}")
        return "\n".join(lines)

    def stats_report(self) -> str:
        """Every pass's statistics, one ``pass.key = value`` per line."""
        lines: list[str] = []
        for record in self.records:
            for key, value in record.result.stats.items():
                lines.append(f"{record.pass_.name}.{key} = {value}")
        return "\n".join(lines)
