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
"""

from __future__ import annotations

import numpy as np

from graphir.passes.place.problem import PlacementProblem

__all__ = ["Constraints"]


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

    def __init__(self, problem: PlacementProblem) -> None:
        """Prepare the bookkeeping for ``problem`` (nothing placed yet)."""
        self.problem = problem
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
        need = self._need[v]
        used = self.used
        capacity = self.capacity
        allowed = self.allowed_rows[v]
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

    def free_memory(self) -> list[float]:
        """Bytes still free per device (negative after a best-effort overflow)."""
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
