"""Baechi's memory-constrained placers (Jeon et al., SoCC 2020): ``m-topo``, ``m-etf``, ``m-sct``.

The papers in ``shared/papers`` describe them as baselines (Celeritas §2, §4.2.2 and §6; Moirai §II;
Pesto §5); the rules below follow Baechi's paper and its open-source placer:

* **m-TOPO** (:func:`place_m_topo`): walk Baechi's topological order (M-TOPO, a FIFO Kahn queue,
  :func:`graphir.passes.orders.m_topo`) and fill device 0, then device 1, ... each up to its *memory share*
  ``total memory / number of devices + largest node memory`` (Baechi's uniform m-TOPO); a node that
  does not fit on the current device moves the cursor to the next device for good. No schedule:
  the framework's list scheduler orders each device.
* **m-ETF** (:func:`place_m_etf`): earliest-task-first list scheduling (Hwang et al.) as Baechi
  runs it, an event-driven simulation: a node is *ready* once all its predecessors have finished;
  whenever devices are free, the (ready node, device) pair with the earliest schedulable start
  ``max(data ready time on the device, device free time)`` is scheduled (ties: M-TOPO position,
  then device number), provided the node's memory fits on the device.
* **m-SCT** (:func:`place_m_sct`): m-ETF plus the *favourite child* of Hanen & Munier's SCT
  algorithm. The favourite child comes from the LP relaxation of the small-communication-time
  program (:func:`graphir.passes.place.sct_lp.favourite_children`, solved with HiGHS through
  :func:`scipy.optimize.linprog`).
  A free device whose last node's favourite child is ready, unplaced and can start earliest on this
  device is *awake*: it runs only an *urgent* node (one whose start time is the same whatever device
  it goes to, i.e. ``max over devices of the schedulable start <= now``) or waits for the
  favourite child.

Constraints, common to the three (and to every list-scheduling placer; the bookkeeping is the one
constraint kernel, :class:`graphir.passes.place.constraints.Constraints`):

* **Affinity**: a node only goes to a device in ``problem.allowed``.
* **Colocation**: the first placed member of a colocation class decides the device of the whole
  class (Baechi's rule, Celeritas §6.1); the memory of the *whole class* must fit there, later
  members follow without a memory check.
* **Memory**: m-TOPO counts each node's memory (persistent + activation) for good, as Baechi's
  m-TOPO does. m-ETF/m-SCT under ``mem-model=paper`` follow Baechi's ETF device model: running a
  node allocates its memory, and a node's activation bytes are released once all its consumers
  have run (persistent bytes stay). Under ``mem-model=liveness`` (their default) they ask the
  simulator's accounting (:mod:`graphir.memory`) over the node's slot instead, received copies
  included, so a placement they accept without the fallback fits in the simulator.
  **Fallback** (Celeritas §6.1 "best effort"): when a node fits on no allowed device, it goes
  to the allowed device with the most free memory (Baechi itself gives up); the simulator then
  reports the OOM.

Choices where the papers are vague (documented deviations):

* Communication in the placers' own time estimates is congestion-free, ``latency + bytes /
  bandwidth`` per coarse edge (ETF's model); Baechi's estimator also queues transfers per device.
  ``plan-congestion=pair|port|topology`` plans them on the link model's routes instead, one per
  value and device (:mod:`graphir.passes.place.transfer_plan`). The simulator judges either way.
* Heterogeneous clusters: ETF/SCT use each device's own compute time; the SCT LP (which assumes
  identical machines) uses the mean time over devices and the mean communication time over device
  pairs (as :func:`graphir.passes.place.problem.upward_rank` does).
* LP rounding: an edge is a favourite-child edge when its relaxed variable is ``<= 0.5`` (Baechi
  rounds with threshold 0.5). Rounding may give a node two favourite children (or a child two
  favourite parents) at exact ties; Baechi lets the last edge win, here edges are accepted in
  increasing LP value (ties: edge number) while both ends are free, so the result is a matching.
* The memory share of m-TOPO is capped by each device's capacity (Baechi assumes the share fits).
  A node whose affinity excludes the cursor device goes to the first allowed device, from the
  cursor on (then wrapping), that has room, without moving the cursor.
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from collections.abc import Callable
from typing import ClassVar, Literal

import numpy as np

from graphir.errors import PassError
from graphir.passes.orders import m_topo, positions
from graphir.passes.place.base import Placement, PlacementContext, Placer, register_placer
from graphir.passes.place.constraints import Constraints
from graphir.passes.place.memory_guard import memory_guarded
from graphir.passes.place.problem import PlacementProblem
from graphir.passes.place.sct_lp import favourite_children, solve_favourite_lp
from graphir.passes.place.transfer_plan import TransferPlan

__all__ = [
    "MEtf",
    "MSct",
    "MTopo",
    "favourite_children",
    "solve_favourite_lp",
]


def _m_topo_priority(problem: PlacementProblem) -> np.ndarray:
    """Position of each coarse node in Baechi's M-TOPO order (its tie-breaking priority)."""
    return positions(m_topo(problem.num_nodes, problem.succ_offsets, problem.succ))


