"""Celeritas's placers: place{algo=order-place} and place{algo=adjusting} (§5.2, Algorithm 2)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import ALL_PLACERS, GiB, add_memory_pressure, check_placer, f32, placement_of, random_case, random_module
from hypothesis import given

from graphir.annotations import Mem
from graphir.ir import Graph, Module
from graphir.passes.orders import cpd_topo
from graphir.passes.place import PLACERS, Placement, PlacementContext
from graphir.passes.place.celeritas import celeritas_order
from graphir.passes.place.problem import PlacementProblem


def run_placer(module: Module, algo: str, **options: object) -> tuple[PlacementProblem, Placement]:
    problem = PlacementProblem.from_module(module)
    return problem, PLACERS[algo](**options).place(problem, PlacementContext())


@given(random_case())
def test_order_place_property(case: tuple[Module, str, bool]) -> None:
    check_placer(case[0], "order-place", fits=case[2])


@given(random_case())
def test_adjusting_property(case: tuple[Module, str, bool]) -> None:
    check_placer(case[0], "adjusting", fits=case[2])


@pytest.mark.parametrize("cluster", ["2xV100", "4xV100", "moirai-intra"])
@pytest.mark.parametrize("seed", range(4))
def test_all_placers_on_60_node_dags(seed: int, cluster: str) -> None:
    """Every placer, with groups, colocation, affinity and memory pressure, on the largest DAGs.

    The pressure (:func:`helpers.add_memory_pressure`): no device holds the persistent bytes alone,
    any spread fits; every placer here is memory-aware, so its answer must fit on several devices.
    """
    for algo in ALL_PLACERS:
        options = {"group_fraction": 0.5, "colocate_fraction": 0.1, "affinity_fraction": 0.2}
        module = random_module(seed, 60, cluster, **options)
        assert add_memory_pressure(module, seed)
        check_placer(module, algo, fits=True)
        again = random_module(seed, 60, cluster, **options)
        add_memory_pressure(again, seed)
        check_placer(again, algo)
        assert placement_of(module) == placement_of(again), f"{algo} is not deterministic"


def test_order_follows_cpd_topo() -> None:
    module = random_module(11, 50, "4xV100")
    problem = PlacementProblem.from_module(module)
    comm = problem.mean_comm_times()[problem.succ_edge]
    expected = cpd_topo(problem.num_nodes, problem.succ_offsets, problem.succ, problem.times.mean(axis=1), comm)
    assert celeritas_order(problem) == expected.tolist()


def chain(weights_gib: list[int], cluster: str = "2xV100") -> Module:
    graph = Graph()
    value = graph.add_input("x", f32(4))
    for i, gib in enumerate(weights_gib):
        node = graph.add_node("tf.Relu", [value], [f32(4)], name=f"n{i}")
        node.cost = 1e-3
        node.mem = Mem(persistent=gib * GiB)
        value = node.outputs[0]
    graph.set_outputs([value])
    return Module("chain", graph, cluster)


def test_order_place_fills_devices_in_turn() -> None:
    # Celeritas's rule (mem-model=paper: every node's bytes held all step): 16 GiB per V100: 5+5+5 on
    # gpu0, the 4th moves on to gpu1, and so on; never back to gpu0.
    _, placement = run_placer(chain([5, 5, 5, 5, 5, 5, 1, 5], "4xV100"), "order-place", mem_model="paper")
    assert placement.device.tolist() == [0, 0, 0, 1, 1, 1, 1, 2]
    assert placement.stats["best-effort-nodes"] == 0


def test_adjusting_chain_stays_on_one_device_until_full() -> None:
    # A chain never gains by moving (eq. 9 never holds: EST is the same everywhere but for the
    # transfer); memory forces the moves (EST = +inf on a full device).
    _, placement = run_placer(chain([6, 6, 6, 6, 6, 6]), "adjusting")
    assert placement.device.tolist() == [0, 0, 1, 1, 0, 1]
    # n4 and n5 fit nowhere (4 GiB free on each): best effort, most free memory (ties: lowest number).
    assert placement.stats["best-effort-nodes"] == 2


def test_adjusting_colocation_follows_first_member_and_affinity() -> None:
    graph = Graph()
    x = graph.add_input("x", f32(4))
    names = ["a", "b", "c", "d"]
    nodes = {}
    for name in names:
        nodes[name] = graph.add_node("tf.Relu", [x], [f32(4)], name=name)
        nodes[name].cost = 1e-3
    nodes["a"].colocate = "k"
    nodes["d"].colocate = "k"
    nodes["b"].affinity = ("P100",)
    graph.set_outputs([node.outputs[0] for node in nodes.values()])
    module = Module("m", graph, "moirai-intra")
    check_placer(module, "adjusting")
    assert nodes["a"].device == nodes["d"].device
    assert nodes["b"].device in ("gpu2", "gpu3")


def test_adjusting_moves_when_waiting_exceeds_back_cost() -> None:
    # Independent 1ms nodes: each new node would wait 1ms more on the previous device, and a sink
    # has back_cost 0, so eq. (9) spreads them over the devices.
    graph = Graph()
    x = graph.add_input("x", f32(4))
    for i in range(4):
        graph.add_node("tf.Relu", [x], [f32(4)], name=f"n{i}").cost = 1e-3
    graph.set_outputs([node.outputs[0] for node in graph.nodes])
    module = Module("m", graph, "4xV100")
    _, placement = run_placer(module, "adjusting")
    assert sorted(placement.device.tolist()) == [0, 1, 2, 3]
    assert placement.stats["moved"] == 3
    assert np.allclose(placement.start, 0.0)
