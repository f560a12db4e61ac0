"""HEFT (place{algo=heft}), the shared list-scheduling machinery, and the placers' property test.

``random_module`` and ``check_placer`` are reused by the other placers' tests. The lower bounds here
hold for any valid placement, even everything on ``gpu0``; test_place_quality.py compares every
placer with hand-worked makespans on graphs where spreading must win and where it must not.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from helpers import ALL_PLACERS, GiB, check_placer, heterogeneous_fork, placement_of, random_case, random_module
from hypothesis import given

from graphir.annotations import Mem
from graphir.errors import PassError
from graphir.ir import Graph, Module
from graphir.pass_infra import PassContext
from graphir.passes.place import PLACERS, Place, PlacementContext
from graphir.passes.place.common import DeviceTimeline, ListScheduler, argmin, ready_order
from graphir.passes.place.problem import PlacementProblem
from graphir.types import DType, TensorType


@given(random_case())
def test_heft_property(case: tuple[Module, str, bool]) -> None:
    module, _, pressure = case
    check_placer(module, "heft", fits=pressure)


# ---- DeviceTimeline -------------------------------------------------------------------------


def test_timeline_insertion_and_merging() -> None:
    line = DeviceTimeline()
    assert line.earliest_start(3.0, 5.0) == 3.0 and line.available == 0.0
    line.reserve(0.0, 2.0)
    line.reserve(5.0, 6.0)
    assert line.earliest_start(0.0, 3.0) == 2.0  # the gap [2, 5) holds 3
    assert line.earliest_start(0.0, 3.5) == 6.0  # too long for the gap: after the last block
    assert line.earliest_start(1.0, 1.0) == 2.0  # ready inside a block: starts at its end
    assert line.earliest_start(4.5, 0.5) == 4.5
    line.reserve(2.0, 5.0)  # fills the gap exactly: the three blocks merge
    assert (line.starts, line.ends) == ([0.0], [6.0])
    line.reserve(8.0, 8.0)  # zero-length: occupies nothing
    assert (line.starts, line.ends) == ([0.0], [6.0])
    assert line.earliest_start(7.0, 0.0) == 7.0 and line.available == 6.0


def test_timeline_merges_next_block() -> None:
    line = DeviceTimeline()
    line.reserve(4.0, 5.0)
    line.reserve(1.0, 2.0)
    line.reserve(3.0, 4.0)
    assert (line.starts, line.ends) == ([1.0, 3.0], [2.0, 5.0])
    assert line.earliest_start(0.0, 1.0) == 0.0
    assert line.earliest_start(0.5, 1.0) == 2.0


def test_timeline_merges_past_its_first_blocks() -> None:
    """Blocks [0, 1), [2, 3), [4, 5), [6, 7). Booking [5, 6) joins the third and fourth blocks (not the
    first: the merge writes the block before the slot, here index 2); [7, 7.5) extends the last one;
    [3.5, 4) the third from the front; [8, 9) goes after them all."""
    line = DeviceTimeline()
    for begin in (0.0, 2.0, 4.0, 6.0):
        line.reserve(begin, begin + 1.0)
    line.reserve(5.0, 6.0)
    assert (line.starts, line.ends) == ([0.0, 2.0, 4.0], [1.0, 3.0, 7.0])
    line.reserve(7.0, 7.5)
    line.reserve(3.5, 4.0)
    line.reserve(8.0, 9.0)
    assert (line.starts, line.ends) == ([0.0, 2.0, 3.5, 8.0], [1.0, 3.0, 7.5, 9.0])
    assert line.earliest_start(0.5, 1.0) == 1.0 and line.earliest_start(0.5, 1.5) == 9.0  # [7.5, 8) is too short


def test_heft_start_times_wait_for_the_data() -> None:
    """a (1 ms) -> {b, c} (1 ms each) on 2xV100, a's result 4 MB. HEFT: a on gpu0 [0, 1]; b: EFT 2 ms
    on gpu0, 1 + t + 1 on gpu1 (t the link's time for 4 MB, about 0.34 ms): gpu0 [1, 2]; c: 3 ms on
    gpu0, 2 + t on gpu1: gpu1, starting when the data has arrived, 1 ms + t."""
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.F32, (4,)))
    a = graph.add_node("tf.Relu", [x], [TensorType(DType.F32, (1_000_000,))], name="a")
    b = graph.add_node("tf.Relu", [a.outputs[0]], [TensorType(DType.F32, (4,))], name="b")
    c = graph.add_node("tf.Relu", [a.outputs[0]], [TensorType(DType.F32, (4,))], name="c")
    a.cost = b.cost = c.cost = 1e-3
    graph.set_outputs([b.outputs[0], c.outputs[0]])
    problem = PlacementProblem.from_module(Module("m", graph, "2xV100"))
    t = problem.links.transfer_time(4e6, 0, 1)
    assert 0 < t < 1e-3
    placement = PLACERS["heft"](mem_model="paper").place(problem, PlacementContext())
    assert placement.device.tolist() == [0, 0, 1]
    assert placement.start is not None
    assert placement.start.tolist() == pytest.approx([0.0, 1e-3, 1e-3 + t], abs=1e-15)
    assert placement.stats["estimated-makespan-s"] == pytest.approx(2e-3 + t, abs=1e-15)


def test_timeline_of_many_blocks_with_no_gap_long_enough() -> None:
    """300 blocks [2k, 2k + 1) leave gaps of 1: a node of 1.5 goes after the last block, at 599 (the
    scan runs to the end of a list longer than CPython's cached small ints)."""
    line = DeviceTimeline()
    for k in range(300):
        line.reserve(2.0 * k, 2.0 * k + 1)
    assert len(line.starts) == 300
    assert line.earliest_start(0.0, 1.5) == 599.0 and line.earliest_start(0.0, 1.0) == 1.0


def _reference_earliest_start(starts: list[float], ends: list[float], ready: float, duration: float) -> float:
    """The insertion search as one plain scan over every block after ``ready`` (the specification)."""
    t = ready
    for begin, end in zip(starts, ends, strict=True):
        if end <= ready:
            continue
        if t + duration <= begin:
            return t
        t = max(t, end)
    return t


def test_timeline_finds_the_one_wide_gap_far_out() -> None:
    """1,000 blocks [2k, 2k + 1) except k = 699: the gaps are 1 long but the one before block 700 is 3
    (from 1397 to 1400), so a node of 2.5 ready at 0 fits only there, at 1397; booked at 1397..1399.5 it
    merges with block 698, and the next node of 2.5 goes after the last block, at 1999."""
    line = DeviceTimeline()
    for k in range(1000):
        if k != 699:
            line.reserve(2.0 * k, 2.0 * k + 1)
    assert line.earliest_start(0.0, 2.5) == 1397.0
    assert line.earliest_start(1396.5, 2.5) == 1397.0  # ready inside block 698: its end
    line.reserve(1397.0, 1399.5)
    assert line.ends[698] == 1399.5 and len(line.starts) == 999
    assert line.earliest_start(0.0, 2.5) == 1999.0


def test_timeline_matches_the_plain_scan() -> None:
    """200 seeded sequences of 120 bookings (ready 0..80 in halves, lengths 0.5..6: dense, with small
    gaps; each booked in the first slot that holds it, as the schedulers book), then 30 queries: the
    answers agree with a plain scan over every block, and blocks stay merged and disjoint."""
    rng = random.Random(0)
    for _ in range(200):
        line = DeviceTimeline()
        for _ in range(120):
            ready, length = rng.randint(0, 160) / 2, rng.randint(1, 12) / 2
            start = line.earliest_start(ready, length)
            assert start == _reference_earliest_start(line.starts, line.ends, ready, length)
            line.reserve(start, start + length)
            assert all(e < b for e, b in zip(line.ends, line.starts[1:], strict=False))
        for _ in range(30):
            ready, length = rng.randint(0, 400) / 4, rng.randint(0, 16) / 2
            assert line.earliest_start(ready, length) == _reference_earliest_start(
                line.starts, line.ends, ready, length
            )


def test_a_partial_schedule_is_no_placement() -> None:
    """ListScheduler.placement() refuses a schedule that left a node unplaced (device -1)."""
    problem = PlacementProblem.from_module(heterogeneous_fork())
    scheduler = ListScheduler(problem)
    assert scheduler.device == [-1, -1, -1]  # -1 while unplaced
    scheduler.book(0, 0)
    assert scheduler.device == [0, -1, -1]
    with pytest.raises(AssertionError, match="every node is placed"):
        scheduler.placement()


def test_a_received_copy_lives_from_the_send_to_the_arrival() -> None:
    """mem-model=liveness: a (1 ms, gpu0) -> b, a's result 4 MB. b on gpu1 would receive it from a's
    finish (1 ms) until it arrives, 1 ms + the link's time for the edge's 4 MB; on gpu0 nothing."""
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.F32, (4,)))
    a = graph.add_node("tf.Relu", [x], [TensorType(DType.F32, (1_000_000,))], name="a")
    b = graph.add_node("tf.Relu", [x, a.outputs[0]], [TensorType(DType.F32, (4,))], name="b")
    a.cost = b.cost = 1e-3
    graph.set_outputs([b.outputs[0]])
    problem = PlacementProblem.from_module(Module("m", graph, "2xV100"))
    scheduler = ListScheduler(problem, "liveness")
    scheduler.book(0, 0)
    t = problem.links.transfer_time(4e6, 0, 1)
    received = scheduler.received(1, 1)
    assert len(received) == 1 and received[0][1:] == pytest.approx((1e-3, 1e-3 + t))
    assert scheduler.received(1, 0) == []


