"""FastT DPOS: place{algo=dpos} (FastT §5.1, Algorithm 1)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from test_place_heft import GiB, check_placer, heterogeneous_fork, random_case

from graphir.annotations import Cost, Mem
from graphir.ir import Graph, Module
from graphir.passes.place import PLACERS, PlacementContext
from graphir.passes.place.common import ListScheduler
from graphir.passes.place.fastt import critical_path, fastt_rank, select_cp_devices
from graphir.passes.place.problem import PlacementProblem, upward_rank
from graphir.types import DType, TensorType


def f32(n: int) -> TensorType:
    return TensorType(DType.F32, (n,))


@given(random_case())
def test_dpos_property(case: tuple[Module, str]) -> None:
    check_placer(case[0], "dpos")


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
