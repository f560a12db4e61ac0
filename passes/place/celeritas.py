"""Celeritas's placers (§5.2): ``place{algo=order-place}`` and ``place{algo=adjusting}``.

Both visit the coarse graph's nodes in CPD-TOPO order (Celeritas Algorithm 1 lines 8-23, from
:func:`graphir.passes.orders.cpd_topo`; node weight = compute time averaged over the devices, edge weight
= the cluster's mean transfer time, as the fusion pass that built the coarse graph sees them) and
schedule each one at its earliest start with insertion (eq. 7), so both return start times.

- **Order-Place** (§5.2 and §6.2.2: "we place nodes in CPD-TOPO order on one device until reaching
  its memory limit, then move on to the next device"): a current device, initially the first; a
  node that does not fit there moves the current device on to the next device (in cluster order)
  with room. A node whose affinity excludes the current device goes to the first allowed device
  with room from the current one on (then wrapping round) without moving the current device.
  When no device has room: best effort (the allowed device with the most free memory).
- **Adjusting Placement** (Algorithm 2): for each node, ``EST`` on every device by eq. (7) with
  insertion after ``pre_t``, ``+inf`` on a device that is full (lines 9-10) or excluded; ``d_k`` is
  the device of the previous node in CPD-TOPO order (the first node has none: ``d_k = d_1``);
  ``d_1`` the device with the earliest EST (ties: lowest number); ``back_cost`` by eq. (8); the
  node moves to ``d_1`` iff ``EST(d_k) - EST(d_1) > back_cost`` (eq. (9), line 15), else stays on
  ``d_k`` when ``EST(d_k)`` is finite (line 17), else best effort (line 20).

Choices where the paper is silent: eq. (8)'s ``c_{i,s}`` is "the time to send data back to d_k",
so it is computed on the link ``d_1 -> d_k`` (``latency + bytes / bandwidth`` of each outgoing
coarse edge; identical to the paper's single ``c_{i,s}`` on a homogeneous cluster; 0 for a sink).
Memory, affinity, colocation and best effort follow :mod:`graphir.passes.place.common`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from graphir.passes.orders import cpd_topo
from graphir.passes.place.base import Placement, PlacementContext, Placer, register_placer
from graphir.passes.place.common import INF, ListScheduler, argmin
from graphir.passes.place.memory_guard import memory_guarded
from graphir.passes.place.problem import PlacementProblem


def celeritas_order(problem: PlacementProblem) -> list[int]:
    """The coarse nodes in CPD-TOPO order (Algorithm 2 lines 3-4)."""
    node_time = problem.times.mean(axis=1)
    succ_comm = problem.mean_comm_times()[problem.succ_edge]
    return cpd_topo(problem.num_nodes, problem.succ_offsets, problem.succ, node_time, succ_comm).tolist()


@register_placer
@dataclasses.dataclass(frozen=True)
class OrderPlace(Placer):
    """Celeritas Order-Place: CPD-TOPO order, fill one device up to its memory, then the next.

    Options:
        mem-model: ``paper`` (each node holds persistent + activation bytes for the whole step, as
            published) or ``liveness`` (the simulator's accounting, :mod:`graphir.memory`: results
            freed after their last use; checked over each node's slot with its received copies).
        plan-congestion: how the schedule estimates transfers: ``none`` (the paper's
            congestion-free ``latency + bytes / bandwidth``) or ``pair``, ``port``, ``topology`` (planned
            on the link model's routes under that congestion rule, a busy-until per resource, one
            transfer per value and device: :mod:`graphir.passes.place.transfer_plan`).
    """

    name: ClassVar[str] = "order-place"
    mem_model: Literal["paper", "liveness"] = "liveness"
    plan_congestion: Literal["none", "pair", "port", "topology"] = "none"

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """Fill the current device in CPD-TOPO order; move on when a node does not fit."""
        return memory_guarded(problem, ctx, self.mem_model, self._plan)  # passes/place/memory_guard.py

    def _plan(self, problem: PlacementProblem) -> Placement:
        """One plan of ``problem`` (the guard may re-plan it with smaller capacities)."""
        scheduler = ListScheduler(problem, self.mem_model, self.plan_congestion)
        num_devices = problem.num_devices
        current = 0
        for v in celeritas_order(problem):
            d = scheduler.pinned(v)
            if d < 0:
                if scheduler.fits(v, current):
                    d = current
                else:
                    # From the current device on, then wrapping round: the first with room.
                    candidates = [(current + step) % num_devices for step in range(1, num_devices)]
                    d = next((c for c in candidates if scheduler.fits(v, c)), -1)
                    if d < 0:
                        scheduler.book_best_effort(v)
                        continue
                    if scheduler.allowed[v][current] and d > current:
                        current = d  # the current device is full for v: move on
            scheduler.book(v, d)
        return scheduler.placement()


@register_placer
@dataclasses.dataclass(frozen=True)
class Adjusting(Placer):
    """Celeritas Adjusting Placement (Algorithm 2, eq. (7)-(9)) with insertion slots.

    Options:
        mem-model: ``paper`` (each node holds persistent + activation bytes for the whole step, as
            published) or ``liveness`` (the simulator's accounting, :mod:`graphir.memory`: results
            freed after their last use; checked over each node's slot with its received copies).
        plan-congestion: how the schedule estimates transfers: ``none`` (the paper's
            congestion-free ``latency + bytes / bandwidth``) or ``pair``, ``port``, ``topology`` (planned
            on the link model's routes under that congestion rule, a busy-until per resource, one
            transfer per value and device: :mod:`graphir.passes.place.transfer_plan`).
    """

    name: ClassVar[str] = "adjusting"
    mem_model: Literal["paper", "liveness"] = "liveness"
    plan_congestion: Literal["none", "pair", "port", "topology"] = "none"

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """Keep the previous node's device unless waiting there costs more than sending back (eq. (9))."""
        return memory_guarded(problem, ctx, self.mem_model, self._plan)  # passes/place/memory_guard.py

    def _plan(self, problem: PlacementProblem) -> Placement:
        """One plan of ``problem`` (the guard may re-plan it with smaller capacities)."""
        scheduler = ListScheduler(problem, self.mem_model, self.plan_congestion)
        succ_offsets = scheduler.succ_offsets
        succ_edge = scheduler.succ_edge
        edge_bytes = scheduler.edge_bytes
        previous = -1
        moved = 0
        for v in celeritas_order(problem):
            est = scheduler.earliest_starts(v)  # lines 8-12, eq. (7)
            first = argmin(est)  # line 14: d_1 (ties: lowest device number)
            if first < 0:  # lines 19-20: every device is full (or excluded)
                previous = scheduler.book_best_effort(v)
                continue
            kept = previous if previous >= 0 else first  # line 13: d_k = Placement[v_{i-1}]
            if kept == first:
                d = kept
            elif est[kept] == INF:  # d_k is full: the device with room and the earliest EST
                d = first
            else:
                # Eq. (8), line 7: back_cost = max_{s in succ(v)} c_{v,s}, sent back from d_1 to d_k.
                back_cost = 0.0
                for k in range(succ_offsets[v], succ_offsets[v + 1]):
                    c = scheduler.comm_time(edge_bytes[succ_edge[k]], first, kept)
                    if c > back_cost:
                        back_cost = c
                # Eq. (9), line 15: move only if waiting on d_k costs more than sending results back.
                d = first if est[kept] - est[first] > back_cost else kept
            if d != kept:
                moved += 1
            scheduler.commit(v, d, est[d])
            previous = d
        return scheduler.placement({"moved": moved})