# ---------------------------------------------------------------------------------------------
# m-TOPO


@register_placer
@dataclasses.dataclass(frozen=True)
class MTopo(Placer):
    """Baechi's m-TOPO: fill devices in order along the M-TOPO order up to an equal memory share.

    Baechi (uniform m-TOPO): ``share = sum of node memory / number of devices + max node memory``;
    nodes are taken in topological order and device ``d`` receives them until the next one does
    not fit under the share, then the cursor moves to device ``d + 1`` and never comes back.
    """

    name: ClassVar[str] = "m-topo"

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """Walk the M-TOPO order with a device cursor bounded by the memory share."""
        n = problem.num_nodes
        num_devices = problem.num_devices
        order = m_topo(n, problem.succ_offsets, problem.succ).tolist()
        memory = problem.memory
        share = (float(memory.sum()) / num_devices + float(memory.max())) if n else 0.0
        limit = np.minimum(share, problem.capacity)
        constraints = Constraints(problem)
        device = np.full(n, -1, dtype=np.int64)
        cursor = 0
        for v in order:
            d, cursor = _m_topo_device(constraints, v, cursor, limit)
            if d < 0:
                d = constraints.fallback_device(v)
                constraints.best_effort += 1
            constraints.place(v, d)
            device[v] = d
        return Placement(device, None, {"best-effort-nodes": constraints.best_effort, "memory-share-B": int(share)})


def _m_topo_device(constraints: Constraints, v: int, cursor: int, limit: np.ndarray) -> tuple[int, int]:
    """The device m-TOPO gives ``v`` and the new cursor (device -1: no allowed device has room)."""
    problem = constraints.problem
    pinned = int(constraints.pin[v])
    if pinned >= 0:
        return pinned, cursor  # a later member of a placed colocation class
    num_devices = problem.num_devices
    # Baechi's rule: the cursor device while the node fits under its share, else move the cursor
    # on for good, as long as the node may run there.
    while problem.allowed[v, cursor]:
        if constraints.fits(v, cursor, limit):
            return cursor, cursor
        if cursor == num_devices - 1:
            break
        cursor += 1
    # Affinity excludes the cursor device (or the last device is full): any allowed device with
    # room, from the cursor on, then wrapping; the cursor stays.
    for d in list(range(cursor, num_devices)) + list(range(cursor)):
        if constraints.fits(v, d, limit):
            return d, cursor
    return -1, cursor


# ---------------------------------------------------------------------------------------------
# m-ETF and m-SCT: one event-driven scheduler


class _ReadySet:
    """Ready nodes in a dense array with O(1) insertion and removal (order is arbitrary)."""

    def __init__(self, n: int):
        self.nodes = np.zeros(max(n, 1), dtype=np.int64)
        self.where = [-1] * n
        self.count = 0

    def add(self, v: int) -> None:
        self.nodes[self.count] = v
        self.where[v] = self.count
        self.count += 1

    def remove(self, v: int) -> None:
        k = self.where[v]
        last = int(self.nodes[self.count - 1])
        self.nodes[k] = last
        self.where[last] = k
        self.where[v] = -1
        self.count -= 1

    def view(self) -> np.ndarray:
        return self.nodes[: self.count]


