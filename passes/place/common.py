"""The machinery shared by the list-scheduling placers: Celeritas, FastT DPOS and HEFT.

Every one of these placers visits the coarse nodes one at a time in a priority order, computes for
each device the earliest time the node could start there, picks a device by its own rule and
books the node on that device's timeline. What they share lives here, once:

- :class:`DeviceTimeline`: the busy intervals of one device, kept sorted in chunks that know their
  largest gap, so that the *insertion* policy (HEFT; FastT §5.1 ``avail[j]``; Celeritas §5.2
  ``d_ava[d_k]``) is a bisect plus a scan that skips whole chunks: a node may start in the first
  idle slot after its data-ready time that is long enough to hold it. Touching intervals are
  merged, so a densely packed device costs one block, not thousands.
- :class:`ListScheduler`: the incremental state (device, start and finish per placed node,
  timelines; memory, colocation pins and affinity through the one constraint kernel,
  :class:`graphir.passes.place.constraints.Constraints`) and the earliest-start computation
  ``EST(v, d) = max(pre_t(v, d), d_ava[d])`` — Celeritas eq. (7) and FastT's EST formula, which
  are the same equation: ``pre_t(v, d) = max_{p in pred(v)} Fin_t[p] + I(d_p != d) c_{p,v}``.

Conventions every placer inherits (the papers leave them open):

- ``c_{p,v}`` is the transfer time of the coarse edge on the actual link ``d_p -> d`` from the
  link model (:class:`graphir.links.LinkModel`; 0 on one device), i.e. a congestion-free
  estimate; the simulator, which serialises transfers on the resources of their routes, is the judge.
  With ``plan-congestion=pair|port|topology`` (not the papers' rule) the transfers are planned on
  those routes with a busy-until per resource instead (:mod:`graphir.passes.place.transfer_plan`).
- Memory (Celeritas Algorithm 2 ``Ava_m``, FastT "memory need exceeds capacity"): a node needs
  ``problem.memory`` bytes (persistent + activation) on its device for the whole run; nothing is
  freed, as in both papers (``mem-model=paper``). Under ``mem-model=liveness`` (the default) the
  kernel checks the simulator's accounting over the node's slot instead (results freed after
  their last use, received copies counted; :meth:`ListScheduler.received`). The first placed member
  of a colocation class must find room for the
  *whole* class (the rest of the class will follow it there); later members go to the pinned
  device whether it has room or not (the kernel's rules, shared with Baechi's placers and Expert).
- Affinity: a device a node may not use gets ``EST = +inf``, exactly like a full device.
- Best effort (Celeritas §5.2: "the device with the lowest memory usage"): when no allowed device
  has room, the allowed device with the most free memory (ties: lowest number). Algorithm 2 line
  20 prints ``argmin Ava_m``, which contradicts its own text; we follow the text.
- Ties between devices go to the lowest device number; between nodes, to the lowest coarse
  node number (a topological number), so every placer is deterministic.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from operator import sub

import numpy as np

from graphir.pass_infra import Stat
from graphir.passes.place.base import Placement
from graphir.passes.place.constraints import Constraints
from graphir.passes.place.problem import PlacementProblem, keyed_topological_order
from graphir.passes.place.transfer_plan import TransferPlan

INF = math.inf


CHUNK = 64
"""Blocks per chunk of a :class:`DeviceTimeline`: chunks hold ``CHUNK / 2`` to ``2 * CHUNK`` blocks."""


class DeviceTimeline:
    """The busy intervals of one device, as sorted, disjoint, merged ``[start, end)`` blocks.

    The blocks are stored in chunks of consecutive blocks (:data:`CHUNK`), each with its *room*:
    its largest gap, counting the one between the previous chunk's last block and its first. The
    insertion search skips every chunk whose room is too small for the node, so it costs the
    chunks it passes plus the blocks of at most two chunks, not every block after the ready time
    (thousands per device on FastT's 8-replica graphs). The room is only a filter: a gap is taken
    by the same exact comparison as a plain walk over the blocks (``t + duration <= start``), so
    every answer is the plain walk's, to the last bit.

    Attributes:
        starts: every block's start, increasing (a flat copy, built on each access).
        ends: every block's end, increasing, ``ends[i] < starts[i + 1]`` (a flat copy).
    """

    __slots__ = ("_ends", "_first", "_inner", "_last", "_room", "_starts")

    def __init__(self) -> None:
        self._starts: list[list[float]] = []  # per chunk: its blocks' starts
        self._ends: list[list[float]] = []  # per chunk: its blocks' ends
        self._first: list[float] = []  # per chunk: its first block's start
        self._last: list[float] = []  # per chunk: its last block's end
        self._inner: list[float] = []  # per chunk: its largest gap between two of its blocks (-1: none)
        self._room: list[float] = []  # per chunk: max(inner, the gap before its first block)

    @property
    def starts(self) -> list[float]:
        """Every block's start, in order."""
        return [s for chunk in self._starts for s in chunk]

    @property
    def ends(self) -> list[float]:
        """Every block's end, in order."""
        return [e for chunk in self._ends for e in chunk]

    @property
    def available(self) -> float:
        """When the device finishes its last booked node (0 when idle): the non-insertion policy."""
        return self._last[-1] if self._last else 0.0

    def earliest_start(self, ready: float, duration: float) -> float:
        """The start of the first idle slot at or after ``ready`` that holds ``duration`` seconds.

        This is the insertion policy of HEFT and FastT (``avail[j]``) and Celeritas's ``d_ava[d_k]``
        ("a time slot to insert v_i after pre_t(v_i)"): a gap between two booked blocks qualifies
        when ``t + duration <= next start``, ``t`` being ``ready`` or the previous block's end,
        whichever is later (the gap holding ``ready`` counts from ``ready``); otherwise the node
        goes after the last block.
        """
        last = self._last
        count = len(last)
        c = bisect_right(last, ready)  # chunks before c end at or before `ready`
        if c == count:
            return ready
        starts = self._starts[c]
        ends = self._ends[c]
        t = ready
        for j in range(bisect_right(ends, ready), len(starts)):  # blocks ending after `ready`
            if t + duration <= starts[j]:
                return t
            t = ends[j]  # later than `ready` and than the previous end
        # The following chunks. A gap [a, b) holds the node when fl(a + duration) <= b, which
        # implies fl(b - a) >= duration - u * (a + 2 * duration) (u = 2**-53: the two roundings),
        # so a chunk whose room is below `need` (a margin of 9 u, on the latest end) has no such gap.
        room = self._room
        need = duration - 1e-15 * (last[-1] + 2.0 * duration)
        for k in range(c + 1, count):
            if room[k] < need:
                t = last[k]
                continue
            starts = self._starts[k]
            ends = self._ends[k]
            for j in range(len(starts)):
                if t + duration <= starts[j]:
                    return t
                t = ends[j]
        return t

    def reserve(self, start: float, end: float) -> None:
        """Book ``[start, end)``, which must lie in an idle slot; zero-length bookings are no-ops.

        A zero-length node occupies nothing: booking it would split a gap that a later node could
        still use. A booking that touches the block before or after it extends that block (and
        joins the two when it fills the gap between them), so touching blocks are always one.
        """
        if end <= start:
            return
        if not self._last:
            self._starts.append([start])
            self._ends.append([end])
            self._first.append(start)
            self._last.append(end)
            self._inner.append(-1.0)
            self._room.append(-1.0)
            return
        c = max(bisect_right(self._first, start) - 1, 0)  # the chunk of the block before it (or 0)
        starts = self._starts[c]
        ends = self._ends[c]
        i = bisect_right(starts, start)
        merge_prev = i > 0 and ends[i - 1] == start
        if i < len(starts):
            nc, ni = c, i  # the block after it
        else:  # it opens the next chunk, if any
            nc, ni = c + 1, 0
        merge_next = nc < len(self._first) and self._starts[nc][ni] == end
        if merge_prev and merge_next:
            ends[i - 1] = self._ends[nc][ni]
            del self._starts[nc][ni]
            del self._ends[nc][ni]
            if nc != c:
                self._update(c)
            self._settle(nc, shrunk=True)
        elif merge_prev:
            ends[i - 1] = end
            self._update(c)
        elif merge_next:
            self._starts[nc][ni] = start
            self._update(nc)
        else:
            starts.insert(i, start)
            ends.insert(i, end)
            self._settle(c, shrunk=False)

    def _settle(self, c: int, shrunk: bool) -> None:
        """Chunk ``c`` gained or lost a block: drop, join or split it, and recompute what changed."""
        size = len(self._starts[c])
        if size == 0:
            for lists in (self._starts, self._ends, self._first, self._last, self._inner, self._room):
                del lists[c]
            if c < len(self._last):
                self._update(c)  # the gap before it now opens at the previous chunk's end
            return
        if shrunk and size < CHUNK // 2 and len(self._last) > 1:
            c = c if c + 1 < len(self._last) else c - 1  # join it with the next chunk (the last: the one before)
            self._starts[c] += self._starts[c + 1]
            self._ends[c] += self._ends[c + 1]
            for lists in (self._starts, self._ends, self._first, self._last, self._inner, self._room):
                del lists[c + 1]
            size = len(self._starts[c])
        if size > 2 * CHUNK:
            half = size // 2
            starts = self._starts[c]
            ends = self._ends[c]
            self._starts.insert(c + 1, starts[half:])
            self._ends.insert(c + 1, ends[half:])
            del starts[half:], ends[half:]
            for lists in (self._first, self._last, self._inner, self._room):
                lists.insert(c + 1, 0.0)
            self._update(c)
            self._update(c + 1)
            return
        self._update(c)

    def _update(self, c: int) -> None:
        """Recompute chunk ``c``'s first start, last end, inner gap and room, and the next chunk's room."""
        starts = self._starts[c]
        ends = self._ends[c]
        first = self._first[c] = starts[0]
        last = self._last[c] = ends[-1]
        inner = self._inner[c] = max(map(sub, starts[1:], ends[:-1]), default=-1.0)
        self._room[c] = max(inner, first - self._last[c - 1]) if c > 0 else inner
        if c + 1 < len(self._last):
            self._room[c + 1] = max(self._inner[c + 1], self._first[c + 1] - last)


class ListScheduler:
    """Incremental state of a list scheduler on a :class:`PlacementProblem`.

    Hot loops read plain Python lists built once here, never IR objects or numpy scalars.

    Attributes:
        problem: the coarse problem.
        num_devices: number of devices.
        device: device per coarse node (-1 while unplaced).
        start, finish: scheduled start and finish per coarse node (``Fin_t`` of Celeritas).
        constraints: affinity, colocation pins and memory (``Ava_m`` is ``capacity - used``).
        timelines: one :class:`DeviceTimeline` per device.
    """

    def __init__(self, problem: PlacementProblem, mem_model: str = "paper", plan_congestion: str = "none") -> None:
        self.problem = problem
        # plan-congestion (passes/place/transfer_plan.py): transfers planned on the routes, or the
        # papers' congestion-free formula (``none``).
        self.plan = TransferPlan(problem, plan_congestion) if plan_congestion != "none" else None
        n = problem.num_nodes
        num_devices = problem.num_devices
        self.num_devices = num_devices
        self.device = [-1] * n
        self.start = [0.0] * n
        self.finish = [0.0] * n
        self.constraints = Constraints(problem, mem_model)
        self.liveness = self.constraints.schedule_memory
        self.timelines = [DeviceTimeline() for _ in range(num_devices)]
        self.times = problem.times.tolist()
        self.memory = problem.memory.tolist()
        self.allowed = self.constraints.allowed_rows
        self.pred_offsets = problem.pred_offsets.tolist()
        self.pred = problem.pred.tolist()
        self.pred_edge = problem.pred_edge.tolist()
        self.succ_offsets = problem.succ_offsets.tolist()
        self.succ_edge = problem.succ_edge.tolist()
        self.edge_bytes = problem.edge_bytes.tolist()
        self.links = problem.links
        self.devices = list(range(num_devices))

    # ---- constraints (the kernel's) --------------------------------------------------------

    def pinned(self, v: int) -> int:
        """The device ``v``'s colocation class is pinned to (its first placed member's), else -1."""
        return self.constraints.pinned(v)

    def fits(self, v: int, d: int) -> bool:
        """Whether ``d`` may run ``v`` and has room for it (Algorithm 2 line 9, negated).

        Under ``mem-model=liveness``: room over ``v``'s earliest slot on ``d``, with its received copies.
        """
        if self.liveness is None:
            return self.constraints.fits(v, d)
        if not self.constraints.allowed(v, d):
            return False
        if self.constraints.pinned(v) < 0 and self.liveness.full(v, d):  # no slot can fit: skip the search
            return False
        start = self.start_on(v, d)
        return self.constraints.fits_at(v, d, start, start + self.times[v][d], self.received(v, d))

    def received(self, v: int, d: int) -> list[tuple[int, float, float]]:
        """The values ``v`` would receive on ``d`` by a transfer: ``(value, begin, end)`` each (``liveness``).

        A value read from a coarse predecessor ``p`` on another device is sent when ``p`` finishes
        and arrives after the coarse edge's transfer time, the data-ready term of :meth:`data_ready`.
        """
        if self.liveness is None:
            return []
        if self.plan is not None:
            return self.plan.received(v, d, self.device, self.finish)
        out: list[tuple[int, float, float]] = []
        device = self.device
        finish = self.finish
        arrival: dict[int, float] = {}
        for x, p in self.liveness.incoming[v]:
            dp = device[p]
            if dp == d:
                continue
            end = arrival.get(p)
            if end is None:
                end = finish[p] + self.comm_time(self._edge_bytes_between(p, v), dp, d)
                arrival[p] = end
            out.append((x, finish[p], end))
        return out

    def _edge_bytes_between(self, p: int, v: int) -> float:
        """Bytes of the coarse edge ``p -> v``."""
        pred = self.pred
        for k in range(self.pred_offsets[v], self.pred_offsets[v + 1]):
            if pred[k] == p:
                return self.edge_bytes[self.pred_edge[k]]
        return 0.0

    def best_effort(self, v: int) -> int:
        """Celeritas's fallback when every device is full: the allowed device with the most free memory."""
        return self.constraints.fallback_device(v)

    # ---- times -------------------------------------------------------------------------------

    def comm_time(self, nbytes: float, src: int, dst: int) -> float:
        """The link model's transfer time ``src -> dst`` (0 when ``src == dst``)."""
        return self.links.transfer_time(nbytes, src, dst)

    def data_ready(self, v: int) -> list[float]:
        """``pre_t(v, d)`` for every device ``d`` (Celeritas eq. (7), FastT's inner max).

        ``pre_t(v, d) = max_{p in pred(v)} Fin_t[p] + I(d_p != d) * c_{p,v}`` where ``c_{p,v}`` is
        the transfer time on the link ``d_p -> d``. Every predecessor must already be placed.
        Under a ``plan-congestion`` rule, the transfers are planned on their routes instead
        (:meth:`graphir.passes.place.transfer_plan.TransferPlan.data_ready`).
        """
        if self.plan is not None:
            return self.plan.data_ready(v, self.device, self.finish)
        ready = [0.0] * self.num_devices
        finish = self.finish
        device = self.device
        edge_bytes = self.edge_bytes
        devices = self.devices
        pred = self.pred
        pred_edge = self.pred_edge
        arrivals_from = self.links.arrivals_from
        for k in range(self.pred_offsets[v], self.pred_offsets[v + 1]):
            p = pred[k]
            dp = device[p]
            assert dp >= 0, "a predecessor is placed before its successors"
            arrival = arrivals_from(finish[p], edge_bytes[pred_edge[k]], dp)
            for d in devices:
                t = arrival[d]
                if t > ready[d]:
                    ready[d] = t
        return ready

    def earliest_starts(self, v: int) -> list[float]:
        """``EST(v, d)`` on every device with insertion, ``+inf`` where ``v`` may not go.

        ``EST(v, d) = max(pre_t(v, d), d_ava[d])`` where ``d_ava[d]`` is the start of the first idle
        slot of ``d`` after ``pre_t`` long enough for ``v`` (Celeritas eq. (7) and §5.2; FastT §5.1).
        ``+inf`` marks a device that ``v``'s affinity excludes, that is full (Algorithm 2 lines
        9-10, FastT Algorithm 1 lines 13-14), or that is not
        the device ``v``'s colocation class is pinned to. A pinned node gets a finite EST on its pin
        even when that device is full: it has nowhere else to go.
        """
        ready = self.data_ready(v)
        est = [INF] * self.num_devices
        times = self.times[v]
        pin = self.constraints.pinned(v)
        if pin >= 0:
            est[pin] = self.timelines[pin].earliest_start(ready[pin], times[pin])
            return est
        timelines = self.timelines
        liveness = self.liveness
        for d in self.constraints.open_devices(v):
            if liveness is not None and liveness.full(v, d):  # no slot can fit (fits_at would say so): +inf
                continue
            est[d] = timelines[d].earliest_start(ready[d], times[d])
        if liveness is not None:  # memory over the slot found, with the copies received there
            for d, s in enumerate(est):
                if s < INF and not self.constraints.fits_at(v, d, s, s + times[d], self.received(v, d)):
                    est[d] = INF
        return est

    def start_on(self, v: int, d: int) -> float:
        """``EST(v, d)`` on one device, with insertion, ignoring memory (the device is chosen)."""
        ready = self.data_ready(v)
        return self.timelines[d].earliest_start(ready[d], self.times[v][d])

    # ---- booking -----------------------------------------------------------------------------

    def commit(self, v: int, d: int, start: float) -> float:
        """Place ``v`` on ``d`` starting at ``start``; book the slot and the memory; return the finish.

        The first placed member of a colocation class pins the class to ``d``.
        """
        end = start + self.times[v][d]
        if self.plan is not None:
            received = self.plan.book(v, d, self.device, self.finish)
            if self.liveness is None:
                received = []
        else:
            received = self.received(v, d)
        self.device[v] = d
        self.start[v] = start
        self.finish[v] = end
        # Algorithm 2 line 21; pins v's colocation class (and books v's liveness allocations).
        self.constraints.place_at(v, d, start, end, received)
        self.timelines[d].reserve(start, end)
        return end

    def book(self, v: int, d: int) -> float:
        """Place ``v`` on ``d`` at its earliest start there (insertion); return the start."""
        start = self.start_on(v, d)
        self.commit(v, d, start)
        return start

    def book_best_effort(self, v: int) -> int:
        """Place ``v`` by the all-devices-full fallback (see :meth:`best_effort`); return the device."""
        d = self.best_effort(v)
        self.constraints.best_effort += 1
        self.book(v, d)
        return d

    def book_min_eft(self, v: int) -> int:
        """Place ``v`` on the device of minimum ``EFT(v, d) = EST(v, d) + w_{v,d}``; return the device.

        HEFT's device selection and FastT Algorithm 1 lines 12-20: ``EST`` with insertion, ``+inf`` on
        full or excluded devices; when every device is ``+inf``, the best-effort fallback.
        """
        est = self.earliest_starts(v)
        times = self.times[v]
        d = argmin([s + t for s, t in zip(est, times, strict=True)])
        if d < 0:
            return self.book_best_effort(v)
        self.commit(v, d, est[d])
        return d

    def placement(self, stats: dict[str, Stat] | None = None) -> Placement:
        """The answer for :mod:`graphir.passes.place`: devices, start times and statistics."""
        assert all(d >= 0 for d in self.device), "every node is placed"
        out: dict[str, Stat] = {
            "estimated-makespan-s": max(self.finish, default=0.0),
            "best-effort-nodes": self.constraints.best_effort,
        }
        if stats:
            out.update(stats)
        return Placement(np.asarray(self.device, dtype=np.int64), np.asarray(self.start), out)


def argmin(values: list[float]) -> int:
    """Index of the smallest value, the lowest index on ties (``+inf`` only: -1)."""
    best = -1
    best_value = INF
    for d, value in enumerate(values):
        if value < best_value:
            best = d
            best_value = value
    return best


def ready_order(problem: PlacementProblem, priority: np.ndarray) -> list[int]:
    """Nodes by decreasing ``priority`` among the ready ones (ties: lowest node number).

    With a priority such as rank_u that never increases along an edge, this is the plain sort by
    decreasing priority (HEFT's and FastT's list), and it stays a topological order whatever
    floating-point rounding does to equal ranks.
    """
    return keyed_topological_order(problem, -np.asarray(priority, dtype=np.float64))
