"""``place{algo=auto}``'s second refinement stage: offloading slack work of the fine graph.

Why a second stage. ``auto`` places the graph the user coarsened (``fuse,place``): after
``fuse{algo=cpd-topo}`` the zoo's training graphs have 8 to 129 coarse nodes, each a window of
consecutive nodes of a topological order that mixes the critical path with work off it. The first
stage (:mod:`graphir.passes.place.refine`) moves whole coarse nodes; on those graphs it reaches a
local optimum or runs out of simulations with nothing gained (benchmarks/results/placement-refine.md):
a coarse node sent to another device takes its critical work and its transfers along. This stage
splits coarse nodes: it works on the fine graph (:func:`fine_problem`: every fine node its own
coarse node) and returns a placement of it (``Placement.problem``), so ``place`` writes a device per
fine node. Every trial is simulated as in the first stage (the same simulator, congestion rule and
:meth:`Candidate.better_than`: memory first, then makespan); nothing is estimated but the order of
the trials.

**Which nodes.** The critical path method (Kelley and Walker, 1959; :func:`slack_times`), on the fine
graph with the durations of the last simulation and free transfers, gives every node its *float*:
``LST(v) - EST(v)``, how much later it could start without lengthening the longest path. Nodes on
the longest path (float 0) stay where they are: moving one adds its transfers to that path. A node
off it, with float larger than its cheapest transfer (the bytes it reads plus those it writes, over
the fastest link from its device, :meth:`graphir.links.LinkModel.transfer_time`), can run elsewhere
and leave its device to the critical work: on a training graph these are the weight-gradient
branches of the backward pass (resnet50_train: 94 of its 484 ms on one device). Candidates are those
nodes on the busiest device (most compute seconds in the simulation), heaviest first; nodes of a
colocation class stay.

**Moves.** A chunk of the candidate list is moved at once (one simulation): each node, in
topological order, goes to the device of a producer moved in the same chunk (a branch moves
together, its internal values never cross a link), else to the device where it would finish
earliest by compute load (simulated busy seconds plus the chunk's nodes assigned so far). Trials keep
the execution order of the last simulation (every fine node keyed by its simulated start, ties by
topological number: a topological order, so no trial deadlocks). The chunk size is searched by
halving: the first chunk holds the heaviest candidates with half of their compute; a chunk that
improves is taken and the next is twice as large, one that does not is halved, a single node that
does not improve is left out. After a taken move the floats are recomputed (the durations may have
changed with the device kind) and the busiest device chosen again. The stage ends when no candidate
is left or the allowance of simulations is spent. Deterministic: no randomness, ties by number.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from graphir.index import quotient_edges
from graphir.passes.place.problem import PlacementProblem, graph_fields
from graphir.passes.place.refine import Candidate


def fine_problem(problem: PlacementProblem, duration: np.ndarray) -> PlacementProblem:
    """``problem`` with every fine node its own coarse node (the fine graph is numbered topologically).

    ``duration`` is a simulated duration per fine node (one simulation's ``finish - start``); a fine
    node's compute time on device ``d`` is its coarse node's ``times[g, d]`` apportioned by those
    durations (evenly when the coarse node's durations sum to 0). Memory, persistent bytes,
    affinity, colocation and hints are the coarse node's: memory and persistent bytes apportioned
    evenly (the refinement does not read them: the simulator accounts memory), ``allowed``,
    ``colocation`` (a colocation class keeps every member of a coarse node that holds one of its
    nodes) and ``preferred`` copied.
    """
    group = problem.node_group
    n = len(group)
    fine = problem.fine
    weight = np.asarray(duration, dtype=np.float64).copy()
    weight[weight < 0] = 0.0
    total = np.bincount(group, weights=weight, minlength=problem.num_nodes)
    count = np.bincount(group, minlength=problem.num_nodes).astype(np.float64)
    share = np.where(total[group] > 0, weight / np.where(total[group] > 0, total[group], 1.0), 1.0 / count[group])
    return dataclasses.replace(
        problem,
        num_nodes=n,
        # The fine graph as its own quotient: one edge per (producer, consumer) pair.
        **graph_fields(
            n, *quotient_edges(np.arange(n), n, fine.edge_src, fine.edge_dst, fine.edge_value, fine.value_bytes)
        ),
        times=problem.times[group] * share[:, None],
        memory=problem.memory[group] / count[group],
        persistent=problem.persistent[group] / count[group],
        allowed=problem.allowed[group],
        colocation=np.where(problem.colocation[group] >= 0, problem.colocation[group], -1),
        members=[[u] for u in range(n)],
        node_group=np.arange(n, dtype=np.int64),
        preferred=problem.preferred[group],
    )


def slack_times(problem: PlacementProblem, duration: np.ndarray) -> tuple[np.ndarray, float]:
    """Per node of ``problem`` (numbered topologically), its total float; and the critical-path length.

    The critical path method (Kelley and Walker) with free transfers and no device contention:
    ``EST(v) = max_{u -> v} EST(u) + w(u)``, the length ``L = max_v EST(v) + w(v)``,
    ``LST(v) = min_{v -> s} LST(s) - w(v)`` (``L - w(v)`` at an exit), float ``LST(v) - EST(v)``.
    A node of float 0 lies on a longest path; a node of float ``f`` may start up to ``f`` later
    (for instance after its inputs crossed a link) without lengthening that bound.
    """
    n = problem.num_nodes
    w = np.asarray(duration, dtype=np.float64).tolist()
    pred_offsets = problem.pred_offsets.tolist()
    pred = problem.pred.tolist()
    est = [0.0] * n
    for v in range(n):
        ready = 0.0
        for k in range(pred_offsets[v], pred_offsets[v + 1]):
            u = pred[k]
            if est[u] + w[u] > ready:
                ready = est[u] + w[u]
        est[v] = ready
    length = max((est[v] + w[v] for v in range(n)), default=0.0)
    succ_offsets = problem.succ_offsets.tolist()
    succ = problem.succ.tolist()
    lst = [0.0] * n
    for v in range(n - 1, -1, -1):
        late = length
        for k in range(succ_offsets[v], succ_offsets[v + 1]):
            if lst[succ[k]] < late:
                late = lst[succ[k]]
        lst[v] = late - w[v]
    return np.asarray(lst) - np.asarray(est), length


def node_bytes(problem: PlacementProblem) -> np.ndarray:
    """Per fine node, the bytes of the distinct values it reads plus those it produces (what a move may send)."""
    fine = problem.fine
    n = len(problem.node_group)
    value_bytes = fine.value_bytes.astype(np.float64)
    out = np.bincount(fine.value_producer, weights=value_bytes, minlength=n)[:n]
    data = ~fine.edge_control
    reads = np.unique(np.stack([fine.edge_dst[data], fine.edge_value[data]]), axis=1)
    return out + np.bincount(reads[0], weights=value_bytes[reads[1]], minlength=n)[:n]


FineJudge = Callable[[np.ndarray, np.ndarray], Candidate]
"""``judge(device, start)`` per fine node: simulate a trial placement of the fine problem."""


@dataclasses.dataclass
class OffloadResult:
    """What the offloading stage did: the best candidate (fine problem), simulations, moves, nodes moved."""

    best: Candidate
    simulations: int = 0
    moves: int = 0
    moved: int = 0


def offload_order(
    problem: PlacementProblem, current: Candidate, slack: np.ndarray, nbytes: np.ndarray, source: int, skip: np.ndarray
) -> list[int]:
    """The nodes of ``source`` worth sending elsewhere, most compute first (see :func:`offload`)."""
    duration = current.sim_finish - current.sim_start
    on = np.flatnonzero((current.device == source) & (duration > 0) & ~skip & (problem.colocation < 0) & (slack > 0))
    links = problem.links
    keep: list[int] = []
    slack_list = slack.tolist()
    bytes_list = nbytes.tolist()
    allowed = problem.allowed
    for v in on.tolist():
        cheapest = min(
            (
                links.transfer_time(bytes_list[v], source, d)
                for d in range(problem.num_devices)
                if d != source and allowed[v, d]
            ),
            default=np.inf,
        )
        if cheapest < slack_list[v]:
            keep.append(v)
    return sorted(keep, key=lambda v: (-float(duration[v]), v))


def assign(problem: PlacementProblem, current: Candidate, chunk: list[int], source: int) -> np.ndarray:
    """``current``'s devices with ``chunk`` moved off ``source`` (module docstring, "Moves").

    Each node, in topological order, follows a producer moved before it, else goes where it would
    finish earliest by compute load.
    """
    device = current.device.copy()
    load = current.busy.astype(np.float64).copy()
    pred_offsets = problem.pred_offsets.tolist()
    pred = problem.pred.tolist()
    moved = set()
    for v in sorted(chunk):
        target = -1
        for k in range(pred_offsets[v], pred_offsets[v + 1]):
            u = pred[k]
            if u in moved and problem.allowed[v, device[u]]:
                target = int(device[u])
                break
        if target < 0:
            options = [d for d in range(problem.num_devices) if d != source and problem.allowed[v, d]]
            target = min(options, key=lambda d: (load[d] + problem.times[v, d], d))
        device[v] = target
        load[target] += problem.times[v, target]
        moved.add(v)
    return device


def offload(problem: PlacementProblem, start: Candidate, judge: FineJudge, allowance: int) -> OffloadResult:
    """Offload slack work from the busiest device, ``allowance`` simulations at most (module docstring).

    ``start`` is a simulated candidate of ``problem`` (a fine problem); the result's ``best`` is
    ``start`` when no trial improved on it.
    """
    out = OffloadResult(start)
    current = start
    n = problem.num_nodes
    skip = np.zeros(n, dtype=bool)
    nbytes = node_bytes(problem)
    slack, _ = slack_times(problem, current.sim_finish - current.sim_start)
    size = 0
    while out.simulations < allowance:
        source = int(np.lexsort((np.arange(problem.num_devices), -current.busy))[0])
        order = offload_order(problem, current, slack, nbytes, source, skip)
        if not order:
            break
        if size == 0:  # first chunk: the heaviest nodes holding half of the candidates' compute
            work = np.cumsum((current.sim_finish - current.sim_start)[order])
            size = int(np.searchsorted(work, work[-1] / 2)) + 1
        size = min(size, len(order))
        chunk = order[:size]
        trial = judge(assign(problem, current, chunk, source), current.sim_start)
        out.simulations += 1
        if trial.better_than(current):
            current = trial
            out.moves += 1
            out.moved += len(chunk)
            size *= 2
            slack, _ = slack_times(problem, current.sim_finish - current.sim_start)
        elif size == 1:
            skip[chunk[0]] = True
        else:
            size //= 2
    out.best = current
    return out