def test_argmin_and_ready_order() -> None:
    assert argmin([3.0, 1.0, 1.0]) == 1
    assert argmin([float("inf")] * 2) == -1
    module = random_module(3, 20)
    problem = PlacementProblem.from_module(module)
    order = ready_order(problem, np.zeros(problem.num_nodes))  # equal priorities: topological
    position = np.empty(problem.num_nodes, dtype=np.int64)
    position[order] = np.arange(problem.num_nodes)
    assert (position[problem.edge_src] < position[problem.edge_dst]).all()


# ---- HEFT -----------------------------------------------------------------------------------


def test_heft_picks_minimum_eft_per_device_kind() -> None:
    module = heterogeneous_fork()
    check_placer(module, "heft")
    nodes = {node.name: node for node in module.graph.nodes}
    assert nodes["a"].device == "gpu0"
    assert nodes["c"].device == "gpu0"  # V100, 1ms after a, no transfer
    assert nodes["b"].device == "gpu2"  # the first P100: 1ms + a tiny transfer beats 4ms


def test_heft_honours_affinity_and_colocation() -> None:
    module = heterogeneous_fork()
    nodes = {node.name: node for node in module.graph.nodes}
    nodes["c"].affinity = ("P100",)
    nodes["a"].colocate = "k"
    nodes["b"].colocate = "k"
    check_placer(module, "heft")
    assert nodes["c"].device in ("gpu2", "gpu3")
    assert nodes["a"].device == nodes["b"].device


