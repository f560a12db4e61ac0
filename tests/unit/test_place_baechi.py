"""Baechi's placers (place{algo=m-topo|m-etf|m-sct}): LP favourite child, memory, constraints, properties."""

from __future__ import annotations

import time

import numpy as np
import pytest
from helpers import (
    GiB,
    add_memory_pressure,
    assert_fits,
    build,
    chain_with_weights,
    check_placer,
    placed,
    random_case,
    random_module,
    run,
)
from hypothesis import given
from hypothesis import strategies as st

from graphir.annotations import Mem
from graphir.ir import Graph, Module
from graphir.passes.place import PLACERS, PlacementContext
from graphir.passes.place.baechi import favourite_children, solve_favourite_lp
from graphir.passes.place.problem import PlacementProblem
from graphir.simulator import simulate
from graphir.types import DType, TensorType
from graphir.verifier import verify

BAECHI = ["m-topo", "m-etf", "m-sct"]


def fork_join() -> Module:
    """a -> c, a -> b (5ms), b -> d, c -> d: b is on the critical path."""
    return build({"a": [], "c": ["a"], "b": ["a"], "d": ["b", "c"]}, {"a": 1e-3, "c": 1e-3, "b": 5e-3, "d": 1e-3})


def paper(algo: str) -> dict[str, str]:
    """Options that select Baechi's own memory rule (m-ETF and m-SCT default to ``liveness``)."""
    return {} if algo == "m-topo" else {"mem_model": "paper"}


def test_lp_favourite_child_on_the_fork_join() -> None:
    # Worked by hand: w = 7ms forces x_ab = x_bd = 0 (no transfer on the critical path), hence
    # x_ac = x_cd = 1; favourite(a) = b, favourite(b) = d.
    problem = PlacementProblem.from_module(fork_join())
    names = {node.name: k for k, node in enumerate(fork_join().graph.index().nodes)}
    x, w = solve_favourite_lp(problem)
    assert w == pytest.approx(7e-3)
    by_edge = {(int(s), int(d)): float(v) for s, d, v in zip(problem.edge_src, problem.edge_dst, x, strict=True)}
    a, b, c, d = (int(problem.node_group[names[n]]) for n in "abcd")
    assert by_edge[(a, b)] == pytest.approx(0) and by_edge[(b, d)] == pytest.approx(0)
    assert by_edge[(a, c)] == pytest.approx(1) and by_edge[(c, d)] == pytest.approx(1)
    favourite = favourite_children(problem, x)
    assert favourite[a] == b and favourite[b] == d and favourite[c] == -1 and favourite[d] == -1


def test_rounding_keeps_one_favourite_per_node() -> None:
    # A tie at 0.5 on both children of a: only the first edge (smaller x, then edge number) wins.
    problem = PlacementProblem.from_module(build({"a": [], "b": ["a"], "c": ["a"]}, dict.fromkeys("abc", 1e-3)))
    favourite = favourite_children(problem, np.array([0.5, 0.5]))
    assert favourite.tolist() == [1, -1, -1]
    favourite = favourite_children(problem, np.array([0.5, 0.2]))
    assert favourite.tolist() == [2, -1, -1]


def test_m_sct_follows_the_favourite_child_where_m_etf_does_not() -> None:
    etf, sct = fork_join(), fork_join()
    run(etf, "m-etf")
    stats = run(sct, "m-sct")
    assert placed(etf) == {"a": "gpu0", "c": "gpu0", "b": "gpu1", "d": "gpu1"}
    assert placed(sct) == {"a": "gpu0", "c": "gpu1", "b": "gpu0", "d": "gpu0"}
    assert stats["favourite-children"] == 2
    assert simulate(sct).makespan == pytest.approx(7e-3)
    assert simulate(etf).makespan > simulate(sct).makespan


@pytest.mark.parametrize("algo", BAECHI)
def test_memory_fallback_picks_the_device_with_most_free_memory(algo: str) -> None:
    # 12 + 12 GiB fill both V100s (16 GiB); the third 12 GiB node fits nowhere: best effort puts it
    # on the device with the most free memory; the first two must be on different devices.
    module = chain_with_weights([12, 12, 12, 3])
    stats = run(module, algo)
    devices = placed(module)
    assert devices["n0"] != devices["n1"]
    assert stats["best-effort-nodes"] >= 1
    assert simulate(module).oom_devices  # reported, never silently accepted


def test_m_topo_best_effort_prefers_more_free_memory() -> None:
    # Share = 22 / 2 + 10 = 21 GiB, capped at 16 GiB: gpu0 takes n0 (10), n1 (2) -> 12 GiB; n2 (10)
    # does not fit: gpu1 (10 GiB). n3 (ignored memory 0) stays on gpu1.
    module = chain_with_weights([10, 2, 10, 0])
    run(module, "m-topo")
    assert placed(module) == {"n0": "gpu0", "n1": "gpu0", "n2": "gpu1", "n3": "gpu1"}
    # 15 + 15 + 15: the third fits nowhere -> best effort on the device with most free memory:
    # both have 1 GiB left, the lower number wins.
    module = chain_with_weights([15, 15, 15])
    stats = run(module, "m-topo")
    assert placed(module) == {"n0": "gpu0", "n1": "gpu1", "n2": "gpu0"}
    assert stats["best-effort-nodes"] == 1


