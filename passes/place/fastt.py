"""FastT's Device Placement and Operation Sequencing: ``place{algo=dpos}`` (FastT §5.1, Algorithm 1).

1. Line 3: ``w_i`` = the *maximal* execution time of node ``i`` over the devices it may run on,
   ``c_{i,j}`` = the *maximal* transfer time of the edge over ordered device pairs (FastT, unlike
   HEFT, takes maxima, not means).
2. Line 4: ``rank_u(o_i) = w_i + max_{o_j in succ(o_i)} (c_{i,j} + rank_u(o_j))`` — the bottom level
   of :func:`graphir.passes.orders.tlevel_blevel` with those weights. The critical path ``SET_CP``: "the
   entry operation is selected, and then we recursively select the operation with the largest
   rank among the successors of the previous operation" (several entries: the one with the
   largest rank; ties: lowest node number).
3. Line 5, critical-path devices: "for each available device, we simulate placing as many
   remaining operations on the critical path as possible onto the device (within its memory
   capacity), and compute the average execution time of the operations on the device; we choose
   the device with the smallest average time". Runs are taken along the path from the first
   unassigned CP node; a run on ``d`` stops at the first node that does not fit in what is left of
   ``d``'s memory or whose affinity excludes ``d``. The chosen device takes its run and its memory
   is charged; the selection repeats for the rest of the path. Ties on the average time go to the
   longer run, then the lowest device number.
4. Lines 6-22: nodes by decreasing ``rank_u`` (ties: lowest number; always a topological order). A
   CP node goes to its critical-path device at its earliest start there (insertion); "when a
   critical-path device's memory is full, we find another critical-path device and assign as many
   critical-path operations to it as possible": when the node no longer fits its CP device (other
   nodes filled it meanwhile), step 3 is rerun from that node with the devices' current free
   memory. Every other node goes to the device of minimum ``EFT = EST + w_{i,d}``, ``EST`` with
   insertion (``avail[j]`` is the start of the first idle slot that holds the node), ``+inf`` on a
   device that is full (lines 13-14) or excluded by affinity.

Where FastT is silent: a CP node whose colocation class is already pinned elsewhere follows the
pin; a node that fits nowhere goes to the allowed device with the most free memory (Celeritas's
best effort, shared by all our placers; FastT gives no fallback). Memory and colocation rules are
those of :mod:`graphir.passes.place.common`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

import numpy as np

from graphir.passes.orders import tlevel_blevel
from graphir.passes.place.base import Placement, PlacementContext, Placer, register_placer
from graphir.passes.place.common import ListScheduler, ready_order
from graphir.passes.place.memory_guard import memory_guarded
from graphir.passes.place.problem import PlacementProblem


def fastt_rank(problem: PlacementProblem) -> np.ndarray:
    """FastT's rank_u with maximal compute times (over allowed devices) and maximal transfer times."""
    n = problem.num_nodes
    times = np.where(problem.allowed, problem.times, -np.inf)
    w = times.max(axis=1) if problem.num_devices else np.zeros(n)
    edge_comm = problem.links.max_transfer_times(problem.edge_bytes)  # the slowest pair, per edge
    topo = np.arange(n, dtype=np.int64)  # coarse nodes are numbered topologically
    _, rank = tlevel_blevel(n, problem.succ_offsets, problem.succ, w, edge_comm[problem.succ_edge], topo)
    return rank


def critical_path(problem: PlacementProblem, rank: np.ndarray) -> list[int]:
    """FastT's critical path: the entry with the largest rank, then the successor with the largest rank."""
    n = problem.num_nodes
    if n == 0:
        return []
    indegree = np.bincount(problem.edge_dst, minlength=n) if len(problem.edge_dst) else np.zeros(n, dtype=np.int64)
    entries = np.flatnonzero(indegree == 0)
    v = int(entries[np.argmax(rank[entries])])  # argmax: the first (lowest number) on ties
    path = [v]
    offsets = problem.succ_offsets
    while offsets[v + 1] > offsets[v]:
        succ = problem.succ[offsets[v] : offsets[v + 1]]
        best = succ[rank[succ] == rank[succ].max()].min()
        v = int(best)
        path.append(v)
    return path


