"""The papers' *Expert* baseline: a contiguous layer-wise split balancing compute (``place{algo=expert}``).

Pesto §5 describes the human experts' placements: consecutive layers of a stacked network go to
consecutive devices (NMT's LSTM layers, one group per GPU), each device getting a similar share of
the work. Generalised to any graph, as the papers use it as a baseline: cut the graph's
topological order (graphir's stable numbering, which follows the model's definition order, i.e.
its layers) into ``k`` contiguous parts, part ``j`` on device ``j``, choosing the cuts that
minimise the largest part's compute time on its device (device-specific times on heterogeneous
clusters). A part must also fit in its device's memory (static count: persistent + activation
bytes of its nodes).

The optimal bottleneck is found by bisection on the bottleneck ``T``: for a fixed device order the
greedy sweep (each device takes the longest prefix whose compute stays under ``T`` and memory
under its capacity) covers the graph iff some split with bottleneck ``T`` does. Each probe is
``k`` binary searches on prefix sums, so the split is O(n + k log n log(1/eps)).

Choices (the papers do not say): the split ignores affinity and colocation; afterwards, in
topological order, a node keeps its part's device when allowed and it fits, else it goes to the
nearest allowed device (by device number) with room; the first placed member of a colocation class
decides the class's device (the whole class's memory must fit there). When no allowed device has
room, Celeritas's best effort applies: the allowed device with the most free memory. When even an
unbounded ``T`` cannot fit the graph in memory, the sweep keeps what fits and the rest falls back.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from graphir.pass_infra import Stat
from graphir.passes.place.base import Placement, PlacementContext, Placer, register_placer
from graphir.passes.place.constraints import Constraints
from graphir.passes.place.problem import PlacementProblem

__all__ = ["Expert", "balanced_split"]

_BISECTION_STEPS = 64


def _sweep(prefix_time: np.ndarray, prefix_memory: np.ndarray, capacity: np.ndarray, bound: float) -> np.ndarray:
    """Greedy cuts for bottleneck ``bound``: ``cuts[j]`` is the end of device ``j``'s part.

    Device ``j`` takes nodes ``cuts[j-1] .. cuts[j]-1``: the longest run whose compute on ``j`` is
    at most ``bound`` and whose memory fits in ``capacity[j]``.
    """
    num_devices = prefix_time.shape[0]
    cuts = np.zeros(num_devices, dtype=np.int64)
    begin = 0
    for j in range(num_devices):
        by_time = np.searchsorted(prefix_time[j], prefix_time[j, begin] + bound, side="right") - 1
        by_memory = np.searchsorted(prefix_memory, prefix_memory[begin] + capacity[j], side="right") - 1
        begin = max(begin, int(min(by_time, by_memory)))
        cuts[j] = begin
    return cuts


def balanced_split(times: np.ndarray, memory: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Contiguous split of nodes ``0..n-1`` over devices minimising the largest part's compute.

    Args:
        times: ``(n, k)`` compute time of each node on each device.
        memory: bytes of each node.
        capacity: bytes of each device.

    Returns:
        the part (device) of every node; nodes beyond what memory allows are marked -1.
    """
    n, num_devices = times.shape
    part = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return part
    prefix_time = np.concatenate((np.zeros((num_devices, 1)), np.cumsum(times.T, axis=1)), axis=1)
    prefix_memory = np.concatenate(([0.0], np.cumsum(memory)))
    high = float(prefix_time[:, -1].max())
    # Sums are compared with a slack of 1e-9 of the total work, so rounding noise in the prefix
    # sums never decides a cut; the bisection stops at that resolution.
    slack = high * 1e-9
    cuts = _sweep(prefix_time, prefix_memory, capacity, high + slack)
    if cuts[-1] == n:
        low = 0.0
        for _ in range(_BISECTION_STEPS):
            if high - low <= slack:
                break
            middle = (low + high) / 2
            if _sweep(prefix_time, prefix_memory, capacity, middle + slack)[-1] == n:
                high = middle
            else:
                low = middle
        cuts = _sweep(prefix_time, prefix_memory, capacity, high + slack)
    begin = 0
    for j, end in enumerate(cuts.tolist()):
        part[begin:end] = j
        begin = end
    return part


@register_placer
@dataclasses.dataclass(frozen=True)
class Expert(Placer):
    """Expert: contiguous split of the topological order, compute balanced, memory-aware."""

    name: ClassVar[str] = "expert"

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """The balanced split, then affinity, colocation and memory in topological order."""
        n = problem.num_nodes
        part = balanced_split(problem.times, problem.memory, problem.capacity)
        constraints = Constraints(problem)
        device = np.full(n, -1, dtype=np.int64)
        num_devices = problem.num_devices
        moved = 0
        for v in range(n):
            want = int(part[v])
            d = -1
            if constraints.pin[v] >= 0:
                d = int(constraints.pin[v])
            elif want >= 0:
                # The part's device, else the nearest allowed device with room (ties: lower number).
                for candidate in sorted(range(num_devices), key=lambda k: (abs(k - want), k)):
                    if constraints.fits(v, candidate):
                        d = candidate
                        break
                moved += int(d != want and d >= 0)
            if d < 0:
                d = constraints.fallback_device(v)
                constraints.best_effort += 1
            constraints.place(v, d)
            device[v] = d
        stats: dict[str, Stat] = {"best-effort-nodes": constraints.best_effort, "moved-nodes": moved}
        return Placement(device, None, stats)
