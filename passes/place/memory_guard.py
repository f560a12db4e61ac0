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

Statistics: ``memory-guard-plans`` (plans made; 1: the first fitted) and, when a device still
overflows, ``simulated-overflow-B``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from graphir.passes.place import Placement, PlacementContext
from graphir.passes.place.problem import PlacementProblem, list_schedule

GUARD_PLANS = 4
"""Plans at most: the placer's own, then up to three with the overflowing devices' capacities lowered."""


def lowered_capacity(capacity: np.ndarray, overflow: np.ndarray) -> np.ndarray:
    """``capacity`` less the simulator's measured ``overflow`` per device (never below 0): the next plan's margin."""
    return np.maximum(np.asarray(capacity, dtype=np.float64) - np.asarray(overflow, dtype=np.float64), 0.0)


def simulated_overflow(problem: PlacementProblem, ctx: PlacementContext, placement: Placement) -> np.ndarray:
    """Bytes above capacity per device when the simulator runs ``placement`` (its default rules)."""
    simulate = ctx.simulator()
    device = np.asarray(placement.device, dtype=np.int64)
    start = placement.start if placement.start is not None else list_schedule(problem, device)[0]
    result = simulate(problem, device, np.asarray(start, dtype=np.float64))
    peak = np.asarray(result.peak_memory, dtype=np.float64)
    limit = np.asarray(result.memory_limit, dtype=np.float64)
    return np.maximum(peak - limit, 0.0)


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
    for made in range(1, GUARD_PLANS + 1):
        if made > 1:
            placement = plan(dataclasses.replace(problem, capacity=capacity.copy()))
        overflow = simulated_overflow(problem, ctx, placement)
        total = float(overflow.sum())
        if total < best_overflow:
            best, best_overflow = placement, total
        if total == 0.0:
            break
        capacity = lowered_capacity(capacity, overflow)  # a margin of what the simulator measured
    assert best is not None
    stats = dict(best.stats)
    stats["memory-guard-plans"] = made
    if best_overflow > 0:
        stats["simulated-overflow-B"] = int(best_overflow)
        ctx.log(f"memory guard: {int(best_overflow)} B above capacity in the simulator after {made} plans")
    return Placement(best.device, best.start, stats)
