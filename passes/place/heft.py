"""HEFT, insertion-based (Topcuoglu, Hariri and Wu, TPDS 2002): ``place{algo=heft}``.

1. Priority: ``rank_u(n_i) = w̄_i + max_{n_j in succ(n_i)} (c̄_{i,j} + rank_u(n_j))`` with ``w̄`` the
   compute time averaged over the devices and ``c̄`` the transfer time averaged over ordered device
   pairs (:func:`graphir.passes.place.problem.upward_rank`).
2. The nodes are taken by decreasing ``rank_u`` (ties: lowest node number; always a topological
   order, see :func:`graphir.passes.place.common.ready_order`).
3. Each goes to the device of minimum ``EFT(n_i, p_j) = w_{i,j} + EST(n_i, p_j)`` where
   ``EST(n_i, p_j) = max(avail[j], max_{n_m in pred(n_i)} (AFT(n_m) + c_{m,i}))`` and ``avail[j]`` is
   found by the *insertion* policy: the first idle slot after the data-ready time long enough to
   hold the node (ties between devices: lowest number).

HEFT knows no memory, affinity or colocation; graphir's placers all honour them, so a device that is
full or excluded gets ``EFT = +inf``, a colocation class follows its first placed member, and a node
that fits nowhere goes to the allowed device with the most free memory (the shared rules of
:mod:`graphir.passes.place.common`). Without memory pressure or constraints this is plain HEFT.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from graphir.passes.place.base import Placement, PlacementContext, Placer, register_placer
from graphir.passes.place.common import ListScheduler, ready_order
from graphir.passes.place.memory_guard import memory_guarded
from graphir.passes.place.problem import PlacementProblem, upward_rank


@register_placer
@dataclasses.dataclass(frozen=True)
class Heft(Placer):
    """Insertion-based HEFT: rank_u priority, minimum EFT device.

    Options:
        mem-model: ``paper`` (each node holds persistent + activation bytes for the whole step, as
            published) or ``liveness`` (the simulator's accounting, :mod:`graphir.memory`: results
            freed after their last use; checked over each node's slot with its received copies).
        plan-congestion: how the schedule estimates transfers: ``none`` (the paper's
            congestion-free ``latency + bytes / bandwidth``) or ``pair``, ``port``, ``topology`` (planned
            on the link model's routes under that congestion rule, a busy-until per resource, one
            transfer per value and device: :mod:`graphir.passes.place.transfer_plan`).
    """

    name: ClassVar[str] = "heft"
    mem_model: Literal["paper", "liveness"] = "liveness"
    plan_congestion: Literal["none", "pair", "port", "topology"] = "none"

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """Book the nodes by decreasing rank_u, each on its minimum-EFT device."""
        return memory_guarded(problem, ctx, self.mem_model, self._plan)  # passes/place/memory_guard.py

    def _plan(self, problem: PlacementProblem) -> Placement:
        """One plan of ``problem`` (the guard may re-plan it with smaller capacities)."""
        scheduler = ListScheduler(problem, self.mem_model, self.plan_congestion)
        for v in ready_order(problem, upward_rank(problem)):
            scheduler.book_min_eft(v)
        return scheduler.placement()
