"""FastT's Operation Splitting DPOS: the ``os-dpos`` pass (FastT §5.2, Algorithm 2).

1. Line 3: place with DPOS (:class:`graphir.passes.place.fastt.Dpos`) and **simulate**
   (:func:`graphir.simulator.simulate` is the judge, so ``FT(o_exit)`` is the simulated makespan).
2. Lines 4-5: the critical path *of that placement*: from the node that finishes last, walk back
   to whatever made each node start when it did: the input that arrived last (its producer's
   finish plus the link's ``latency + bytes / bandwidth`` when it crossed devices) or the node
   before it on its device, whichever is later (ties: the input). Its ops with a splitting rule
   (:mod:`graphir.passes.transform.split_rewrite`: Conv, MatMul, Gemm, pooling, elementwise...) are sorted by decreasing
   compute time on their device (ties: topological position). Ops without a parallelisable
   dimension (concatenations, softmax...) have nothing to try and are skipped, not counted as a
   failure.
3. Lines 7-14: for each op in turn, every parallelisable dimension ``d`` (``batch``, ``channel``)
   and every split number ``n`` in ``2..|D|`` ("``n`` ∈ # of GPUs") the op accepts is tried on a
   copy of the current graph: ``SplitOperation``
   (:func:`graphir.passes.transform.split_rewrite.split_node`, split and concat nodes), analytical
   costs for the new nodes (:func:`graphir.passes.transform.split_rewrite.annotate_split`), a new
   placement problem, DPOS, simulation. The best trial (smallest makespan; ties: the order tried)
   is kept only if it beats the current makespan, and then applied to the module; otherwise the
   loop stops (line 12, "stop at the first that does not"). A trial whose simulation runs out of
   memory counts as an infinite makespan.

FastT's input graph is the model DAG, or a data-parallel replica graph when the model fits one
device; here it is the module's graph as given (replicate it beforehand for FastT's data-parallel
start). The graph must be the fine graph: an op in a fusion group (``group``) is not split.

OS-DPOS **rewrites the module** (the split nodes replace the ops), so it is a pass, not a placer
(a placer never sees the Module): ``os-dpos`` composes the split rewrite
(:mod:`graphir.passes.transform.split_rewrite`) with the ``dpos`` placer and writes the final DPOS
placement of the rewritten graph as ``place`` would (requires ``cost``; provides ``device`` and
``order``). It replaces ``place{algo=os-dpos}``.
Statistics: ``splits``, ``split-list`` (``op:dim:n`` comma-separated), ``split-trials``,
``split-candidates``, ``makespan-before-s`` (DPOS) and ``makespan-after-s`` (simulated), plus
DPOS's own for the final graph.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import ClassVar, Literal

import numpy as np

from graphir.clone import clone_module
from graphir.ir import Module, Node
from graphir.links import LinkModel
from graphir.pass_infra import Pass, PassContext, PassResult, register_pass
from graphir.passes.place.base import Placement, PlacementContext, apply_placement
from graphir.passes.place.fastt import Dpos
from graphir.passes.place.problem import PlacementProblem, write_placement
from graphir.passes.transform.split_rewrite import annotate_split, parallel_dims, split_node, split_reason
from graphir.simulator import SimResult, simulate


def _simulated_makespan(
    module: Module, problem: PlacementProblem, placement: Placement, congestion: str
) -> tuple[float, SimResult]:
    """Write ``placement`` on ``module`` and simulate it; an out-of-memory run counts as ``inf``."""
    assert placement.start is not None
    write_placement(module, problem, np.asarray(placement.device, dtype=np.int64), placement.start)
    result = simulate(module, congestion=congestion)
    return (math.inf if result.oom_devices else result.makespan), result


def simulated_critical_path(module: Module, result: SimResult) -> list[Node]:
    """The chain of nodes that determined the simulated makespan, first to last (see the docstring)."""
    index = module.graph.index()
    n = index.num_nodes
    if n == 0:
        return []
    names = result.device_names
    device = np.asarray([names.index(node.device) for node in index.nodes], dtype=np.int64)
    order = np.asarray([node.order for node in index.nodes], dtype=np.int64)
    previous = np.full(n, -1, dtype=np.int64)
    sequence = np.lexsort((order, device))
    for a, b in zip(sequence[:-1].tolist(), sequence[1:].tolist(), strict=True):
        if device[a] == device[b]:
            previous[b] = a
    links = LinkModel.from_cluster(module.cluster)
    start, finish = result.start, result.finish
    v = int(np.argmax(finish))
    path = [v]
    while start[v] > 0:
        best, best_time = -1, -math.inf
        for k in range(int(index.pred_offsets[v]), int(index.pred_offsets[v + 1])):
            u = int(index.pred[k])
            arrive = float(finish[u])
            if device[u] != device[v]:
                nbytes = float(index.edge_bytes[int(index.pred_edge[k])])
                arrive += links.transfer_time(nbytes, int(device[u]), int(device[v]))
            if arrive > best_time:
                best, best_time = u, arrive
        p = int(previous[v])
        if p >= 0 and finish[p] > best_time:
            best = p
        if best < 0:
            break
        v = best
        path.append(v)
    return [index.nodes[u] for u in reversed(path)]


def _candidates(module: Module, path: list[Node]) -> list[str]:
    """Names of the path's splittable ops, by decreasing compute time on their device."""
    index = module.graph.index()
    kinds = {d.name: d.kind for d in module.cluster.devices}
    rows = []
    for node in path:
        if not any(split_reason(node, dim, 2) is None for dim in parallel_dims(node)):
            continue
        cost = node.cost
        seconds = 0.0 if cost is None else cost.time(kinds.get(node.device or "")) or 0.0
        rows.append((-seconds, index.position(node), node.name))
    return [name for _, _, name in sorted(rows)]