def _etf_schedule(
    problem: PlacementProblem, favourite: np.ndarray | None, mem_model: str = "paper", plan_congestion: str = "none"
) -> tuple[np.ndarray, np.ndarray, int]:
    """Baechi's ETF (``favourite is None``) or SCT event-driven placement and schedule.

    Under ``mem_model="paper"`` memory is Baechi's ETF device (see the module docstring). Under
    ``"liveness"`` a (ready node, device) pair is feasible when the simulator's accounting on the
    device (:class:`graphir.passes.place.constraints.CoarseScheduleMemory`) has room for the node
    over ``[start, start + time)`` at the pair's schedulable start, with the copies of its inputs
    it would receive there (sent when their producer finished, arriving after the coarse edge's
    transfer time: the data-ready term); committing books those allocations. A pair's answer is
    cached while the device's ledger is unchanged (its version; a start on ``d`` changes only when
    a node is placed there, which changes the ledger too).

    Under ``plan_congestion`` other than ``none`` the data-ready times come from a
    :class:`graphir.passes.place.transfer_plan.TransferPlan` (transfers on the link model's routes,
    a busy-until per resource), recomputed for the ready nodes whenever a booking moved a resource's
    busy-until; running a node books the transfers of its inputs.

    Returns:
        ``(device, start, best_effort)``: device and start time per coarse node, and the number of
        nodes placed by the memory fallback.
    """
    n = problem.num_nodes
    num_devices = problem.num_devices
    times = problem.times
    activation = (problem.memory - problem.persistent).tolist()
    links = problem.links
    plan = TransferPlan(problem, plan_congestion) if plan_congestion != "none" else None
    planned_version = -1  # the plan's version the ready nodes' data-ready rows were computed at
    priority = _m_topo_priority(problem)
    constraints = Constraints(problem, mem_model)
    pin = constraints.pin  # updated in place by the kernel
    liveness = constraints.schedule_memory  # None under the paper rule
    allowed = problem.allowed
    fits_cache: dict[tuple[int, int], tuple[object, bool]] = {}  # liveness: (ledger [and plan] version, answer)
    ledgers = liveness.ledgers if liveness is not None else []
    devices = list(range(num_devices))
    in_bytes: list[dict[int, float]] = [{} for _ in range(n)]  # per ready node: bytes from each producer

    pred_offsets = problem.pred_offsets.tolist()
    pred = problem.pred
    pred_edge = problem.pred_edge
    succ_offsets = problem.succ_offsets.tolist()
    succ = problem.succ.tolist()
    edge_bytes = problem.edge_bytes
    pending = np.diff(problem.pred_offsets).tolist()
    consumers_left = np.diff(problem.succ_offsets).tolist()
    device_arange = np.arange(num_devices)

    device = np.full(n, -1, dtype=np.int64)
    start = np.zeros(n)
    finish = np.zeros(n)
    data_ready = np.zeros((n, num_devices))  # per ready node: when all its inputs can be on each device
    free_at = np.zeros(num_devices)  # Baechi's next_available_ts
    last_op = [-1] * num_devices
    ready = _ReadySet(n)
    is_ready = [False] * n
    events: list[tuple[float, int, int]] = []  # (finish time, sequence, node)
    for v in range(n):
        if pending[v] == 0:
            ready.add(v)
            is_ready[v] = True
    fav = favourite.tolist() if favourite is not None else None

    def make_ready(v: int) -> None:
        lo, hi = pred_offsets[v], pred_offsets[v + 1]
        producers = pred[lo:hi]
        where = device[producers]
        # ETF's data ready time: max over inputs of producer finish + transfer (0 on one device).
        arrive = links.arrivals(
            finish[producers][:, None], edge_bytes[pred_edge[lo:hi]][:, None], where[:, None], device_arange[None, :]
        )
        data_ready[v] = arrive.max(axis=0) if plan is None else plan.data_ready(v, device, finish)
        if liveness is not None:
            in_bytes[v] = dict(zip(producers.tolist(), edge_bytes[pred_edge[lo:hi]].tolist(), strict=True))
        ready.add(v)
        is_ready[v] = True

    def received(v: int, d: int) -> list[tuple[int, float, float]]:
        """``(value, begin, end)`` of every value ``v`` reads from another device, were it on ``d``."""
        assert liveness is not None
        if plan is not None:
            return plan.received(v, d, device, finish)
        out: list[tuple[int, float, float]] = []
        for x, p in liveness.incoming[v]:
            dp = int(device[p])
            if dp != d:
                sent = float(finish[p])
                out.append((x, sent, sent + links.transfer_time(in_bytes[v].get(p, 0.0), dp, d)))
        return out

    def fits_memory(v: int, d: int, begin: float) -> bool:
        """Liveness: whether unpinned ``v`` fits on ``d`` over its slot from ``begin`` (cached per ledger version)."""
        version = ledgers[d].version if plan is None else (ledgers[d].version, plan.version)
        cached = fits_cache.get((v, d))
        if cached is None or cached[0] != version:
            cached = (version, constraints.fits_at(v, d, begin, begin + float(times[v, d]), received(v, d)))
            fits_cache[(v, d)] = cached
        return cached[1]

    def placeable(nodes: np.ndarray) -> np.ndarray:
        """Affinity and colocation pins for every (node, device), memory aside."""
        pinned = pin[nodes]
        return allowed[nodes] & np.where((pinned >= 0)[:, None], device_arange[None, :] == pinned[:, None], True)

    def any_awake(nodes: np.ndarray, begin: np.ndarray, free: np.ndarray) -> bool:
        """Liveness SCT: whether some free device is awake (see :func:`_choose`), checking only favourite rows."""
        assert fav is not None
        for d in np.flatnonzero(free).tolist():
            if last_op[d] < 0:
                continue
            f = fav[last_op[d]]
            if f < 0 or not is_ready[f] or pin[f] >= 0:
                continue
            row = ready.where[f]
            ok = placeable(nodes[row : row + 1])[0]
            starts = [
                float(begin[row, e]) if ok[e] and fits_memory(f, e, float(begin[row, e])) else np.inf for e in devices
            ]
            if starts[d] < np.inf and starts[d] == min(starts):
                return True
        return False

    def feasible_pairs(nodes: np.ndarray, begin: np.ndarray) -> np.ndarray:
        """Affinity and pins for every (node, device); memory (under liveness over the slot at ``begin``)."""
        if liveness is None:
            return constraints.feasible(nodes)  # affinity, colocation pin, memory
        ok = placeable(nodes)
        unpinned = (pin[nodes] < 0)[:, None]
        for row, d in zip(*np.nonzero(ok & unpinned), strict=True):
            ok[row, d] = fits_memory(int(nodes[row]), int(d), float(begin[row, d]))
        return ok

    def run(v: int, d: int, begin: float) -> None:
        device[v] = d
        start[v] = begin
        end = begin + float(times[v, d])
        finish[v] = end
        free_at[d] = end
        last_op[d] = v
        heapq.heappush(events, (end, v, v))
        ready.remove(v)
        is_ready[v] = False
        booked = plan.book(v, d, device, finish) if plan is not None else None
        if liveness is not None:
            constraints.place_at(v, d, begin, end, received(v, d) if booked is None else booked)
            return
        constraints.place(v, d)
        # Baechi's ETF device: a producer's outputs are released once all its consumers ran.
        for k in range(pred_offsets[v], pred_offsets[v + 1]):
            u = int(pred[k])
            consumers_left[u] -= 1
            if consumers_left[u] == 0:
                constraints.release(int(device[u]), activation[u])

    now = 0.0
    scheduled = 0
    while scheduled < n:
        while events and events[0][0] <= now:
            _, _, u = heapq.heappop(events)
            for k in range(succ_offsets[u], succ_offsets[u + 1]):
                s = succ[k]
                pending[s] -= 1
                if pending[s] == 0:
                    make_ready(s)
        nodes = ready.view()
        if not len(nodes):
            if not events:
                raise PassError("internal error: the ETF scheduler ran out of ready nodes")
            now = events[0][0]
            continue
        if plan is not None and plan.version != planned_version:
            for v in nodes.tolist():  # a booking moved a busy-until: the ready nodes' arrivals move
                data_ready[v] = plan.data_ready(v, device, finish)
            planned_version = plan.version
        begin = np.maximum(data_ready[nodes], free_at[None, :])
        free = free_at <= now
        if liveness is not None and (fav is None or not any_awake(nodes, begin, free)):
            # ETF asks each free device for its earliest (start, priority) node: check memory
            # lazily, in that order, until one fits (the same choice as the full matrix). SCT
            # does the same while no free device is awake.
            pick, upcoming = _choose_etf_lazy(begin, placeable(nodes), nodes, priority, free, now, fits_memory, pin)
        else:
            feasible = feasible_pairs(nodes, begin)
            schedulable = np.where(feasible, begin, np.inf)
            pick, upcoming = _choose(
                schedulable, feasible, nodes, priority, free, now, fav, last_op, is_ready, pin, ready
            )
        if pick is not None:
            row, d = pick
            run(int(nodes[row]), d, float(begin[row, d]))
            scheduled += 1
            continue
        if events and (upcoming is None or events[0][0] < upcoming):
            upcoming = events[0][0]
        if upcoming is not None:
            now = upcoming
            continue
        # Nothing can ever run: every ready node fits on no device. Best effort (Celeritas §6.1).
        row = int(np.argmin(priority[nodes]))
        v = int(nodes[row])
        constraints.pin_class(v, constraints.fallback_device(v))
        constraints.best_effort += 1
    return device, start, constraints.best_effort


