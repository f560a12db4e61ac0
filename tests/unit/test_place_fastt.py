"""FastT DPOS: place{algo=dpos} (FastT §5.1, Algorithm 1)."""

from __future__ import annotations

import numpy as np
from helpers import GiB, check_placer, f32, heterogeneous_fork, random_case
from hypothesis import given

from graphir.annotations import Cost, Mem
from graphir.ir import Graph, Module
from graphir.passes.place import PLACERS, PlacementContext
from graphir.passes.place.common import ListScheduler
from graphir.passes.place.fastt import critical_path, fastt_rank, select_cp_devices
from graphir.passes.place.problem import PlacementProblem, upward_rank


@given(random_case())
def test_dpos_property(case: tuple[Module, str, bool]) -> None:
    check_placer(case[0], "dpos", fits=case[2])


def test_rank_uses_maximal_times_unlike_heft() -> None:
    module = heterogeneous_fork()  # b: 4ms on a V100, 1ms on a P100
    problem = PlacementProblem.from_module(module)
    rank = fastt_rank(problem)
    b = 1
    assert rank[b] == 4e-3  # a sink: its maximal time
    assert np.isclose(upward_rank(problem)[b], 2.5e-3)  # HEFT: the mean over 2 V100 + 2 P100
    # a: 1ms + the slowest link's transfer of 16 B + rank 4ms
    worst = max(problem.links.transfer_time(16.0, s, d) for s in range(4) for d in range(4) if s != d)
    assert np.isclose(rank[0], 1e-3 + worst + 4e-3)


def diamond_with_tail() -> Module:
    """s -> {p (3ms), q (1ms)} -> t; the critical path is s -> p -> t."""
    graph = Graph()
    x = graph.add_input("x", f32(4))
    s = graph.add_node("tf.Relu", [x], [f32(4)], name="s")
    q = graph.add_node("tf.Relu", [s.outputs[0]], [f32(4)], name="q")
    p = graph.add_node("tf.Relu", [s.outputs[0]], [f32(4)], name="p")
    t = graph.add_node("tf.AddV2", [p.outputs[0], q.outputs[0]], [f32(4)], name="t")
    for node, ms in ((s, 1), (q, 1), (p, 3), (t, 1)):
        node.cost = ms * 1e-3
    graph.set_outputs([t.outputs[0]])
    return Module("diamond", graph, "2xV100")


def test_critical_path_follows_largest_rank() -> None:
    problem = PlacementProblem.from_module(diamond_with_tail())
    assert critical_path(problem, fastt_rank(problem)) == [0, 2, 3]  # s, p, t (topological numbers)


def test_critical_path_devices_prefer_fast_devices_and_respect_memory() -> None:
    module = heterogeneous_fork()
    nodes = {node.name: node for node in module.graph.nodes}
    nodes["a"].cost = Cost({"V100-32GB": 1e-3, "P100": 3e-3})
    problem = PlacementProblem.from_module(module)
    scheduler = ListScheduler(problem)
    path = critical_path(problem, fastt_rank(problem))
    assert path == [0, 1]  # a -> b (b's maximal time 4ms beats c's)
    # The average over the path: V100 (1 + 4) / 2 = 2.5ms, P100 (3 + 1) / 2 = 2ms: gpu2.
    assert select_cp_devices(scheduler, path, 0) == {0: 2, 1: 2}
    # When a P100 can hold a alone, its average is a's 3ms: the V100 run (2.5ms) takes both.
    used = scheduler.constraints.used
    used[2], used[3] = problem.capacity[2] - problem.memory[0], problem.capacity[3] - problem.memory[0]
    assert select_cp_devices(scheduler, path, 0) == {0: 0, 1: 0}


def test_dpos_reselects_when_critical_path_device_fills() -> None:
    """FastT: "when a critical-path device's memory is full, we find another critical-path device"."""
    graph = Graph()
    x = graph.add_input("x", f32(4))
    head = graph.add_node("tf.Relu", [x], [f32(4)], name="head")
    tail = graph.add_node("tf.Relu", [head.outputs[0]], [f32(4)], name="tail")
    filler = graph.add_node("tf.Relu", [x], [f32(4)], name="filler")
    big = graph.add_node("tf.Relu", [x], [f32(4)], name="big")
    head.cost, tail.cost, filler.cost, big.cost = 1e-3, 1e-3, 1.9e-3, 1.5e-3
    head.mem, tail.mem, big.mem = Mem(persistent=GiB), Mem(persistent=8 * GiB), Mem(persistent=10 * GiB)
    graph.set_outputs([tail.outputs[0], filler.outputs[0], big.outputs[0]])
    module = Module("m", graph, "2xV100")
    problem = PlacementProblem.from_module(module)
    path = critical_path(problem, fastt_rank(problem))
    assert path == [0, 1]  # head (rank 2.01ms) -> tail; filler (1.9ms) and big (1.5ms) are off it
    assert select_cp_devices(ListScheduler(problem), path, 0) == {0: 0, 1: 0}  # 9 GiB fit one V100
    placement = PLACERS["dpos"]().place(problem, PlacementContext())
    # Order head, filler, big, tail. head: gpu0 [0, 1]. filler: EFT 2.9 on gpu0, 1.9 on gpu1: gpu1.
    # big: EFT 2.5 on gpu0, 3.4 on gpu1: gpu0, which keeps 5 GiB free. tail (8 GiB) no longer fits
    # its CP device: the selection is rerun and gpu1 takes it, [1.9, 2.9].
    assert placement.device.tolist() == [0, 1, 1, 0]
    assert placement.stats["cp-reselections"] == 1
    assert placement.start is not None and np.allclose(placement.start, [0.0, 1.9e-3, 0.0, 1e-3])
    check_placer(module, "dpos")