def _trial(
    module: Module, name: str, dim: str, parts: int, ctx: PlacementContext, dpos: Dpos, congestion: str
) -> float:
    """Makespan of DPOS on a copy of ``module`` with ``name`` split on ``dim`` into ``parts``."""
    copy = clone_module(module)
    result = split_node(copy.graph.node(name), dim, parts)
    annotate_split(copy, result)
    problem = PlacementProblem.from_module(copy)
    makespan, _ = _simulated_makespan(copy, problem, dpos.place(problem, ctx), congestion)
    return makespan


def os_dpos(
    module: Module, pctx: PlacementContext, dpos: Dpos | None = None, congestion: str = "topology"
) -> tuple[PlacementProblem, Placement]:
    """FastT OS-DPOS (Algorithm 2) on ``module``, which it rewrites; returns the final problem and DPOS placement.

    ``dpos`` is the DPOS placer used at every step (its ``mem-model``); ``congestion`` the simulator's
    rule for the makespans that decide each split.
    """
    dpos = dpos or Dpos()
    problem = PlacementProblem.from_module(module)
    placement = dpos.place(problem, pctx)
    makespan, result = _simulated_makespan(module, problem, placement, congestion)
    before = makespan
    candidates = _candidates(module, simulated_critical_path(module, result))
    num_devices = problem.num_devices
    applied: list[str] = []
    trials = 0
    for name in candidates:
        node = module.graph.get_node(name)
        if node is None:
            continue
        best: tuple[float, str, int] | None = None
        for dim in parallel_dims(node):
            for parts in range(2, num_devices + 1):
                if split_reason(node, dim, parts) is not None:
                    continue
                trials += 1
                trial = _trial(module, name, dim, parts, pctx, dpos, congestion)
                if best is None or trial < best[0]:
                    best = (trial, dim, parts)
        if best is None:
            continue
        if not best[0] < makespan:
            break  # Algorithm 2 line 12: stop at the first op whose best split does not help
        _, dim, parts = best
        annotate_split(module, split_node(node, dim, parts))
        problem = PlacementProblem.from_module(module)
        placement = dpos.place(problem, pctx)
        makespan, _ = _simulated_makespan(module, problem, placement, congestion)
        applied.append(f"{name}:{dim}:{parts}")
    placement.stats.update(
        {
            "splits": len(applied),
            "split-list": ",".join(applied),
            "split-trials": trials,
            "split-candidates": len(candidates),
            "makespan-before-s": before,
            "makespan-after-s": makespan,
        }
    )
    return problem, placement


@register_pass
@dataclasses.dataclass(frozen=True)
class OsDpos(Pass):
    """FastT OS-DPOS (Algorithm 2): DPOS, then split critical-path ops while the simulated makespan improves.

    Rewrites the graph (split and concat nodes replace the split ops) and places it like
    ``place{algo=dpos}``.

    Options:
        mem_model: DPOS's memory rule (``liveness`` or the paper's whole-step ``paper``), as
            ``place{algo=dpos mem-model=...}``.
        congestion: the simulator's congestion rule for the makespans that decide each split (as
            ``simulate{congestion=...}``).
    """

    name: ClassVar[str] = "os-dpos"
    requires: ClassVar[tuple[str, ...]] = ("cost",)
    provides: ClassVar[tuple[str, ...]] = ("device", "order")
    mem_model: Literal["paper", "liveness"] = "liveness"
    congestion: Literal["pair", "port", "task", "topology"] = "topology"

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Split while it pays, then write the final DPOS placement."""
        started = time.perf_counter()
        pctx = PlacementContext(seed=ctx.seed, log=ctx.log)
        problem, placement = os_dpos(module, pctx, Dpos(mem_model=self.mem_model), self.congestion)
        ctx.log(f"os-dpos: {placement.stats['splits']} splits on {problem.num_nodes} coarse nodes")
        return PassResult(True, apply_placement(module, problem, placement, "os-dpos", started))