def _choose(
    schedulable: np.ndarray,
    feasible: np.ndarray,
    nodes: np.ndarray,
    priority: np.ndarray,
    free: np.ndarray,
    now: float,
    fav: list[int] | None,
    last_op: list[int],
    is_ready: list[bool],
    pin: np.ndarray,
    ready: _ReadySet,
) -> tuple[tuple[int, int] | None, float | None]:
    """One ETF/SCT decision at time ``now``.

    Returns:
        ``((row, device), None)`` for the pair to schedule now (the row indexes ``nodes``), or
        ``(None, t)`` with the earliest later time at which a free device could act (``None``:
        never, unless a running node finishes).
    """
    prio = priority[nodes]
    urgent: np.ndarray | None = None
    best: tuple[float, int, int, int] | None = None  # (start, priority, device, row)
    upcoming: float | None = None
    for d in np.flatnonzero(free).tolist():
        column = schedulable[:, d]
        awake_row = -1
        if fav is not None and last_op[d] >= 0:
            f = fav[last_op[d]]
            # Baechi's SCT: awake when the favourite child is ready, unplaced, and this device
            # is one of those where it can start earliest.
            if f >= 0 and is_ready[f] and pin[f] < 0:
                r = ready.where[f]
                if feasible[r, d] and schedulable[r, d] == schedulable[r].min():
                    awake_row = r
        if awake_row >= 0:
            if urgent is None:
                # Urgent time: the start the node gets whatever device it goes to (max over devices).
                computed: np.ndarray = np.where(feasible, schedulable, -np.inf).max(axis=1)
                computed[~feasible.any(axis=1)] = np.inf
                urgent = computed
            candidates = np.where(feasible[:, d], urgent, np.inf)
            first = _argmin_key(candidates, prio)
            if first >= 0 and candidates[first] <= now:
                row = first
            elif column[awake_row] <= now:
                row = awake_row
            else:
                later = min(float(column[awake_row]), float(candidates[first]) if first >= 0 else np.inf)
                upcoming = later if upcoming is None else min(upcoming, later)
                continue
        else:
            row = _argmin_key(column, prio)
            if row < 0:
                continue
            if column[row] > now:
                upcoming = float(column[row]) if upcoming is None else min(upcoming, float(column[row]))
                continue
        key = (float(column[row]), int(prio[row]), d, row)
        if best is None or key < best:
            best = key
    if best is not None:
        return (best[3], best[2]), None
    return None, upcoming