def select_cp_devices(scheduler: ListScheduler, path: list[int], begin: int) -> dict[int, int]:
    """Algorithm 1 line 5: critical-path devices for ``path[begin:]`` given the current free memory.

    Returns:
        ``{node: device}`` for the CP nodes some device can take; a node no device can take is
        left out (it is then placed by the minimum-EFT rule and its fallback).
    """
    free = scheduler.constraints.free_memory()
    times = scheduler.times
    allowed = scheduler.allowed
    # Under mem-model=liveness a run keeps only its persistent bytes for the whole step (its
    # activations are freed after their last use); the exact check happens when each node is booked.
    memory = scheduler.memory if scheduler.liveness is None else scheduler.problem.persistent.tolist()
    assignment: dict[int, int] = {}
    j = begin
    while j < len(path):
        best: tuple[float, int, int] | None = None  # (average time, -run length, device)
        for d in scheduler.devices:
            used = 0.0
            total = 0.0
            k = j
            while k < len(path) and allowed[path[k]][d] and used + memory[path[k]] <= free[d]:
                used += memory[path[k]]
                total += times[path[k]][d]
                k += 1
            if k > j and (best is None or (total / (k - j), j - k, d) < best):
                best = (total / (k - j), j - k, d)
        if best is None:
            j += 1
            continue
        _, minus_length, d = best
        end = j - minus_length
        for u in path[j:end]:
            assignment[u] = d
            free[d] -= memory[u]
        j = end
    return assignment


@register_placer
@dataclasses.dataclass(frozen=True)
class Dpos(Placer):
    """FastT DPOS (Algorithm 1): rank_u priority, critical-path devices, minimum EFT with insertion.

    Options:
        mem-model: ``paper`` (each node holds persistent + activation bytes for the whole step, as
            published) or ``liveness`` (the simulator's accounting, :mod:`graphir.memory`: results
            freed after their last use; checked over each node's slot with its received copies).
        plan-congestion: how the schedule estimates transfers: ``none`` (the paper's
            congestion-free ``latency + bytes / bandwidth``) or ``pair``, ``port``, ``topology`` (planned
            on the link model's routes under that congestion rule, a busy-until per resource, one
            transfer per value and device: :mod:`graphir.passes.place.transfer_plan`).
    """

    name: ClassVar[str] = "dpos"
    mem_model: Literal["paper", "liveness"] = "liveness"
    plan_congestion: Literal["none", "pair", "port", "topology"] = "none"

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """Critical-path nodes on their critical-path devices, the others on their minimum-EFT device."""
        return memory_guarded(problem, ctx, self.mem_model, self._plan)  # passes/place/memory_guard.py

    def _plan(self, problem: PlacementProblem) -> Placement:
        """One plan of ``problem`` (the guard may re-plan it with smaller capacities)."""
        scheduler = ListScheduler(problem, self.mem_model, self.plan_congestion)
        rank = fastt_rank(problem)
        path = critical_path(problem, rank)
        position = {v: i for i, v in enumerate(path)}
        cp_device = select_cp_devices(scheduler, path, 0)
        reselections = 0
        for v in ready_order(problem, rank):
            i = position.get(v, -1)
            if i < 0:
                scheduler.book_min_eft(v)  # lines 12-20
                continue
            d = scheduler.pinned(v)
            if d < 0:
                d = cp_device.get(v, -1)
                if d >= 0 and not scheduler.fits(v, d):
                    # The CP device is full: "find another critical-path device" for the rest of the path.
                    for u in path[i:]:
                        cp_device.pop(u, None)
                    cp_device.update(select_cp_devices(scheduler, path, i))
                    reselections += 1
                    d = cp_device.get(v, -1)
                    if d >= 0 and not scheduler.fits(v, d):
                        d = -1
            if d < 0:
                scheduler.book_min_eft(v)
            else:
                scheduler.book(v, d)  # line 10, started at its earliest slot on the CP device
        return scheduler.placement({"critical-path-nodes": len(path), "cp-reselections": reselections})
