"""``compare{algos=...}``: run several placers on one module and record how each one did.

The first question a user asks is which placer suits the model. This pass answers it in one run:
for each name of ``algos`` (a name of the placer registry :data:`graphir.passes.place.PLACERS`,
so a placer registered later, ``auto`` included, can be named without touching this module) it
clones the module (:func:`graphir.clone.clone_module`), runs the ``place`` pass with that
algorithm on the clone, and simulates the clone with the simulator (the one ruler). Each run gives
a :class:`ComparisonRow`: makespan, peak memory per device against capacity, the OOM devices,
transfers and bytes moved, and the wall-clock seconds the placer took. A placer that refuses the
problem (a :class:`~graphir.errors.GraphIRError`, e.g. a memory-constrained placer that cannot fit
a node anywhere) is recorded as ``failed`` with its one-line message and the comparison goes on.

**The record.** The rows are stored as JSON in the module metadata under
:data:`graphir.comparison.METADATA_KEY` (:func:`graphir.comparison.read_comparison` reads them back
as a :class:`~graphir.comparison.Comparison`), so the result travels with the module:
``--emit=compare`` renders it (:mod:`graphir.backends.compare`: a table, JSON, an HTML page), and a
printed ``.gir`` keeps it in its header.

**The answer.** The best row is the fastest placement that fits memory (lowest makespan among
rows with status ``ok``; ties go to the earlier name in ``algos``). With ``keep=best`` (the default)
its ``device``, ``order``, ``start`` and ``finish`` annotations are copied onto the module, so a
later pass or ``--emit=report`` sees graphir's answer; when no placement fits, the module is left as
it was (unplaced) and the statistic ``best`` is empty. ``keep=none`` never changes the graph.

Progress (one line per placer, on the pipeline's log stream, stderr) is printed while it runs
unless ``progress=false``: a placer can take seconds to minutes.
"""

from __future__ import annotations

import dataclasses
import time
from typing import ClassVar, Literal

from graphir.clone import clone_module
from graphir.comparison import Comparison, ComparisonRow, best_row, describe_row, write_comparison
from graphir.errors import GraphIRError
from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, Stat, register_pass
from graphir.passes.place import PLACERS, Place
from graphir.simulator import SimResult, simulate

DEFAULT_ALGOS = ("single", "m-topo", "m-etf", "m-sct", "heft", "order-place", "adjusting", "metis", "auto")
"""Compared when ``algos`` is empty: one device and the published list-scheduling placers."""

_Placed = tuple[Module, SimResult]
"""A placed clone and its simulation."""