def _choose_etf_lazy(
    begin: np.ndarray,
    placeable: np.ndarray,
    nodes: np.ndarray,
    priority: np.ndarray,
    free: np.ndarray,
    now: float,
    fits_memory: Callable[[int, int, float], bool],
    pin: np.ndarray,
) -> tuple[tuple[int, int] | None, float | None]:
    """:func:`_choose` without favourite children, asking memory only of the pairs it reaches.

    Per free device, the rows by (start, priority); the first whose memory fits (pinned rows need
    no check) is that device's candidate, exactly the row :func:`_argmin_key` finds on the matrix
    with the infeasible pairs at ``+inf``.
    """
    prio = priority[nodes]
    best: tuple[float, int, int, int] | None = None
    upcoming: float | None = None
    for d in np.flatnonzero(free).tolist():
        column = np.where(placeable[:, d], begin[:, d], np.inf)
        for row in np.lexsort((prio, column)).tolist():
            at = float(column[row])
            if at == np.inf:
                break
            if pin[nodes[row]] < 0 and not fits_memory(int(nodes[row]), d, at):
                continue
            if at > now:
                upcoming = at if upcoming is None else min(upcoming, at)
            elif best is None or (at, int(prio[row]), d, row) < best:
                best = (at, int(prio[row]), d, row)
            break
    if best is not None:
        return (best[3], best[2]), None
    return None, upcoming