def test_heft_memory_full_falls_back_to_most_free_device() -> None:
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.F32, (4,)))
    sizes = {"a": 10, "b": 12, "c": 8}
    for name, gib in sizes.items():
        node = graph.add_node("tf.Relu", [x], [TensorType(DType.F32, (4,))], name=name)
        node.cost = 1e-3
        node.mem = Mem(persistent=gib * GiB)
    graph.set_outputs([node.outputs[0] for node in graph.nodes])
    module = Module("full", graph, "2xV100")
    problem = PlacementProblem.from_module(module)
    placement = PLACERS["heft"]().place(problem, PlacementContext())
    # a (10 GiB) -> gpu0, b (12 GiB) -> gpu1 (gpu0 full), c (8 GiB) fits nowhere: gpu0 has 6 GiB free.
    assert placement.device.tolist() == [0, 1, 0]
    assert placement.stats["best-effort-nodes"] == 1


def test_pinned_node_ignores_memory() -> None:
    module = heterogeneous_fork()
    problem = PlacementProblem.from_module(module)
    problem.colocation[:] = [0, 0, -1]
    scheduler = ListScheduler(problem)
    assert scheduler.constraints.need[0] == problem.memory[0] + problem.memory[1]  # the whole class
    scheduler.commit(0, 1, 0.0)
    scheduler.constraints.used[1] = problem.capacity[1] + 1.0  # full
    est = scheduler.earliest_starts(1)
    assert est[1] < float("inf") and all(t == float("inf") for d, t in enumerate(est) if d != 1)


def test_heft_is_deterministic_and_empty_graph() -> None:
    first, second = random_module(7, 40, "4xV100"), random_module(7, 40, "4xV100")
    check_placer(first, "heft")
    check_placer(second, "heft")
    assert placement_of(first) == placement_of(second)
    empty = Module("empty", Graph(), "2xV100")
    for algo in ALL_PLACERS:
        Place(algo=algo).run(empty, PassContext())
    # a list scheduler's estimate of nothing is 0 s (before, a default of 1 s for max() passed)
    nothing = PlacementProblem.from_module(empty)
    assert PLACERS["heft"]().place(nothing, PlacementContext()).stats["estimated-makespan-s"] == 0.0


def test_impossible_affinity_is_a_pass_error() -> None:
    module = heterogeneous_fork()
    next(iter(module.graph.nodes)).affinity = ("cpu",)
    with pytest.raises(PassError, match="no device of cluster"):
        Place(algo="heft").run(module, PassContext())