@register_pass
@dataclasses.dataclass(frozen=True)
class Compare(Pass):
    """Run several placers on copies of the module, simulate each, record the table, keep the best.

    Requires ``cost``. Each placer runs as ``place{algo=NAME}`` (default options) on a clone, then
    the clone is simulated. The rows go to the module metadata ``compare`` (JSON; render them with
    ``--emit=compare``). With ``keep=best`` the fastest placement that fits memory is written onto
    the module (``device``, ``order``, ``start``, ``finish``); if none fits the module stays unplaced.
    Statistics: ``best``, ``best-makespan-s`` and per placer ``<algo>.makespan-s`` and ``<algo>.status``.

    Options:
        algos: placer names from the placer registry, in table order (empty: single, the
            published list-scheduling placers, METIS and ``auto``: ``DEFAULT_ALGOS``).
        keep: ``best`` writes the winning placement onto the module; ``none`` leaves the graph as is.
        congestion: the simulator's congestion rule (as ``simulate{congestion=...}``).
        order: the simulator's execution order, ``enforced`` or ``dynamic`` (as ``simulate{order=...}``).
        progress: print one line per placer on stderr while the comparison runs.
    """

    name: ClassVar[str] = "compare"
    requires: ClassVar[tuple[str, ...]] = ("cost",)
    algos: tuple[str, ...] = ()
    keep: Literal["best", "none"] = "best"
    congestion: Literal["pair", "port", "task", "topology"] = "topology"
    order: Literal["enforced", "dynamic"] = "enforced"
    progress: bool = True

    def __post_init__(self) -> None:
        """Reject unknown or repeated placer names when the pipeline is parsed."""
        unknown = [algo for algo in self.algos if algo not in PLACERS]
        if unknown:
            raise ValueError(f"unknown placement algorithm '{unknown[0]}' (known: {', '.join(sorted(PLACERS))})")
        repeated = sorted({algo for algo in self.algos if self.algos.count(algo) > 1})
        if repeated:
            raise ValueError(f"placement algorithm '{repeated[0]}' named twice")

    @property
    def chosen(self) -> tuple[str, ...]:
        """The placers compared: ``algos``, or :data:`DEFAULT_ALGOS` when empty."""
        return self.algos or tuple(algo for algo in DEFAULT_ALGOS if algo in PLACERS)

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Place and simulate a clone per placer, record the rows, keep the best placement."""
        return self.record(module, self.placements(module, ctx), ctx)

    def placements(self, module: Module, ctx: PassContext) -> list[tuple[ComparisonRow, _Placed | None]]:
        """Per placer of :attr:`chosen`, in order: its row and its placed, simulated clone (``None``: it failed)."""
        out: list[tuple[ComparisonRow, _Placed | None]] = []
        chosen = self.chosen
        for position, algo in enumerate(chosen, start=1):
            self._say(ctx, f"compare [{position}/{len(chosen)}] {algo}: placing...")
            row, placed = self._run_one(module, algo, ctx)
            out.append((row, placed))
            self._say(ctx, f"compare [{position}/{len(chosen)}] {describe_row(row)}")
        return out

    def record(
        self, module: Module, placements: list[tuple[ComparisonRow, _Placed | None]], ctx: PassContext
    ) -> PassResult:
        """Write the table of :meth:`placements` into the module's metadata; keep the best placement."""
        cluster = module.cluster
        devices = cluster.device_names
        rows = [row for row, _ in placements]
        clones = {row.algo: placed for row, placed in placements if placed is not None}
        best = best_row(rows)
        comparison = Comparison(
            module=module.name,
            cluster=cluster.spec,
            devices=devices,
            capacity=tuple(int(d.memory) for d in cluster.devices),
            congestion=self.congestion,
            order=self.order,
            rows=tuple(rows),
            best=best.algo if best else "",
        )
        write_comparison(module, comparison)
        changed = True
        if best is not None and self.keep == "best":
            _copy_placement(clones[best.algo], module)
        stats: dict[str, Stat] = {"best": comparison.best}
        if best is not None:
            stats["best-makespan-s"] = best.makespan
        for row in rows:
            stats[f"{row.algo}.status"] = row.status
            stats[f"{row.algo}.makespan-s"] = row.makespan
        summary = f"best {comparison.best or 'none (no placement fits memory)'}"
        self._say(ctx, f"compare: {summary}")
        return PassResult(changed, stats)

    def _run_one(self, module: Module, algo: str, ctx: PassContext) -> tuple[ComparisonRow, _Placed | None]:
        place = Place.of(algo)
        spec = place.spec() if place.spec() != "place" else f"place{{algo={algo}}}"
        copy = clone_module(module)
        started = time.perf_counter()
        try:
            place.run(copy, ctx)
        except GraphIRError as exc:
            seconds = time.perf_counter() - started
            return ComparisonRow(algo, spec, "failed", error=exc.one_line(), place_seconds=seconds), None
        seconds = time.perf_counter() - started
        sim = simulate(copy, self.congestion, self.order)
        index = copy.graph.index()
        position = {name: k for k, name in enumerate(sim.device_names)}
        counts = [0] * len(sim.device_names)
        for node in index.nodes:
            counts[position[node.device or ""]] += 1
        oom = tuple(sim.oom_devices)
        row = ComparisonRow(
            algo=algo,
            spec=spec,
            status="oom" if oom else "ok",
            makespan=float(sim.makespan),
            place_seconds=seconds,
            peak_memory=tuple(int(x) for x in sim.peak_memory.tolist()),
            nodes=tuple(counts),
            oom_devices=oom,
            transfers=int(sim.transfers),
            bytes_moved=int(sum(sim.link_bytes.values())),
        )
        return row, (copy, sim)

    def _say(self, ctx: PassContext, message: str) -> None:
        if self.progress:
            print(message, file=ctx.log_stream, flush=True)


def _copy_placement(placed: _Placed, module: Module) -> None:
    """Write the clone's device and order, and the simulated start/finish, onto ``module``'s nodes."""
    copy, sim = placed
    original = dict(zip(copy.graph.nodes, module.graph.nodes, strict=True))  # clones keep insertion order
    index = copy.graph.index()
    for node, begin, end in zip(index.nodes, sim.start.tolist(), sim.finish.tolist(), strict=True):
        target = original[node]
        target.device = node.device
        target.order = node.order
        target.start = begin
        target.finish = end
