"""place{algo=metis}: a METIS k-way partition of the coarse graph, list-scheduled per device."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import check_placer, placement_of, random_module

from graphir.extras import MissingExtraError
from graphir.ir import Graph, Module
from graphir.pass_infra import PassContext
from graphir.passes.place import PLACERS, Place, PlacementContext
from graphir.passes.place.metis import contract_colocation, device_shares, metis_graph
from graphir.passes.place.problem import PlacementProblem
from graphir.types import DType, TensorType

BIG = (1 << 20,)  # 4 MiB of f32
SMALL = (4,)


def two_chains() -> Module:
    """x -> a0..a3 and x -> b0..b3, big tensors along each chain, one tiny edge a1 -> b2."""
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.F32, SMALL))
    prev = {"a": x, "b": x}
    nodes = {}
    for i in range(4):
        for chain in "ab":
            inputs = [prev[chain]]
            if chain == "b" and i == 2:
                inputs.append(nodes["a1"].outputs[1])
            node = graph.add_node(
                "tf.SplitV", inputs, [TensorType(DType.F32, BIG), TensorType(DType.F32, SMALL)], name=f"{chain}{i}"
            )
            node.cost = 1e-3
            nodes[f"{chain}{i}"] = node
            prev[chain] = node.outputs[0]
    graph.set_outputs([prev["a"], prev["b"]])
    return Module("chains", graph, "2xV100")


def test_metis_is_registered() -> None:
    assert "metis" in PLACERS


def test_metis_cuts_the_thin_edge_between_two_chains() -> None:
    module = two_chains()
    placer = check_placer(module, "metis")
    assert placer.algo == "metis"
    devices = {node.name: node.device for node in module.graph.nodes}
    a = {devices[f"a{i}"] for i in range(4)}
    b = {devices[f"b{i}"] for i in range(4)}
    assert len(a) == 1 and len(b) == 1 and a != b
    problem = PlacementProblem.from_module(module)
    result = Place(algo="metis").run(module, PassContext())
    assert result.stats["cut-bytes"] == 16.0  # only the 4-float edge a1 -> b2 crosses
    assert result.stats["nodes.gpu0"] == result.stats["nodes.gpu1"] == 4
    assert problem.num_nodes == 8


def test_metis_graph_is_symmetric_and_merges_parallel_edges() -> None:
    module = two_chains()
    problem = PlacementProblem.from_module(module)
    unit = contract_colocation(problem)
    xadj, adjncy, eweights, vweights, _ = metis_graph(problem, unit)
    assert len(xadj) == problem.num_nodes + 1 and len(vweights) == problem.num_nodes
    pairs = {
        (u, int(adjncy[k])): int(eweights[k]) for u in range(problem.num_nodes) for k in range(xadj[u], xadj[u + 1])
    }
    assert all(pairs[(v, u)] == w for (u, v), w in pairs.items())  # both directions, same weight
    assert all(u != v for u, v in pairs)  # no self loops
    assert len(pairs) == 2 * 7  # 3 + 3 chain edges and the cross edge, each once per direction
    assert (vweights >= 1).all() and (eweights >= 1).all()


def test_colocation_classes_become_one_vertex() -> None:
    module = random_module(5, 30, colocate_fraction=0.3)
    problem = PlacementProblem.from_module(module)
    unit = contract_colocation(problem)
    for root in np.unique(problem.colocation[problem.colocation >= 0]).tolist():
        assert len(set(unit[problem.colocation == root].tolist())) == 1
    assert int(unit.max()) + 1 == len(set(unit.tolist()))
    assert unit[0] == 0  # numbered by first member


@pytest.mark.parametrize("cluster", ["2xV100", "4xV100", "moirai-intra"])
@pytest.mark.parametrize("seed", range(4))
def test_metis_honours_constraints(cluster: str, seed: int) -> None:
    module = random_module(
        seed, 50, cluster, group_fraction=0.3, colocate_fraction=0.1, affinity_fraction=0.3, heavy_fraction=0.1
    )
    check_placer(module, "metis")
    # The constraints, checked here rather than by the placer's own _check_constraints.
    kind = {device.name: device.kind for device in module.cluster.devices}
    classes: dict[str, set[str | None]] = {}
    groups: dict[int, set[str | None]] = {}
    pinned = 0
    for node in module.graph.nodes:
        if node.colocate is not None:
            classes.setdefault(node.colocate, set()).add(node.device)
        if node.group is not None:
            groups.setdefault(node.group, set()).add(node.device)
        if node.affinity:
            assert node.device in node.affinity or kind[node.device] in node.affinity, (node.name, node.device)
            pinned += 1
    assert classes and groups  # the draw has constraints to honour
    assert all(len(devices) == 1 for devices in classes.values()), classes
    assert all(len(devices) == 1 for devices in groups.values()), groups
    assert pinned > 0 or cluster != "moirai-intra"  # affinities are drawn on the heterogeneous cluster
    # Balance, METIS's own contract: each device's share of the compute weight (mean time over the
    # devices) is its target share (device_shares) within the 3 % imbalance METIS allows plus one
    # vertex (a colocation class or group is one vertex: it cannot be split to balance better). On
    # moirai-intra the affinity moves shift vertices to the P100s, so there only every device works.
    problem = PlacementProblem.from_module(module)
    unit = contract_colocation(problem)
    vertex = np.bincount(unit, weights=problem.times.mean(axis=1))
    position = {name: k for k, name in enumerate(problem.device_names)}
    coarse_device = np.zeros(problem.num_nodes, dtype=np.int64)
    for u, name in enumerate(problem.fine.node_names):  # a coarse node's members share its device
        coarse_device[problem.node_group[u]] = position[module.graph.node(name).device]
    load = np.bincount(coarse_device, weights=problem.times.mean(axis=1), minlength=problem.num_devices)
    share = load / load.sum()
    if cluster == "moirai-intra":
        assert (share > 0).all(), share
    else:
        slack = 0.03 + vertex.max() / vertex.sum()
        assert np.all(np.abs(share - device_shares(problem)) <= slack), (share, slack)
    again = random_module(
        seed, 50, cluster, group_fraction=0.3, colocate_fraction=0.1, affinity_fraction=0.3, heavy_fraction=0.1
    )
    check_placer(again, "metis")
    assert placement_of(module) == placement_of(again)  # deterministic


def test_device_shares_follow_speed() -> None:
    module = random_module(1, 40, "moirai-intra")
    problem = PlacementProblem.from_module(module)
    shares = device_shares(problem)
    assert shares.sum() == pytest.approx(1.0)
    # gpu0/gpu1 are V100s, gpu2/gpu3 P100s (costs 1-3x slower in random_module): bigger shares.
    assert shares[0] == pytest.approx(shares[1]) and shares[2] == pytest.approx(shares[3])
    assert shares[0] > shares[2]


def test_fewer_nodes_than_devices() -> None:
    module = random_module(2, 3, "4xV100")
    check_placer(module, "metis")
    assert sorted(node.device for node in module.graph.nodes) == ["gpu0", "gpu1", "gpu2"]


def test_missing_pymetis_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pymetis", None)  # import pymetis raises ImportError
    message = "place{algo=metis} needs pymetis: pip install 'graphir[solvers]'"
    with pytest.raises(MissingExtraError, match=re.escape(message)):
        Place(algo="metis").run(two_chains(), PassContext())


def test_the_pipeline_seed_reaches_metis() -> None:
    """METIS is seeded with ctx.seed (graphir-opt --seed): one seed repeats, another can differ."""
    problem = PlacementProblem.from_module(random_module(0, 60, "4xV100"))

    def placed(seed: int) -> list[int]:
        return PLACERS["metis"]().place(problem, PlacementContext(seed=seed)).device.tolist()

    assert placed(1) == placed(1)
    answers = {tuple(placed(seed)) for seed in range(4)}
    assert len(answers) > 1  # on this graph METIS' k-way refinement depends on the seed


def test_seed_option_of_graphir_opt_reaches_metis(tmp_path: Path) -> None:
    from graphir.driver import run
    from graphir.parser import parse_module
    from graphir.printer import print_module

    source = tmp_path / "m.gir"
    source.write_text(print_module(random_module(0, 60, "4xV100")))
    outputs = {}
    for seed in (0, 0, 1, 2, 3):
        target = tmp_path / f"out{seed}.gir"
        assert run([str(source), "--passes=place{algo=metis}", f"--seed={seed}", "-o", str(target)]) == 0
        devices = [node.device for node in parse_module(target.read_text()).graph.index().nodes]
        assert outputs.setdefault(seed, devices) == devices  # the same seed repeats
    assert len({tuple(devices) for devices in outputs.values()}) > 1


def test_metis_options_are_typed_and_checked() -> None:
    from graphir.errors import PassOptionError
    from graphir.pipeline import parse_pipeline

    (place,) = parse_pipeline("place{algo=metis recursive=true edge-scale=1000}")
    assert place.spec() == "place{algo=metis edge-scale=1000 recursive=true}"
    with pytest.raises(PassOptionError, match=r"unknown option 'seed' for place\{algo=metis\}"):
        parse_pipeline("place{algo=metis seed=3}")
    with pytest.raises(PassOptionError, match="edge-scale must be in"):
        parse_pipeline("place{algo=metis edge-scale=0}")