def _argmin_key(values: np.ndarray, prio: np.ndarray) -> int:
    """Row with the smallest finite value (ties: smallest priority); -1 when none is finite."""
    low = values.min() if len(values) else np.inf
    if not np.isfinite(low):
        return -1
    rows = np.flatnonzero(values == low)
    return int(rows[np.argmin(prio[rows])])


@register_placer
@dataclasses.dataclass(frozen=True)
class MEtf(Placer):
    """Baechi's m-ETF: memory-constrained earliest-task-first placement and schedule.

    Options:
        mem-model: ``liveness`` (the simulator's accounting, :mod:`graphir.memory`: results freed
            after their last use, received copies counted; checked over each node's slot) or
            ``paper`` (Baechi's ETF device: a node's bytes from its start until all its consumers ran).
        plan-congestion: ``none`` (ETF's congestion-free data-ready time, as published) or ``pair``,
            ``port``, ``topology`` (transfers planned on the link model's routes with a busy-until
            per resource: :mod:`graphir.passes.place.transfer_plan`).
    """

    name: ClassVar[str] = "m-etf"
    mem_model: Literal["paper", "liveness"] = "liveness"
    plan_congestion: Literal["none", "pair", "port", "topology"] = "none"

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """Baechi's event-driven ETF without favourite children."""
        return memory_guarded(problem, ctx, self.mem_model, self._plan)  # passes/place/memory_guard.py

    def _plan(self, problem: PlacementProblem) -> Placement:
        """One plan of ``problem`` (the guard may re-plan it with smaller capacities)."""
        device, start, best_effort = _etf_schedule(problem, None, self.mem_model, self.plan_congestion)
        return Placement(device, start, {"best-effort-nodes": best_effort})


@register_placer
@dataclasses.dataclass(frozen=True)
class MSct(Placer):
    """Baechi's m-SCT: m-ETF that keeps a device awake for the LP favourite child.

    Options:
        threshold: an edge whose relaxed LP variable is at most this makes its head the favourite
            child of its tail (Baechi rounds at 0.5).
        mem-model: ``liveness`` (the simulator's accounting) or ``paper`` (Baechi's ETF device), as m-ETF.
        plan-congestion: ``none`` (as published) or ``pair``, ``port``, ``topology``, as m-ETF.
    """

    name: ClassVar[str] = "m-sct"
    threshold: float = 0.5
    mem_model: Literal["paper", "liveness"] = "liveness"
    plan_congestion: Literal["none", "pair", "port", "topology"] = "none"

    def __post_init__(self) -> None:
        """Reject a threshold outside [0, 1] when the pipeline is parsed."""
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {self.threshold}")

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """Solve the favourite-child LP, round it, run the SCT scheduler (memory-guarded under ``liveness``)."""
        started = time.perf_counter()
        x, lp_makespan = solve_favourite_lp(problem) if len(problem.edge_src) else (np.zeros(0), 0.0)
        favourite = favourite_children(problem, x, self.threshold)
        lp_seconds = time.perf_counter() - started

        def plan(planned: PlacementProblem) -> Placement:  # the LP does not depend on the capacities
            device, start, best_effort = _etf_schedule(planned, favourite, self.mem_model, self.plan_congestion)
            stats = {
                "best-effort-nodes": best_effort,
                "favourite-children": int((favourite >= 0).sum()),
                "lp-makespan-s": lp_makespan,
                "lp-wall-s": lp_seconds,
            }
            return Placement(device, start, stats)

        return memory_guarded(problem, ctx, self.mem_model, plan)
