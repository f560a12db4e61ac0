"""The synthetic layered-DAG generator (devtools/synth.py)."""

from __future__ import annotations

import numpy as np
import pytest

from devtools.synth import main, make_synthetic_module
from graphir.parser import parse_module
from graphir.printer import print_module
from graphir.verifier import verify


def test_exact_size_annotations_and_validity():
    module = make_synthetic_module(2000, seed=3)
    graph = module.graph
    assert len(graph) == 2000
    verify(module)
    assert all(node.cost is not None and node.mem is not None for node in graph.nodes)
    assert any(node.control_inputs for node in graph.nodes)
    assert graph.outputs
    index = graph.index()
    assert 1.2 < index.num_edges / index.num_nodes < 2.0


def test_heavy_tailed_costs_and_sizes():
    graph = make_synthetic_module(20000, seed=1).graph
    costs = np.sort([node.cost.default for node in graph.nodes])[::-1]
    top = costs[: len(costs) // 100].sum() / costs.sum()
    assert top > 0.15  # the top 1% of nodes hold a large share of the time
    sizes = np.array([node.outputs[0].nbytes for node in graph.nodes])
    assert sizes.min() < 1024 and sizes.max() > 64 << 20
    persistent = [node.mem.persistent for node in graph.nodes if node.op == "synth.Variable"]
    assert persistent and all(p > 0 for p in persistent)


def test_seeded_and_deterministic():
    a = print_module(make_synthetic_module(1500, seed=7))
    assert a == print_module(make_synthetic_module(1500, seed=7))
    assert a != print_module(make_synthetic_module(1500, seed=8))
    assert print_module(parse_module(a)) == a


def test_tiny_and_invalid_sizes():
    assert len(make_synthetic_module(1, seed=0).graph) == 1
    with pytest.raises(ValueError, match="at least 1"):
        make_synthetic_module(0)


def test_100k_nodes_follow_the_stated_distributions():
    """At 100,000 nodes the samples pin the generator's documented parameters.

    Speed is measured by devtools/bench_fuse.py and devtools/bench_scale.py (benchmarks/results/), not here.
    Bounds (3 sigma): the median of n log-normal draws has a log standard error of
    1.2533 * SIZE_SIGMA / sqrt(n) = 0.0079, so the median result is MEDIAN_ELEMENTS within 2.5 %;
    variables are VARIABLE_FRACTION of the nodes (sd 0.00086) plus the first layer (< 2 * width).
    """
    from devtools import synth

    module = make_synthetic_module(100_000, seed=0)
    graph = module.graph
    assert len(graph) == 100_000
    elements = np.array([node.outputs[0].type.num_elements for node in graph.nodes])
    assert abs(np.log(np.median(elements) / synth.MEDIAN_ELEMENTS)) < 0.025
    assert elements.min() >= 1 and elements.max() <= synth.MAX_ELEMENTS
    variables = sum(node.op == "synth.Variable" for node in graph.nodes) / len(graph)
    assert abs(variables - synth.VARIABLE_FRACTION) < 0.003 + 80 / 100_000
    index = graph.index()
    assert (index.edge_src < index.edge_dst).all()  # numbered topologically: a DAG
    assert 1.2 < index.num_edges / index.num_nodes < 2.0


def test_cli_writes_gir(tmp_path, capsys):
    out = tmp_path / "s.gir"
    assert main(["500", str(out), "--seed", "2"]) == 0
    assert "500 nodes" in capsys.readouterr().err
    assert out.read_text() == print_module(make_synthetic_module(500, seed=2))
    assert main(["0", str(out)]) == 1