@pytest.mark.parametrize("algo", BAECHI)
def test_affinity_is_honoured(algo: str) -> None:
    # pesto: gpu0, gpu1 (V100) and cpu0: the host-only nodes must land on cpu0.
    module = build({"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}, dict.fromkeys("abcd", 1e-3), "pesto")
    nodes = {node.name: node for node in module.graph.nodes}
    nodes["b"].affinity = ("cpu",)
    nodes["d"].affinity = ("cpu",)
    check_placer(module, algo)
    assert nodes["b"].device == "cpu0" and nodes["d"].device == "cpu0"
    assert nodes["a"].device != "cpu0" or algo == "m-topo"


@pytest.mark.parametrize("algo", BAECHI)
def test_colocation_class_goes_where_the_whole_class_fits(algo: str) -> None:
    # Baechi's rule (mem-model=paper; under liveness the first member checks its own allocations).
    # n0 (8 GiB) goes first to gpu0. The class {n1, n3} needs 6 + 6 GiB: gpu0 has 8 GiB left, so
    # the first placed member takes the class to gpu1, and n3 follows even if gpu0 would be earlier.
    module = chain_with_weights([8, 6, 0, 6])
    nodes = module.graph.index().nodes
    nodes[1].colocate = "k"
    nodes[3].colocate = "k"
    run(module, algo, **paper(algo))
    verify(module)
    assert nodes[0].device == "gpu0"
    assert nodes[1].device == nodes[3].device == "gpu1"


def test_m_etf_releases_activations_after_their_consumers_ran() -> None:
    # Baechi's ETF device model: running a node allocates its output, then releases the outputs
    # of producers whose consumers all ran. Chain of three 10 GiB activations on 16 GiB V100s:
    # n0 -> gpu0; n1 cannot join n0 (20 GiB) -> gpu1, and running it releases n0 on gpu0; n2 cannot
    # join n1 on gpu1 but now fits on gpu0. A static count would have left no room for n2.
    module = chain_with_weights([0, 0, 0])
    for node in module.graph.nodes:
        node.mem = Mem(activation=10 * GiB)
    stats = run(module, "m-etf", mem_model="paper")
    assert placed(module) == {"n0": "gpu0", "n1": "gpu1", "n2": "gpu0"}
    assert stats["best-effort-nodes"] == 0


@pytest.mark.parametrize("algo", BAECHI)
def test_deterministic(algo: str) -> None:
    first, second = random_module(5, 50, "4xV100"), random_module(5, 50, "4xV100")
    assert add_memory_pressure(first, 5) and add_memory_pressure(second, 5)
    run(first, algo)
    run(second, algo)
    assert [(n.device, n.order) for n in first.graph.nodes] == [(n.device, n.order) for n in second.graph.nodes]
    assert_fits(first, algo)  # no device holds the persistent bytes alone; a spread placement fits


@given(random_case(), st.sampled_from(BAECHI))
def test_baechi_property(case: tuple[Module, str, bool], algo: str) -> None:
    module, _, pressure = case
    check_placer(module, algo, fits=pressure)


def test_m_topo_memory_share_by_hand() -> None:
    """m-TOPO's per-device share is total / devices + the largest node: three independent nodes of
    1, 2 and 3 GiB on 2xV100 give 6 / 2 + 3 = 6 GiB; an empty graph has a share of 0."""
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.F32, (4,)))
    for k, gib in enumerate((1, 2, 3)):
        node = graph.add_node("tf.Relu", [x], [TensorType(DType.F32, (4,))], name=f"n{k}")
        node.cost = 1e-3
        node.mem = Mem(persistent=gib * GiB)
    graph.set_outputs([node.outputs[0] for node in graph.nodes])
    problem = PlacementProblem.from_module(Module("m", graph, "2xV100"))
    placement = PLACERS["m-topo"]().place(problem, PlacementContext())
    assert placement.stats["memory-share-B"] == 6 * GiB
    empty = PlacementProblem.from_module(Module("e", Graph(), "2xV100"))
    assert PLACERS["m-topo"]().place(empty, PlacementContext()).stats["memory-share-B"] == 0


def test_m_sct_reports_its_lp_wall_time() -> None:
    """lp-wall-s is the LP's own time: between 0 and the whole placer's wall time."""
    problem = PlacementProblem.from_module(chain_with_weights([1, 1, 1]))
    began = time.perf_counter()
    placement = PLACERS["m-sct"]().place(problem, PlacementContext())
    elapsed = time.perf_counter() - began
    assert 0.0 <= placement.stats["lp-wall-s"] <= elapsed
