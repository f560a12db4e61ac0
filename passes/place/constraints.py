"""The one constraint kernel of the list-scheduling placers: affinity, colocation pins and memory.

Every placer that assigns nodes one at a time (Baechi's m-TOPO, m-ETF and m-SCT, HEFT, FastT's
DPOS, Celeritas's Order-Place and Adjusting, Expert) asks the same questions of the same
bookkeeping, kept here once:

- **Affinity**: a node only goes to a device in ``problem.allowed``.
- **Colocation** (Baechi's rule, Celeritas §6.1): the first placed member of a colocation class
  pins the whole class to its device; that first member must find room for the *whole class*
  (``need``), later members follow the pin without a memory check.
- **Memory**: ``used`` bytes per device against the capacity (or a lower per-device limit, m-TOPO's
  memory share). Placing a node charges its persistent + activation bytes; a placer that models
  frees (Baechi's ETF device releases activations once all consumers ran) calls :meth:`release`.
- **Best effort** (Celeritas §5.2 / §6.1): when no allowed device has room, the allowed device
  with the most free memory (ties: lowest number); ``simulate`` then reports the OOM.

Byte counts are integers held in float64 (exact below 2^53), so ``used + need <= capacity`` and
``capacity - used >= need`` agree bit for bit whichever way a placer phrases the test.

**Memory models** (``mem-model``, :mod:`graphir.memory`): under ``paper`` (each paper's own rule,
the default for now) the kernel charges ``used`` as above. Under ``liveness`` the kernel holds a
:class:`CoarseScheduleMemory`, the simulator's accounting (:class:`graphir.memory.ScheduleMemory`)
on the coarse graph, and a placer that schedules asks :meth:`Constraints.fits_at` whether ``v``
fits on ``d`` over ``[start, finish)`` with the copies it receives there, then commits with
:meth:`Constraints.place_at`. On the coarse graph a fine value lives from its coarse producer's
start to the finish of its last *other* coarse consumer (or to its producer's finish), and a
coarse node's temporaries are the largest of its members' for its whole run (a device runs one node
at a time): never less than the simulator's fine accounting when the placer's times are the
simulator's, so a placement the kernel accepts fits in the simulator (``tests/unit/test_place_liveness.py``).
Colocation under ``liveness``: the first member of a class checks its own allocations only
(the lifetimes of the others are unknown until they are scheduled); later members follow the pin.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphir.memory import MemoryLedger, ScheduleMemory, check_mem_model
from graphir.passes.place.problem import PlacementProblem

__all__ = ["CoarseScheduleMemory", "Constraints"]


class CoarseScheduleMemory(ScheduleMemory):
    """:class:`graphir.memory.ScheduleMemory` on the coarse graph of a :class:`PlacementProblem`.

    Nodes are coarse nodes; values are the fine graph's values (their bytes, graph-output flags
    and producers' coarse nodes). A value's consumers are the *other* coarse nodes reading it (a
    use inside its producer's coarse node ends, at the latest, when that node finishes); a coarse
    node's temporaries are its largest member's. The rules of placement and freeing are
    :class:`~graphir.memory.ScheduleMemory`'s; only the tables it reads are built here.

    Attributes:
        incoming: per coarse node, ``(value, producer coarse node)`` for every value it reads
            from another coarse node, sorted.
    """

    def __init__(self, problem: PlacementProblem, model: str = "liveness") -> None:  # noqa: D107
        check_mem_model(model)
        fine = problem.fine
        n = problem.num_nodes
        group = problem.node_group
        self.model = model
        self.capacity = [int(c) for c in problem.capacity.tolist()]
        self.ledgers = [MemoryLedger() for _ in self.capacity]
        self._index = None
        self._value_bytes = np.asarray(fine.value_bytes, dtype=np.int64).tolist()
        self._persistent = np.asarray(problem.persistent, dtype=np.int64).tolist()
        temporary = np.zeros(n, dtype=np.int64)
        if len(fine.temporary):
            np.maximum.at(temporary, group, np.asarray(fine.temporary, dtype=np.int64))
        self._temporary = temporary.tolist()
        self._whole_step = np.asarray(problem.memory, dtype=np.int64).tolist()
        self._is_output = np.asarray(fine.value_output, dtype=bool).tolist()
        producer_group = group[fine.value_producer] if len(fine.value_producer) else np.zeros(0, dtype=np.int64)
        data = ~fine.edge_control
        dst_group = group[fine.edge_dst[data]]
        values = fine.edge_value[data]
        cross = dst_group != producer_group[values]
        self._set_tables(n, dst_group[cross], values[cross], producer_group)
        producer_list = producer_group.tolist()
        self.incoming: list[list[tuple[int, int]]] = [[(x, producer_list[x]) for x in xs] for xs in self._inputs]
        self._home: dict[int, int] = {}
        self._copy_end: dict[int, dict[int, float]] = {}

    def usage_peak(self, device: int) -> int:
        """The peak bytes of ``device`` so far (persistent included)."""
        return self.ledgers[device].peak()


class Constraints:
    """Affinity, colocation pins and memory bookkeeping of one placement in progress.

    Attributes:
        problem: the coarse problem.
        capacity: memory bytes of each device.
        used: bytes currently charged to each device (a list: placers test one device at a time in
            their hot loops; :meth:`feasible` vectorises over it).
        pin: per coarse node, the device it must go to (-1: free); set for the whole colocation
            class when its first member is placed, and for nodes pinned by a fallback.
        need: per coarse node, the bytes checked when it is placed unpinned (the whole class's
            memory for a colocation class member, else its own memory).
        best_effort: number of nodes (or classes) placed by the all-devices-full fallback.
        allowed_rows: ``problem.allowed`` as nested lists (fast scalar look-ups).
    """

    def __init__(self, problem: PlacementProblem, mem_model: str = "paper") -> None:
        """Prepare the bookkeeping for ``problem`` (nothing placed yet) under ``mem_model``."""
        check_mem_model(mem_model)
        self.problem = problem
        self.mem_model = mem_model
        self.schedule_memory = CoarseScheduleMemory(problem) if mem_model == "liveness" else None
        self.capacity: list[float] = problem.capacity.astype(np.float64).tolist()
        self.used: list[float] = [0.0] * problem.num_devices
        self.pin = np.full(problem.num_nodes, -1, dtype=np.int64)
        self.need = problem.memory.astype(np.float64).copy()
        self.best_effort = 0
        self._memory = problem.memory.tolist()
        self.allowed_rows: list[list[bool]] = problem.allowed.tolist()  # scalar look-ups in the placers' loops
        self._classes: dict[int, list[int]] = {}
        colocation = problem.colocation
        if (colocation >= 0).any():
            for v in np.flatnonzero(colocation >= 0).tolist():
                self._classes.setdefault(int(colocation[v]), []).append(v)
            for members in self._classes.values():
                self.need[members] = float(problem.memory[members].sum())
        self._need = self.need.tolist()
        self._colocation = problem.colocation.tolist()
        self._devices = list(range(problem.num_devices))

    # ---- questions ---------------------------------------------------------------------------

    def pinned(self, v: int) -> int:
        """The device ``v`` must go to (its colocation class's or a fallback's pin), else -1."""
        return int(self.pin[v])

    def allowed(self, v: int, d: int) -> bool:
        """Whether ``v``'s affinity (and its class's) allows device ``d``."""
        return self.allowed_rows[v][d]

    def fits(self, v: int, d: int, limit: np.ndarray | None = None) -> bool:
        """Whether ``v`` may go to ``d``: allowed, compatible with its pin, and (unpinned) its ``need`` fits.

        Args:
            v: coarse node.
            d: device.
            limit: per-device memory limit (default: the capacities).
        """
        if not self.allowed_rows[v][d]:
            return False
        pinned = self.pin[v]
        if pinned >= 0:
            return bool(pinned == d)
        cap = self.capacity[d] if limit is None else limit[d]
        return bool(self.used[d] + self._need[v] <= cap)

    def open_devices(self, v: int) -> list[int]:
        """The devices an *unpinned* ``v`` fits on (allowed, room for its ``need``), in device order.

        :meth:`fits` for every device at once, without the pin test: a placer's inner loop.
        """
        allowed = self.allowed_rows[v]
        if self.schedule_memory is not None:  # liveness: memory is checked with times, by fits_at
            return [d for d in self._devices if allowed[d]]
        need = self._need[v]
        used = self.used
        capacity = self.capacity
        return [d for d in self._devices if allowed[d] and used[d] + need <= capacity[d]]

    def feasible(self, nodes: np.ndarray) -> np.ndarray:
        """:meth:`fits` for every (node of ``nodes``, device), as a ``(len(nodes), num_devices)`` bool array."""
        pinned = self.pin[nodes]
        devices = np.arange(self.problem.num_devices)
        return self.problem.allowed[nodes] & np.where(
            (pinned >= 0)[:, None],
            devices[None, :] == pinned[:, None],
            self.need[nodes][:, None] + np.asarray(self.used)[None, :] <= np.asarray(self.capacity)[None, :],
        )

    def fits_at(
        self, v: int, d: int, start: float, finish: float, received: Sequence[tuple[int, float, float]] = ()
    ) -> bool:
        """Whether ``v`` may run on ``d`` over ``[start, finish)`` receiving ``received`` there.

        Under ``paper`` this is :meth:`fits`; under ``liveness`` the memory question goes to the
        :class:`CoarseScheduleMemory` (``received``: ``(value, transfer begin, transfer end)`` per
        value ``v`` reads from another device).
        """
        if self.schedule_memory is None:
            return self.fits(v, d)
        if not self.allowed_rows[v][d]:
            return False
        pinned = self.pin[v]
        if pinned >= 0:
            return bool(pinned == d)
        return self.schedule_memory.fits(v, d, start, finish, received)

    def place_at(
        self, v: int, d: int, start: float, finish: float, received: Sequence[tuple[int, float, float]] = ()
    ) -> None:
        """:meth:`place`, and under ``liveness`` the allocations of ``v`` over ``[start, finish)``."""
        self.place(v, d)
        if self.schedule_memory is not None:
            self.schedule_memory.place(v, d, start, finish, received)

    def free_memory(self) -> list[float]:
        """Bytes still free per device (negative after an overflow); under ``liveness``, below the peak so far."""
        if self.schedule_memory is not None:
            peaks = self.schedule_memory.peaks()
            return [capacity - peak for capacity, peak in zip(self.capacity, peaks, strict=True)]
        return [capacity - used for capacity, used in zip(self.capacity, self.used, strict=True)]

    def fallback_device(self, v: int) -> int:
        """Its pin, else Celeritas's best effort: the allowed device with the most free memory (ties: lowest number)."""
        pinned = int(self.pin[v])
        if pinned >= 0:
            return pinned
        free = np.where(self.problem.allowed[v], np.asarray(self.free_memory()), -np.inf)
        return int(np.argmax(free))

    # ---- bookkeeping -------------------------------------------------------------------------

    def pin_class(self, v: int, d: int) -> None:
        """Pin ``v`` and, when it belongs to a colocation class, every member of the class, to ``d``."""
        root = self._colocation[v]
        if root >= 0:
            self.pin[self._classes[root]] = d
        else:
            self.pin[v] = d

    def place(self, v: int, d: int) -> None:
        """Charge ``v``'s memory to ``d`` and pin its colocation class there (when not pinned yet)."""
        if self.pin[v] < 0:
            self.pin_class(v, d)
        self.used[d] += self._memory[v]

    def release(self, d: int, nbytes: float) -> None:
        """Give ``nbytes`` back to device ``d`` (a freed activation)."""
        self.used[d] -= nbytes