def _names(problem: PlacementProblem, values: list[int], names: tuple[str, ...]) -> dict[str, int]:
    """``values`` (per coarse node) by the names of the fine nodes in ``names``."""
    return {name: int(values[int(problem.node_group[problem.fine.node_names.index(name)])]) for name in names}


def test_dpos_reselects_when_a_critical_path_device_other_than_gpu0_fills() -> None:
    """The critical path head -> tail sits on gpu2 (a P100) and fills there; the reselection moves tail to gpu3.

    moirai-intra: gpu0-1 V100-32GB (32 GiB), gpu2-3 P100 (16 GiB). Times (V100 / P100, ms): head 2 / 1
    (1 GiB), tail 2 / 1 (8 GiB), filler 3.8 / 1.5, big 3.5 / 2 (10 GiB). FastT ranks take maxima:
    head 2 + 2 + a 16 B transfer, filler 3.8, big 3.5, tail 2, so the order is head, filler, big,
    tail, and the path is head -> tail. Its average time is 2 ms on a V100 and 1 ms on a P100 (9 GiB
    fit both): gpu2, the first P100.
    head: gpu2 [0, 1]. filler: EFT 3.8 (gpu0, gpu1), 1 + 1.5 (gpu2), 1.5 (gpu3): gpu3 [0, 1.5].
    big: EFT 3.5, 3.5, 1 + 2 = 3, 1.5 + 2 = 3.5: gpu2 [1, 3], which keeps 16 - 11 = 5 GiB free.
    tail (8 GiB) no longer fits gpu2: reselected from tail on, gpu3 (16 GiB free, 1 ms) wins, and
    tail starts when gpu3 is free, at 1.5 ms (head's 16 B arrive a few microseconds after 1 ms).
    Before this test, a mutant that reselected only when the path sat on gpu0 survived.
    """
    graph = Graph()
    x = graph.add_input("x", f32(4))
    head = graph.add_node("tf.Relu", [x], [f32(4)], name="head")
    tail = graph.add_node("tf.Relu", [head.outputs[0]], [f32(4)], name="tail")
    filler = graph.add_node("tf.Relu", [x], [f32(4)], name="filler")
    big = graph.add_node("tf.Relu", [x], [f32(4)], name="big")
    for node, v100, p100 in ((head, 2, 1), (tail, 2, 1), (filler, 3.8, 1.5), (big, 3.5, 2)):
        node.cost = Cost({"V100-32GB": v100 * 1e-3, "P100": p100 * 1e-3})
    head.mem, tail.mem, big.mem = Mem(persistent=GiB), Mem(persistent=8 * GiB), Mem(persistent=10 * GiB)
    graph.set_outputs([tail.outputs[0], filler.outputs[0], big.outputs[0]])
    module = Module("m", graph, "moirai-intra")
    problem = PlacementProblem.from_module(module)
    names = ("head", "tail", "filler", "big")
    path = critical_path(problem, fastt_rank(problem))
    assert [problem.fine.node_names[problem.members[g][0]] for g in path] == ["head", "tail"]
    assert set(select_cp_devices(ListScheduler(problem), path, 0).values()) == {2}
    for mem_model in ("paper", "liveness"):
        placement = PLACERS["dpos"](mem_model=mem_model).place(problem, PlacementContext())
        assert _names(problem, placement.device.tolist(), names) == {"head": 2, "tail": 3, "filler": 3, "big": 2}
        assert placement.stats["cp-reselections"] == 1 and placement.stats["best-effort-nodes"] == 0
        assert placement.start is not None
        starts = _names(problem, (placement.start * 1e6).round().tolist(), names)
        assert starts == {"head": 0, "tail": 1500, "filler": 0, "big": 1000}  # microseconds


