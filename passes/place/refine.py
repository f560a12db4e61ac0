"""``place{algo=auto}``'s refinement: a simulator-guided local search over blocks of coarse nodes.

The search improves one placement (``auto``'s best portfolio candidate) under the simulator's own
semantics: every trial is simulated (``ctx.simulate``, the fine graph, the congestion rule of the
run), and a trial is taken only when it is better by :meth:`Candidate.key` (least memory overflow,
then the smallest makespan, by more than a relative :data:`MIN_GAIN`). Nothing is estimated.

**Moves.** The current placement is cut into *blocks*: maximal runs of consecutive coarse nodes
(coarse nodes are numbered topologically) on one device, cut into pieces of at most ``size``
nodes; a block holding a member of a colocation class holds the whole class. A move sends one
block to another device that every member allows. Block sizes go from coarse to fine,
``ceil(n / 8)``, ``ceil(n / 32)``, ``ceil(n / 128)`` and 1 (:func:`block_sizes`).

**Order of a trial.** A trial keeps the current execution order: each coarse node keeps the start
time the last simulation gave its first member, raised to its coarse producers' (a consumer's first
member may start before its producer's last one), and each device runs its nodes by those keys
(ties: topological number), the moved block interleaved by its old keys. The keys never decrease
along an edge, so the order is a linear extension of the coarse DAG and a trial never deadlocks.
The first trial re-orders instead: the same devices in the rank_u list-schedule order
(:func:`graphir.passes.place.problem.list_schedule`).

**Which moves first** (critical-path guidance). The simulation's *critical chain* is walked back
from the last coarse node to finish: at each node, the predecessor (a data producer, or the node
before it on its device) that finished last. Blocks are tried in decreasing compute time on that
chain (then by position), and each block's targets (at most :data:`MAX_TARGETS`) in increasing
device busy time (then device number): moving critical work off the busiest device, or next to the
producer it waits for, comes first. While the placement overflows memory, blocks on an overflowing
device come first, biggest (persistent + activation bytes) first, to the devices with the most
memory left in the simulation.

**Sweeps.** One sweep tries every (block, target) pair once at the current size, taking each
improving move as it comes (first improvement; later blocks of the sweep see the new placement,
and a block no longer on one device is skipped). A sweep that improved is repeated at the same
size; one that did not moves to the next finer size; the search ends after a sweep at size 1 that
improved nothing (a local optimum for single-node moves) or when the allowance of simulations is
spent. Deterministic: the allowance is a count of simulations (``auto``'s work budget), there is
no randomness, and ties break by number.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator

import numpy as np

from graphir.passes.place.memory_guard import least_overflow
from graphir.passes.place.problem import PlacementProblem, list_schedule
from graphir.simulator import SimResult

MIN_GAIN = 1e-9
"""A trial must lower the makespan by more than this fraction (float noise is no improvement)."""

MAX_TARGETS = 3
"""Target devices tried per block in a sweep (the most promising ones)."""

BLOCK_DIVISORS = (8, 32, 128)
"""Block sizes ``ceil(n / k)`` tried from coarse to fine, before single nodes."""


@dataclasses.dataclass
class Candidate:
    """A simulated placement.

    Attributes:
        name: the portfolio member that produced it (kept through the refinement).
        device: device per coarse node.
        start: the start times the placement was simulated with (they fix each device's order).
        makespan: the simulator's makespan.
        overflow: bytes above capacity, summed over devices (0: fits).
        sim_start: per coarse node, its first member's simulated start, raised to its producers'
            (coarse nodes run as units, so trial orders must be topological: ties go by number).
        sim_finish: per coarse node, its last member's simulated finish.
        busy: compute seconds per device in the simulation.
        headroom: capacity minus simulated peak memory per device (negative: out of memory).
        least_overflow: the least overflow any placement of the graph has
            (:func:`graphir.passes.place.memory_guard.least_overflow`; 0: some placement may fit).
    """

    name: str
    device: np.ndarray
    start: np.ndarray
    makespan: float
    overflow: int
    sim_start: np.ndarray
    sim_finish: np.ndarray
    busy: np.ndarray
    headroom: np.ndarray
    least_overflow: int = 0

    @property
    def fits(self) -> bool:
        """Whether no device's peak exceeds its capacity."""
        return self.overflow == 0

    def key(self) -> tuple[int, float]:
        """Sort key: fitting first (least overflow), then the smallest makespan."""
        return (self.overflow, self.makespan)

    def better_than(self, other: Candidate) -> bool:
        """Less overflow, or as little and a makespan lower by more than :data:`MIN_GAIN`."""
        if self.overflow != other.overflow:
            return self.overflow < other.overflow
        return self.makespan < other.makespan * (1 - MIN_GAIN)


def candidate(
    problem: PlacementProblem, name: str, device: np.ndarray, start: np.ndarray, result: SimResult
) -> Candidate:
    """A :class:`Candidate` from a simulation of ``device`` / ``start``."""
    n = problem.num_nodes
    first = np.full(n, np.inf)
    np.minimum.at(first, problem.node_group, result.start)
    # A coarse node runs as one unit: its key must not precede a producer's (topological keys).
    sim_start = first.tolist()
    pred_offsets = problem.pred_offsets.tolist()
    pred = problem.pred.tolist()
    for v in range(n):
        for k in range(pred_offsets[v], pred_offsets[v + 1]):
            if sim_start[pred[k]] > sim_start[v]:
                sim_start[v] = sim_start[pred[k]]
    sim_finish = np.zeros(n)
    np.maximum.at(sim_finish, problem.node_group, result.finish)
    overflow = int(np.maximum(result.peak_memory - result.memory_limit, 0).sum())
    busy = np.asarray(result.busy)
    headroom = np.asarray(result.memory_limit, dtype=np.float64) - np.asarray(result.peak_memory, dtype=np.float64)
    bound = least_overflow(result)
    return Candidate(
        name, device, start, result.makespan, overflow, np.asarray(sim_start), sim_finish, busy, headroom, bound
    )


def critical_path_bound(problem: PlacementProblem, duration: np.ndarray) -> float:
    """The longest path of the fine graph with ``duration`` per fine node and free transfers.

    With the durations of one device kind (those a one-device simulation ran), a lower bound of the
    makespan of every placement on devices of that kind: a path's nodes run one after the other
    wherever they are, and a transfer only adds time. ``auto`` reports it (``auto.bound-ms``) so a
    table can tell a refinement that found nothing from one that had nothing left to find.
    """
    n = len(problem.node_group)
    if n == 0:
        return 0.0
    fine = problem.fine
    order = np.argsort(fine.edge_dst, kind="stable")
    src = fine.edge_src[order].tolist()
    offsets = np.searchsorted(fine.edge_dst[order], np.arange(n + 1)).tolist()
    time = np.asarray(duration, dtype=np.float64).tolist()
    finish = [0.0] * n
    for v in range(n):  # fine nodes are numbered topologically (the graph index)
        ready = 0.0
        for k in range(offsets[v], offsets[v + 1]):
            if finish[src[k]] > ready:
                ready = finish[src[k]]
        finish[v] = ready + time[v]
    return max(finish)


Judge = Callable[[np.ndarray, np.ndarray], Candidate]
"""``judge(device, start)``: simulate a trial placement."""


@dataclasses.dataclass
class RefineResult:
    """What the refinement did: the refined candidate, simulations run, moves taken (by kind)."""

    best: Candidate
    simulations: int = 0
    moves: int = 0
    reordered: bool = False


def block_sizes(n: int) -> list[int]:
    """Block sizes from coarse to fine for ``n`` coarse nodes, distinct, ending with 1."""
    sizes: list[int] = []
    for k in BLOCK_DIVISORS:
        size = max(1, math.ceil(n / k))
        if size not in sizes and size < n:
            sizes.append(size)
    if 1 not in sizes:
        sizes.append(1)
    return sizes


def blocks(problem: PlacementProblem, device: np.ndarray, size: int) -> list[np.ndarray]:
    """Runs of consecutive coarse nodes on one device, cut into pieces of at most ``size`` (whole classes)."""
    n = problem.num_nodes
    cuts = (np.flatnonzero(np.diff(device) != 0) + 1).tolist()
    colocation = problem.colocation
    # Members of each colocation class, found once (a block's classes are then looked up, not
    # searched for over every node: blocks x nodes on a fine problem of 100k nodes).
    colocated = np.flatnonzero(colocation >= 0)
    by_class = colocated[np.argsort(colocation[colocated], kind="stable")]
    roots, first = np.unique(colocation[by_class], return_index=True)
    bounds = np.append(first, len(by_class)).tolist()
    members = {root: by_class[bounds[k] : bounds[k + 1]] for k, root in enumerate(roots.tolist())}
    before = np.concatenate([[0], np.cumsum(colocation >= 0)]).tolist()  # colocated nodes before each node
    every = np.arange(n)
    out: list[np.ndarray] = []
    for low, high in zip([0, *cuts], [*cuts, n], strict=True):
        for k in range(low, high, size):
            block = every[k : min(k + size, high)]
            if before[min(k + size, high)] > before[k]:  # it holds colocated nodes: add their classes
                classes = colocation[block]
                one = int(classes[0])
                if one >= 0 and (classes == one).all():  # inside one class (a class of thousands: every member)
                    block = members[one]  # sorted, distinct: what the union below gives
                else:
                    joined = [members[c] for c in np.unique(classes[classes >= 0]).tolist()]
                    block = np.unique(np.concatenate([block, *joined]))  # what union1d gives: sorted, distinct
            out.append(block)
    return out


def critical_weight(problem: PlacementProblem, current: Candidate) -> np.ndarray:
    """Per coarse node, its compute time when it lies on the simulation's critical chain, else 0.

    Walked back from the coarse node that finishes last: the next node is the predecessor (data
    producer, or the node before it on its device) with the latest simulated finish (ties: the
    data producer, then the higher number).
    """
    n = problem.num_nodes
    weight = np.zeros(n)
    if n == 0:
        return weight
    device = current.device
    finish = current.sim_finish
    # The node before each node on its device, in simulated order.
    order = np.lexsort((np.arange(n), current.sim_start, device))
    before = np.full(n, -1, dtype=np.int64)
    same = device[order[1:]] == device[order[:-1]]
    before[order[1:][same]] = order[:-1][same]
    pred_offsets = problem.pred_offsets.tolist()
    pred = problem.pred.tolist()
    finish_list = finish.tolist()
    v = int(np.argmax(finish))
    seen = np.zeros(n, dtype=bool)
    while v >= 0 and not seen[v]:
        seen[v] = True
        weight[v] = problem.times[v, device[v]]
        best, best_finish = -1, -1.0
        for k in range(pred_offsets[v], pred_offsets[v + 1]):
            u = pred[k]
            if finish_list[u] > best_finish or (finish_list[u] == best_finish and u > best):
                best, best_finish = u, finish_list[u]
        b = int(before[v])
        if b >= 0 and finish_list[b] > best_finish:
            best = b
        v = best
    return weight


def _block_sums(values: np.ndarray, found: list[np.ndarray]) -> list[float]:
    """``values[block].sum()`` per block (a one-node block reads its value: the same number, no numpy call)."""
    listed = values.tolist()
    return [listed[int(block[0])] if len(block) == 1 else float(values[block].sum()) for block in found]


def moves(problem: PlacementProblem, current: Candidate, size: int) -> Iterator[tuple[np.ndarray, int]]:
    """The (block, target device) pairs of one sweep, most promising first (module docstring)."""
    device = current.device
    found = blocks(problem, device, size)
    index = np.arange(problem.num_devices)
    if current.fits:
        weight = critical_weight(problem, current)
        keys = _block_sums(weight, found)
        order = sorted(range(len(found)), key=lambda b: (-keys[b], b))
        targets = np.lexsort((index, current.busy)).tolist()
    else:  # memory first: blocks on an overflowing device, biggest first, to the roomiest devices
        over = (current.headroom < 0)[device].tolist()
        keys = _block_sums(problem.memory, found)
        order = sorted(range(len(found)), key=lambda b: (not over[int(found[b][0])], -keys[b], b))
        targets = np.lexsort((index, -current.headroom)).tolist()
    for b in order:
        block = found[b]
        source = int(device[block[0]])
        allowed = [d for d in targets if d != source and problem.allowed[block, d].all()]
        for d in allowed[:MAX_TARGETS]:
            yield block, d


def refine(problem: PlacementProblem, best: Candidate, judge: Judge, allowance: int) -> RefineResult:
    """Local search from ``best`` with at most ``allowance`` simulations (module docstring)."""
    out = RefineResult(best)
    if allowance <= 0 or problem.num_nodes == 0:
        return out
    current = best
    trial = judge(current.device, list_schedule(problem, current.device)[0])
    out.simulations += 1
    if trial.better_than(current):
        current, out.reordered = trial, True
    sizes = block_sizes(problem.num_nodes)
    level = 0
    while level < len(sizes) and out.simulations < allowance:
        improved = False
        for block, d in moves(problem, current, sizes[level]):
            if out.simulations >= allowance:
                break
            if (current.device[block] == d).all() or len(np.unique(current.device[block])) > 1:
                continue  # already there, or an earlier move of this sweep split the block
            device = current.device.copy()
            device[block] = d
            trial = judge(device, current.sim_start)
            out.simulations += 1
            if trial.better_than(current):
                current, improved = trial, True
                out.moves += 1
        if not improved:
            level += 1
    out.best = dataclasses.replace(current, name=best.name)
    return out
