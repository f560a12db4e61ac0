"""The memory model: one accounting of device memory for the simulator, the placers and the ILP.

Two rules (``mem-model``), both computed here:

``liveness`` (the default; DESIGN.md "The simulator is the judge"). Memory of a device over time is

* the persistent bytes (``mem.persistent``: weights, optimizer slots) of every node on it, for the
  whole step;
* each result (a value, its bytes from its type) on its producer's device from the producer's
  start until its last consumer on that device finished *and* every transfer of it to another
  device completed, whichever is later (a result nobody consumes lives while its producer runs);
* each received copy on the destination device from the start of its transfer until its last
  consumer there finished (one copy per value and destination device);
* ``mem.temporary`` of a node while it runs, ``[start, finish)``;
* graph outputs on their producer's device until the end of the step.

An allocation holds its bytes on the half-open interval ``[begin, end)``: at equal times frees come
before allocations, so an interval ending at ``t`` and one starting at ``t`` never overlap, and an
empty interval (a zero-time node's temporaries) holds nothing. The peak of a device is the largest
total over time (at least 0).

``paper`` (the papers' whole-step rule: Pesto's ILP, Baechi's m-TOPO, FastT, Celeritas): every node
holds ``persistent + activation`` bytes on its device for the whole step, ``activation`` being
``mem.activation`` when the node carries ``mem`` and the bytes of its results otherwise (the same
bytes as :attr:`graphir.passes.place.problem.PlacementProblem.memory`). Received copies and
temporaries are not counted, nothing is freed. It is kept so that replications run as published.

Three ways to use it, one set of rules:

* :func:`peak_memory`: peaks per device of a finished simulation (the simulator calls it);
* :class:`MemoryLedger`: the memory of one device as a step function of time, built
  allocation by allocation, with queries ``usage_at``, ``peak_between``, ``peak_with``, ``fits``;
* :class:`ScheduleMemory`: the ledgers of every device driven node by node, as a list scheduler
  places nodes (:meth:`ScheduleMemory.fits` before, :meth:`ScheduleMemory.place` after). While a
  value has unplaced consumers, its copies stay allocated until further notice (an open interval
  ``[begin, inf)``); when its last consumer is placed, each copy is cut to its final end. Cutting
  only ever lowers usage, so a device that fits every placement when it was made still fits at the
  end, and when the scheduler's times are the simulator's (same order, same link model), the
  final ledgers hold exactly what :func:`peak_memory` measures.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from collections.abc import Iterable, Sequence

import numpy as np

from graphir.index import GraphIndex
from graphir.ir import Graph

MEM_MODELS = ("liveness", "paper")
"""Memory rules (see the module docstring); ``liveness`` is the default."""


def check_mem_model(model: str) -> None:
    """Raise ``ValueError`` unless ``model`` is one of :data:`MEM_MODELS`."""
    if model not in MEM_MODELS:
        raise ValueError(f"unknown memory model '{model}': expected one of {', '.join(MEM_MODELS)}")


# --------------------------------------------------------------------------- whole placements


@dataclasses.dataclass(frozen=True)
class Allocations:
    """Allocations as parallel arrays: ``nbytes`` held on ``device`` during ``[begin, end)``."""

    device: np.ndarray
    begin: np.ndarray
    end: np.ndarray
    nbytes: np.ndarray


def output_mask(graph: Graph, index: GraphIndex) -> np.ndarray:
    """Boolean per value of ``index``: the value is a graph output (read only; cached on the index)."""

    def build() -> np.ndarray:
        outputs = {id(value) for value in graph.outputs if value.producer is not None}
        mask = np.zeros(len(index.values), dtype=bool)
        if outputs:
            for x, value in enumerate(index.values):
                if id(value) in outputs:
                    mask[x] = True
        mask.flags.writeable = False
        return mask

    return index._annotation_cached("output-mask", build)


def temporary_bytes(index: GraphIndex) -> np.ndarray:
    """``mem.temporary`` per node (0 without ``mem``), int64 (read only, cached on the index)."""

    def build() -> np.ndarray:
        temporary = np.fromiter(
            (0 if mem is None else mem.temporary for mem in index.annotation_list("mem")),
            dtype=np.int64,
            count=index.num_nodes,
        )
        temporary.flags.writeable = False
        return temporary

    return index._annotation_cached("temporary-bytes", build, ("mem",))


def whole_step_bytes(index: GraphIndex) -> np.ndarray:
    """The ``paper`` rule per node: ``persistent + activation`` (results' bytes without ``mem``), int64."""
    out_bytes = index.out_bytes().tolist()
    return np.fromiter(
        (
            out_bytes[u] if mem is None else mem.persistent + mem.activation
            for u, mem in enumerate(index.annotation_list("mem"))
        ),
        dtype=np.int64,
        count=index.num_nodes,
    )


def liveness_allocations(
    index: GraphIndex,
    outputs: np.ndarray,
    device: np.ndarray,
    start: np.ndarray,
    finish: np.ndarray,
    arrival: dict[tuple[int, int], tuple[float, float]],
    makespan: float,
) -> Allocations:
    """The ``liveness`` allocations of a timed placement (persistent bytes excluded).

    Args:
        index: the graph's index (nodes and values numbered as there).
        outputs: :func:`output_mask` of the graph.
        device: device number per node.
        start: start time per node.
        finish: finish time per node.
        arrival: per ``(value, destination device)``, the transfer's ``(begin, end)``.
        makespan: the end of the step (graph outputs live until then).
    """
    producer = index.value_producer
    # A result lives on its producer's device from the producer's start to the last local
    # consumer's finish or the end of its last outgoing transfer, whichever is later.
    local_end = finish[producer].astype(np.float64) if len(producer) else np.zeros(0)
    data = ~index.edge_control
    src, dst, val = index.edge_src[data], index.edge_dst[data], index.edge_value[data]
    same = device[src] == device[dst]
    np.maximum.at(local_end, val[same], finish[dst[same]])
    devices = [device[producer]]
    begins = [start[producer].astype(np.float64)]
    ends = [local_end]
    sizes = [index.value_bytes.astype(np.int64)]
    if arrival:
        count = 2 * len(arrival)
        keys = np.fromiter(itertools.chain.from_iterable(arrival), dtype=np.int64, count=count).reshape(-1, 2)
        spans = np.fromiter(itertools.chain.from_iterable(arrival.values()), dtype=np.float64, count=count)
        spans = spans.reshape(-1, 2)
        xs, to = keys[:, 0], keys[:, 1]
        np.maximum.at(local_end, xs, spans[:, 1])
        # A received copy lives until its last consumer there finished (the transfer's end without
        # one; a consumer finishes after its input arrived, so the maximum with it changes nothing).
        copy_end = spans[:, 1].copy()
        num_devices = int(max(int(device.max()) if len(device) else 0, int(to.max())) + 1)
        transfer_key = xs * num_devices + to
        by_key = np.argsort(transfer_key, kind="stable")
        remote = ~same
        edge_key = val[remote] * num_devices + device[dst[remote]]
        slot = np.searchsorted(transfer_key[by_key], edge_key)
        found = slot < len(by_key)
        found[found] = transfer_key[by_key[slot[found]]] == edge_key[found]
        np.maximum.at(copy_end, by_key[slot[found]], finish[dst[remote][found]].astype(np.float64))
        devices.append(to)
        begins.append(spans[:, 0])
        ends.append(copy_end)
        sizes.append(index.value_bytes[xs].astype(np.int64))
    local_end[outputs] = makespan
    temporary = temporary_bytes(index)
    if temporary.any():
        devices.append(device)
        begins.append(start.astype(np.float64))
        ends.append(finish.astype(np.float64))
        sizes.append(temporary)
    return Allocations(
        device=np.concatenate(devices).astype(np.int64),
        begin=np.concatenate(begins),
        end=np.concatenate(ends),
        nbytes=np.concatenate(sizes),
    )


def device_peaks(allocations: Allocations, num_devices: int) -> np.ndarray:
    """Peak total bytes per device (int64, at least 0): a sweep with frees before allocations at equal times."""
    times = np.concatenate([allocations.begin, allocations.end])
    deltas = np.concatenate([allocations.nbytes, -allocations.nbytes])
    devices = np.concatenate([allocations.device, allocations.device])
    order = np.lexsort((deltas > 0, times, devices))
    sorted_devices = devices[order]
    running = deltas[order]
    bounds = np.searchsorted(sorted_devices, np.arange(num_devices + 1))
    peak = np.zeros(num_devices, dtype=np.int64)
    for d in range(num_devices):
        segment = running[bounds[d] : bounds[d + 1]]
        if len(segment):
            peak[d] = max(0, int(np.cumsum(segment).max()))
    return peak


def peak_memory(
    index: GraphIndex,
    outputs: np.ndarray,
    device: np.ndarray,
    start: np.ndarray,
    finish: np.ndarray,
    arrival: dict[tuple[int, int], tuple[float, float]],
    makespan: float,
    num_devices: int,
    model: str = "liveness",
) -> np.ndarray:
    """Peak bytes per device of a timed placement under ``model``, persistent bytes *excluded*.

    Under ``liveness``: live results, received copies and temporaries (see the module docstring).
    Under ``paper``: the whole-step bytes minus the persistent ones, i.e. ``activation`` per node.
    Add the persistent bytes per device for the device's peak.
    """
    check_mem_model(model)
    if model == "paper":
        activation = whole_step_bytes(index) - index.persistent_bytes().astype(np.int64)
        return np.bincount(device, weights=activation, minlength=num_devices).astype(np.int64)
    allocations = liveness_allocations(index, outputs, device, start, finish, arrival, makespan)
    return device_peaks(allocations, num_devices)


# --------------------------------------------------------------------------- one device, incrementally


class MemoryLedger:
    """The bytes in use on one device as a step function of time, built allocation by allocation.

    ``allocate(n, b, e)`` holds ``n`` bytes on ``[b, e)`` (``e = inf``: until :meth:`free`);
    ``free(n, t)`` releases ``n`` bytes from ``t`` on, ending an open allocation; ``hold(n)`` holds
    ``n`` bytes for the whole step (persistent bytes). Usage is right-continuous: at a time where
    one allocation ends and another begins, only the second counts (frees before allocations).

    The function is kept as sorted breakpoints with the level after each, cut into blocks of at
    most :data:`_BLOCK` consecutive breakpoints. A block holds its levels less a pending amount it
    adds to all of them, and their largest value: a range update or a range query costs O(log k +
    B + k/B) for ``k`` breakpoints and blocks of ``B`` (whole blocks inside the range are touched
    once each, the two end blocks entry by entry), where a flat list would cost the range's length
    (list schedulers free and allocate to the end of time, the whole tail of the list). Levels
    are ints: the pending amounts add exactly, so every answer is the one a flat list gives.
    """

    __slots__ = ("_blocks", "_firsts", "_max", "persistent", "version")

    def __init__(self) -> None:
        """An empty ledger: no bytes at any time."""
        self.persistent = 0
        # Each block: [times, levels less the pending amount, pending amount, max of the stored
        # levels or None when stale]; _firsts[b] is block b's first time.
        self._blocks: list[list] = [[[-math.inf], [0], 0, 0]]
        self._firsts: list[float] = [-math.inf]
        self._max: int | None = 0  # the largest level, None when a release made it stale
        self.version = 0  # bumped by every change (callers cache answers per version)

    def hold(self, nbytes: int) -> None:
        """Hold ``nbytes`` for the whole step."""
        self.persistent += int(nbytes)
        self.version += 1

    def allocate(self, nbytes: int, begin: float, end: float = math.inf) -> None:
        """Hold ``nbytes`` on ``[begin, end)``; an empty interval holds nothing."""
        if nbytes == 0 or not end > begin:
            return
        nbytes = int(nbytes)
        self._split(begin)
        self._split(end)
        b0, i0 = self._floor(begin)
        b1, i1 = self._ceil(end)
        blocks = self._blocks
        self.version += 1
        known_max = self._max
        raise_max = nbytes > 0 and known_max is not None
        top = None
        if b0 == b1:
            top = self._raise(blocks[b0], i0, i1, nbytes)
        else:
            top = self._raise(blocks[b0], i0, len(blocks[b0][0]), nbytes)
            for b in range(b0 + 1, b1):
                block = blocks[b]
                block[2] += nbytes
                if raise_max:
                    level = self._block_top(block) + block[2]
                    if level > top:
                        top = level
            if b1 < len(blocks) and i1 > 0:
                level = self._raise(blocks[b1], 0, i1, nbytes)
                if level is not None and (top is None or level > top):
                    top = level
        if nbytes < 0:
            self._max = None
        elif raise_max and top is not None and known_max is not None:  # (raise_max: known_max is known)
            self._max = max(known_max, top)

    @staticmethod
    def _raise(block: list, i: int, j: int, nbytes: int) -> int | None:
        """Add ``nbytes`` to ``block``'s levels ``i..j-1``; the largest new level (None if none)."""
        levels = block[1]
        raised = [level + nbytes for level in levels[i:j]]
        if not raised:
            return None
        levels[i:j] = raised
        high = max(raised)
        if nbytes < 0:
            block[3] = None
        elif block[3] is not None and high > block[3]:
            block[3] = high
        return high + block[2]

    @staticmethod
    def _block_top(block: list) -> int:
        """The largest stored level of ``block`` (pending amount not added)."""
        top = block[3]
        if top is None:
            top = block[3] = max(block[1])
        return top

    def free(self, nbytes: int, end: float) -> None:
        """Release ``nbytes`` from ``end`` on (the end of an allocation made with ``end = inf``)."""
        self.allocate(-int(nbytes), end)

    def usage_at(self, time: float) -> int:
        """Bytes in use at ``time`` (after the frees and allocations at that instant)."""
        b, i = self._floor(time)
        block = self._blocks[b]
        return self.persistent + block[1][i] + block[2]

    def peak(self) -> int:
        """The largest usage over all time (at least the persistent bytes)."""
        return self.persistent + max(0, self._max_level())

    def _max_level(self) -> int:
        """The largest level (cached between releases: a list scheduler asks it once per candidate)."""
        level = self._max
        if level is None:
            level = self._max = max(self._block_top(block) + block[2] for block in self._blocks)
        return level

    def peak_between(self, begin: float, end: float) -> int:
        """The largest usage on ``[begin, end)``; ``end`` must exceed ``begin``."""
        if not end > begin:
            raise ValueError(f"peak_between: empty interval [{begin}, {end})")
        return self.persistent + self._range_max(*self._floor(begin), *self._ceil(end))

    def peak_with(self, allocations: Iterable[tuple[int, float, float]]) -> int:
        """The peak if ``allocations`` (``(nbytes, begin, end)`` each) were added; the ledger is unchanged."""
        extra = [(int(n), b, e) for n, b, e in allocations if n and e > b]
        if not extra:
            return self.peak()
        best = max(0, self._max_level())  # the usage where the extra bytes are 0 is unchanged
        # The extra bytes at a time: every delta at or before it (an allocation starting there
        # counts, one ending there does not). Between two consecutive delta times they are constant,
        # so the largest usage there is the ledger's largest level over that span (from the
        # breakpoint at or before the span's start to the last breakpoint inside it) plus them.
        deltas = sorted([(b, n) for n, b, _ in extra] + [(e, -n) for n, _, e in extra])
        count = len(deltas)
        q = 0
        added = 0
        while q < count:
            time = deltas[q][0]
            while q < count and deltas[q][0] == time:
                added += deltas[q][1]
                q += 1
            if added <= 0:
                continue
            b0, i0 = self._floor(time)
            b1, i1 = self._ceil(deltas[q][0]) if q < count else (len(self._blocks), 0)
            level = self._range_max(b0, i0, b1, i1) + added
            if level > best:
                best = level
        return self.persistent + best

    def fits(self, nbytes: int, begin: float, end: float, capacity: int) -> bool:
        """Whether holding ``nbytes`` more on ``[begin, end)`` keeps the usage within ``capacity``."""
        return self.peak_with([(nbytes, begin, end)]) <= capacity

    # ------------------------------------------------------------------ positions
    # A position is (block number, entry in the block); (number of blocks, 0) is the end.

    def _floor(self, time: float) -> tuple[int, int]:
        """The position of the last breakpoint at or before ``time`` (there is one: the first is -inf)."""
        b = bisect.bisect_right(self._firsts, time) - 1
        return b, bisect.bisect_right(self._blocks[b][0], time) - 1

    def _ceil(self, time: float) -> tuple[int, int]:
        """The position of the first breakpoint at or after ``time`` (the end when there is none)."""
        b = bisect.bisect_left(self._firsts, time)
        if b == 0:
            return 0, 0
        times = self._blocks[b - 1][0]
        i = bisect.bisect_left(times, time)
        return (b, 0) if i == len(times) else (b - 1, i)

    def _range_max(self, b0: int, i0: int, b1: int, i1: int) -> int:
        """The largest level from position ``(b0, i0)`` to before ``(b1, i1)`` (a non-empty range)."""
        blocks = self._blocks
        block = blocks[b0]
        if b0 == b1:
            return max(block[1][i0:i1]) + block[2]
        best = max(block[1][i0:]) + block[2]
        for b in range(b0 + 1, b1):
            block = blocks[b]
            level = self._block_top(block) + block[2]
            if level > best:
                best = level
        if b1 < len(blocks) and i1 > 0:
            block = blocks[b1]
            level = max(block[1][:i1]) + block[2]
            if level > best:
                best = level
        return best

    def _split(self, time: float) -> None:
        """Insert a breakpoint at ``time`` if missing (none for ``inf``), with the level just before it."""
        if time == math.inf:
            return
        b = bisect.bisect_right(self._firsts, time) - 1
        block = self._blocks[b]
        times = block[0]
        i = bisect.bisect_left(times, time)
        if i < len(times) and times[i] == time:
            return
        # i >= 1: the block's first time is at or before ``time`` and differs from it.
        times.insert(i, time)
        block[1].insert(i, block[1][i - 1])  # same block, same pending amount: the same level
        if len(times) > _BLOCK:
            half = len(times) // 2
            upper = [times[half:], block[1][half:], block[2], None]
            del times[half:]
            del block[1][half:]
            block[3] = None
            self._blocks.insert(b + 1, upper)
            self._firsts.insert(b + 1, upper[0][0])


_BLOCK = 512
"""Most breakpoints a :class:`MemoryLedger` block holds before it is cut in two."""


# --------------------------------------------------------------------------- a whole schedule, incrementally


class ScheduleMemory:
    """Every device's :class:`MemoryLedger`, driven node by node as a list scheduler places nodes.

    Usage: before committing node ``v`` to device ``d`` at ``[start, finish)``, ask
    :meth:`fits`; after committing, call :meth:`place` with the same arguments. ``received`` lists
    the values that reach ``d`` for ``v`` by a new transfer, as ``(value, begin, end)`` (value
    numbers of the graph index; transfers of a value to a device already holding a copy are not
    listed). Nodes must be placed after their producers (any topological order).

    Under ``liveness`` the ledgers follow the module docstring's rules; under ``paper`` each node
    holds its whole-step bytes (``persistent + activation``) on its device and nothing else counts.

    Graph outputs stay allocated on their producer's device to infinity rather than to the
    makespan (unknown while scheduling); the peaks are the same, except for a result of a
    zero-time node that starts exactly at the makespan, which the simulator gives an empty
    lifetime. Fed the simulator's times node by node, the ledgers end with the simulator's peaks
    (property-tested in ``tests/unit/test_memory.py``).
    """

    def __init__(self, index: GraphIndex, graph: Graph, capacity: Sequence[int], model: str = "liveness") -> None:
        """Empty ledgers for ``len(capacity)`` devices of the given capacities."""
        check_mem_model(model)
        self.model = model
        self.capacity = [int(c) for c in capacity]
        self.ledgers = [MemoryLedger() for _ in self.capacity]
        self._index = index
        self._value_bytes = index.value_bytes.astype(np.int64).tolist()
        self._persistent = index.persistent_bytes().astype(np.int64).tolist()
        self._temporary = temporary_bytes(index).tolist()
        self._whole_step = whole_step_bytes(index).tolist()
        self._is_output = output_mask(graph, index).tolist()
        data = ~index.edge_control
        self._set_tables(index.num_nodes, index.edge_dst[data], index.edge_value[data], index.value_producer)
        self._home: dict[int, int] = {}  # value -> its producer's device
        self._copy_end: dict[int, dict[int, float]] = {}  # value -> device -> end so far

    def _set_tables(self, num_nodes: int, consumer: np.ndarray, value: np.ndarray, producer: np.ndarray) -> None:
        """The per-node tables from the (consumer node, value read) pairs and each value's producer node.

        ``_inputs[v]``: the distinct values ``v`` reads, ascending; ``_consumers_left[x]``: how many
        nodes read ``x``; ``_outputs[u]``: the values ``u`` produces that outlive ``u`` if nothing
        else happens (read by another node, or graph outputs), ascending, and ``_kept_bytes[u]``
        their bytes; ``_unread_bytes[u]``: the bytes of the others, which live only while ``u``
        runs. Built with array sorts, not a Python step per edge.

        The split is fixed from the start: a value nobody reads never gains a reader, and one that
        is read still has all its readers to come when its producer is placed (producers are
        placed first). It keeps :meth:`place` from touching a value no other node reads; on a
        coarse graph most values are read only inside their producer's group.
        """
        num_values = len(self._value_bytes)
        consumer = np.asarray(consumer, dtype=np.int64)
        value = np.asarray(value, dtype=np.int64)
        producer = np.asarray(producer, dtype=np.int64)
        pairs = np.unique(consumer * max(num_values, 1) + value)  # sorted by (consumer, value)
        readers = pairs // max(num_values, 1)
        read = (pairs % max(num_values, 1)).tolist()
        bounds = np.searchsorted(readers, np.arange(num_nodes + 1)).tolist()
        self._inputs: list[list[int]] = [read[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        consumers = np.bincount(pairs % max(num_values, 1), minlength=num_values)
        self._consumers_left = consumers.tolist()
        value_bytes = np.asarray(self._value_bytes, dtype=np.int64)
        kept = (consumers > 0) | np.asarray(self._is_output, dtype=bool)
        kept_bytes = np.zeros(num_nodes, dtype=np.int64)
        np.add.at(kept_bytes, producer[kept], value_bytes[kept])
        self._kept_bytes: list[int] = kept_bytes.tolist()
        unread_bytes = np.zeros(num_nodes, dtype=np.int64)
        np.add.at(unread_bytes, producer[~kept], value_bytes[~kept])
        self._unread_bytes: list[int] = unread_bytes.tolist()
        kept_values = np.flatnonzero(kept)
        by_producer = kept_values[np.argsort(producer[kept_values], kind="stable")]
        made = by_producer.tolist()
        bounds = np.searchsorted(producer[by_producer], np.arange(num_nodes + 1)).tolist()
        self._outputs: list[list[int]] = [made[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def full(self, node: int, device: int) -> bool:
        """Whether :meth:`fits` is False for ``node`` on ``device`` whatever its slot and received copies.

        The peak with ``node`` added is at least the peak so far plus ``node``'s persistent bytes
        (its other bytes are non-negative), so when that exceeds the capacity no slot fits. A list
        scheduler asks this before it looks for a slot and lists the copies (on a device that
        already overflowed, every question ends here). Under ``paper`` it is :meth:`fits` itself.
        """
        if self.model == "paper":
            return self.ledgers[device].peak() + self._whole_step[node] > self.capacity[device]
        return self.ledgers[device].peak() + self._persistent[node] > self.capacity[device]

    def fits(
        self, node: int, device: int, start: float, finish: float, received: Sequence[tuple[int, float, float]] = ()
    ) -> bool:
        """Whether placing ``node`` on ``device`` at ``[start, finish)`` keeps ``device`` within capacity."""
        ledger = self.ledgers[device]
        if self.model == "paper":
            return ledger.peak() + self._whole_step[node] <= self.capacity[device]
        value_bytes = self._value_bytes
        copy_end = self._copy_end
        fresh = [(x, begin) for x, begin, _ in received if device not in copy_end.get(x, ())]
        # Allocations over the same interval are added up (as in place): the peak is a sweep over
        # sums of ints, so one allocation of the total gives exactly the same answer.
        closed = self._temporary[node] + self._unread_bytes[node]  # bytes held on [start, finish)
        open_ended = self._kept_bytes[node]  # results still to be read (or graph outputs): held from start on
        # An upper bound first: the peak so far plus every new byte at once. When even that fits,
        # so does the exact sweep below (the bytes are non-negative); list schedulers far from
        # full memory answer most questions here.
        bound = ledger.peak() + self._persistent[node] + closed + open_ended
        for x, _ in fresh:
            bound += value_bytes[x]
        capacity = self.capacity[device]
        if bound <= capacity:
            return True
        arriving: dict[float, int] = {}  # transfer begin -> bytes of the new copies
        for x, begin in fresh:
            arriving[begin] = arriving.get(begin, 0) + value_bytes[x]
        extra = [(closed, start, finish), (open_ended, start, math.inf)]
        extra += [(nbytes, begin, math.inf) for begin, nbytes in arriving.items()]
        return ledger.peak_with(extra) + self._persistent[node] <= capacity

    def place(
        self, node: int, device: int, start: float, finish: float, received: Sequence[tuple[int, float, float]] = ()
    ) -> None:
        """Commit ``node`` to ``device`` at ``[start, finish)`` (see the class docstring for ``received``).

        Raises:
            ValueError: an input of ``node`` has no copy on ``device`` and is not in ``received``.
        """
        ledger = self.ledgers[device]
        if self.model == "paper":
            ledger.hold(self._whole_step[node])
            return
        ledger.hold(self._persistent[node])
        value_bytes = self._value_bytes
        copy_end = self._copy_end
        homes = self._home
        for x in self._outputs[node]:
            homes[x] = device
            copy_end[x] = {device: finish}
        # Allocations over the same interval are added up first: the ledger's levels are sums of
        # ints, so one allocation of the total leaves exactly what one per value would.
        ledger.allocate(self._temporary[node] + self._unread_bytes[node], start, finish)
        ledger.allocate(self._kept_bytes[node], start)  # freed when the last reader is placed
        arriving: dict[float, int] = {}  # transfer begin -> bytes of the new copies
        for x, begin, end in received:
            copies = copy_end[x]
            if device not in copies:
                arriving[begin] = arriving.get(begin, 0) + value_bytes[x]
                copies[device] = -math.inf
            home = homes[x]
            copies[home] = max(copies[home], end)  # the producer's copy lives until the transfer ends
        for begin, nbytes in arriving.items():
            ledger.allocate(nbytes, begin)
        released: dict[tuple[int, float], int] = {}  # (device, end) -> bytes freed there
        for x in self._inputs[node]:
            copies = copy_end[x]
            if device not in copies:
                raise ValueError(f"node {node}: input value {x} has no copy on device {device} (list it in received)")
            copies[device] = max(copies[device], finish)
            self._consumers_left[x] -= 1
            if self._consumers_left[x]:
                continue
            home = homes[x]
            for holder, end in copies.items():
                if holder != home or not self._is_output[x]:  # a graph output stays home until the end
                    released[holder, end] = released.get((holder, end), 0) + value_bytes[x]
        for (holder, end), nbytes in released.items():
            self.ledgers[holder].free(nbytes, end)

    def peaks(self) -> list[int]:
        """Peak bytes per device so far (persistent included)."""
        return [ledger.peak() for ledger in self.ledgers]