def test_dpos_falls_back_when_the_reselected_device_cannot_take_the_node() -> None:
    """3xV100 (16 GiB each), mem-model=paper. head (1 ms, 1 GiB) -> tail (1 ms, 8 GiB) is the
    critical path; big (1.5 ms, 10 GiB) is colocated with head, filler (1.9 ms, 1 GiB) is free;
    tail is colocated with z (0.5 ms, 10 GiB, off the path), so tail, the first of its class to be
    placed, needs room for 18 GiB.

    Order by rank: head, filler, big, tail, z. head: gpu0 (the path's device: ties go to the lowest
    number) [0, 1]; filler: EFT 2.9 on gpu0, 1.9 on gpu1 and gpu2: gpu1; big follows head to gpu0
    [1, 2.5] (11 GiB used). tail's class does not fit gpu0 (5 GiB free): the path is reselected from
    tail by tail's own 8 GiB, and gpu1 (15 GiB free; a tie in time with gpu2, lowest number) wins.
    The class does not fit gpu1 either, so tail goes by the minimum-EFT rule, where no device has
    room for 18 GiB: the best effort, the device with the most free memory, gpu2 (16 GiB), and z
    follows. Before this test, a mutant that booked tail on gpu1 anyway (`d <= 0` for `d >= 0`)
    survived.
    """
    graph = Graph()
    x = graph.add_input("x", f32(4))
    head = graph.add_node("tf.Relu", [x], [f32(4)], name="head")
    tail = graph.add_node("tf.Relu", [head.outputs[0]], [f32(4)], name="tail")
    filler = graph.add_node("tf.Relu", [x], [f32(4)], name="filler")
    big = graph.add_node("tf.Relu", [x], [f32(4)], name="big")
    z = graph.add_node("tf.Relu", [x], [f32(4)], name="z")
    for node, ms, gib in ((head, 1, 1), (tail, 1, 8), (filler, 1.9, 1), (big, 1.5, 10), (z, 0.5, 10)):
        node.cost = ms * 1e-3
        node.mem = Mem(persistent=gib * GiB)
    big.colocate = head.colocate = "h"
    tail.colocate = z.colocate = "t"
    graph.set_outputs([tail.outputs[0], filler.outputs[0], big.outputs[0], z.outputs[0]])
    problem = PlacementProblem.from_module(Module("m", graph, "3xV100"))
    placement = PLACERS["dpos"](mem_model="paper").place(problem, PlacementContext())
    names = ("head", "tail", "filler", "big", "z")
    assert _names(problem, placement.device.tolist(), names) == {"head": 0, "tail": 2, "filler": 1, "big": 0, "z": 2}
    assert placement.stats["cp-reselections"] == 1 and placement.stats["best-effort-nodes"] == 1


def test_critical_path_devices_skip_a_node_no_device_can_take() -> None:
    """A chain a -> b -> c on 2xV100 (16 GiB each): b needs 20 GiB, a and c 1 GiB (mem-model=paper).

    The run from a stops at b on both devices: a alone, gpu0 (ties: lowest number). No device can
    take b, which is left out; the selection goes on with c (gpu0 again, with 15 GiB free). DPOS
    then places b by the minimum-EFT rule's fallback, the device with the most free memory: gpu1.
    """
    graph = Graph()
    previous = graph.add_input("x", f32(4))
    for name, gib in (("a", 1), ("b", 20), ("c", 1)):
        node = graph.add_node("tf.Relu", [previous], [f32(4)], name=name)
        node.cost = 1e-3
        node.mem = Mem(persistent=gib * GiB)
        previous = node.outputs[0]
    graph.set_outputs([previous])
    problem = PlacementProblem.from_module(Module("m", graph, "2xV100"))
    path = critical_path(problem, fastt_rank(problem))
    assert path == [0, 1, 2]
    assert select_cp_devices(ListScheduler(problem, "paper"), path, 0) == {0: 0, 2: 0}
    placement = PLACERS["dpos"](mem_model="paper").place(problem, PlacementContext())
    assert placement.device.tolist() == [0, 1, 0]
    assert placement.stats["best-effort-nodes"] == 1 and placement.stats["cp-reselections"] == 0


def test_critical_path_devices_prefer_the_longer_run_on_equal_average() -> None:
    """A chain a -> b (1 ms each, 4 GiB each) on 2xV100 with gpu0 holding 10 GiB already: gpu0 has
    room for a alone (average 1 ms), gpu1 for both (average 1 ms): the longer run wins, gpu1 takes
    both (FastT's "as many remaining operations as possible"; the device number breaks only a tie
    in length too). Before this test, a mutant that ignored the run's length survived."""
    graph = Graph()
    previous = graph.add_input("x", f32(4))
    for name in ("a", "b"):
        node = graph.add_node("tf.Relu", [previous], [f32(4)], name=name)
        node.cost = 1e-3
        node.mem = Mem(persistent=4 * GiB)
        previous = node.outputs[0]
    graph.set_outputs([previous])
    problem = PlacementProblem.from_module(Module("m", graph, "2xV100"))
    scheduler = ListScheduler(problem, "paper")
    assert select_cp_devices(scheduler, [0, 1], 0) == {0: 0, 1: 0}  # both fit either: the lowest number
    scheduler.constraints.used[0] = problem.capacity[0] - 6 * GiB
    assert select_cp_devices(scheduler, [0, 1], 0) == {0: 1, 1: 1}
    assert select_cp_devices(scheduler, [0, 1], 1) == {1: 0}  # b alone: a tie in both, gpu0
