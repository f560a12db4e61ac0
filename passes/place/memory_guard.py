"""The memory guard of the list schedulers under ``mem-model=liveness``: accepted means it fits in the simulator.

A list scheduler checks memory with the simulator's accounting (:class:`graphir.memory.ScheduleMemory`)
but on its *own* times: transfers on the papers' congestion-free formula (or a planned estimate,
:mod:`graphir.passes.place.transfer_plan`), coarse nodes as units. The simulator runs the same
placement with the link model's congestion, so received copies can arrive later and live longer, and
nodes can start earlier than planned; a placement that fitted in the plan can overflow a device in
the simulator (transformer_train under HEFT on the Celeritas testbed: 51.6 GB on a 32 GB GPU, with no
node placed by the all-full fallback).

The guard closes that gap with the simulator's own verdict (``ctx.simulate``: the fine graph, the
simulator's default rules, the execution order ``place`` records). After the placer's plan, the
placement is simulated; when a device overflows, the placer plans again from scratch with that
device's capacity lowered by the overflow measured (a margin, cumulative over the rounds), at most
:data:`GUARD_PLANS` plans in all. The answer is the first plan that fits in the simulator; when none
does, the plan with the least simulated overflow (bytes above capacity, summed over devices), which
is then *not accepted*: its statistics carry ``simulated-overflow-B``.

A placement is **accepted** when the placer placed no node by its all-devices-full fallback
(``best-effort-nodes`` = 0) and the guard found it within memory (no ``simulated-overflow-B``);
an accepted placement never overflows in the simulator under its default rules (property test:
tests/unit/test_place_memory_guard.py). Under ``mem-model=paper`` (the published rules) or without
a simulator (a placer called outside the ``place`` pass), the plan is returned unchanged.

**No re-plan when no placement can fit.** Every node's persistent bytes stay on its device for the
whole step, in the simulator's accounting under either rule, so the simulated peaks of *any*
placement add up to at least the graph's persistent bytes. When those exceed the devices' memory
in all (the simulator's ``persistent`` and ``memory_limit`` of the first plan: the sum of the first
does not depend on the placement), every placement overflows by at least the difference; no re-plan
can be accepted, and the first plan is returned after its one simulation (statistic
``memory-guard-bound-B``: that least overflow). This changes no accepted placement (property test:
tests/unit/test_place_memory_guard.py compares it with the loop that re-plans regardless); it
spares graphs far beyond the cluster (the 1M-node synthetic graph of ``make bench-scale``: 155 GB
of weights on 4x 17 GB) three plans and three simulations that could only trade one overflow for
another.

Statistics: ``memory-guard-plans`` (plans made; 1: the first fitted, or nothing could fit) and, when
a device still overflows, ``simulated-overflow-B`` (and ``memory-guard-bound-B`` when no placement
could fit).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from graphir.passes.place.base import Placement, PlacementContext
from graphir.passes.place.problem import PlacementProblem, list_schedule
from graphir.simulator import SimResult

GUARD_PLANS = 4
"""Plans at most: the placer's own, then up to three with the overflowing devices' capacities lowered."""


def lowered_capacity(capacity: np.ndarray, overflow: np.ndarray) -> np.ndarray:
    """``capacity`` less the simulator's measured ``overflow`` per device (never below 0): the next plan's margin."""
    return np.maximum(np.asarray(capacity, dtype=np.float64) - np.asarray(overflow, dtype=np.float64), 0.0)


def least_overflow(result: SimResult) -> int:
    """The least total overflow (bytes) *any* placement of the simulated graph has (module docstring).

    ``max(0, persistent bytes - memory of every device)``, in integers, from one simulation of any
    placement of the graph: the sum of ``result.persistent`` does not depend on the placement. 0 when
    some placement may fit. The guard (:func:`memory_guarded`) and ``auto``'s re-plans share it.
    """
    persistent = int(np.asarray(result.persistent, dtype=np.int64).sum())
    return max(persistent - int(np.asarray(result.memory_limit, dtype=np.int64).sum()), 0)


def simulated_memory(problem: PlacementProblem, ctx: PlacementContext, placement: Placement) -> tuple[np.ndarray, int]:
    """The simulator's verdict on ``placement`` (its default rules): overflow per device and the bound.

    Returns:
        ``(overflow, bound)``: bytes above capacity per device, and the least total overflow *any*
        placement of the graph has, ``max(0, persistent bytes - memory of every device)``
        (module docstring; 0 when some placement may fit).
    """
    simulate = ctx.simulator()
    device = np.asarray(placement.device, dtype=np.int64)
    start = placement.start if placement.start is not None else list_schedule(problem, device)[0]
    result = simulate(problem, device, np.asarray(start, dtype=np.float64))
    peak = np.asarray(result.peak_memory, dtype=np.float64)
    limit = np.asarray(result.memory_limit, dtype=np.float64)
    return np.maximum(peak - limit, 0.0), least_overflow(result)


def memory_guarded(
    problem: PlacementProblem,
    ctx: PlacementContext,
    mem_model: str,
    plan: Callable[[PlacementProblem], Placement],
) -> Placement:
    """``plan(problem)``, re-planned with smaller capacities until it fits in the simulator (module docstring)."""
    first = plan(problem)
    if mem_model != "liveness" or ctx.simulate is None:
        return first
    capacity = problem.capacity.astype(np.float64).copy()
    best: Placement | None = None
    best_overflow = np.inf
    placement = first
    bound = 0
    made = 0
    for made in range(1, GUARD_PLANS + 1):
        if made > 1:
            placement = plan(dataclasses.replace(problem, capacity=capacity.copy()))
        overflow, bound = simulated_memory(problem, ctx, placement)
        total = float(overflow.sum())
        if total < best_overflow:
            best, best_overflow = placement, total
        if total == 0.0 or bound > 0:  # it fits, or nothing can: no plan would be accepted
            break
        capacity = lowered_capacity(capacity, overflow)  # a margin of what the simulator measured
    assert best is not None
    stats = dict(best.stats)
    stats["memory-guard-plans"] = made
    if bound > 0:
        stats["memory-guard-bound-B"] = bound
        ctx.log(f"memory guard: the persistent bytes alone exceed the cluster's memory by {bound} B: no re-plan")
    if best_overflow > 0:
        stats["simulated-overflow-B"] = int(best_overflow)
        ctx.log(f"memory guard: {int(best_overflow)} B above capacity in the simulator after {made} plans")
    return Placement(best.device, best.start, stats)
