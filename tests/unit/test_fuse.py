"""The fuse pass: invariants on random DAGs (hypothesis), composition, rules, comm model, CCR."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from graphir.cluster import resolve_cluster
from graphir.errors import PassError
from graphir.ir import Graph, Module
from graphir.links import LinkModel
from graphir.pass_infra import PassContext
from graphir.passes.fuse import Fuse
from graphir.passes.fuse.batch import batch_round
from graphir.passes.fuse.common import FineGraph, ccr, coarsen
from graphir.passes.fuse.rules import DEFAULT_RULES_TOML, load_rules, parse_rules
from graphir.types import DType, TensorType
from graphir.verifier import verify

# TF op names, so the rules match. The verifier has no type rules for the n-ary ones (random shapes
# are fine); the element-wise unary ones (Relu, Tanh) keep their first operand's type.
OPS = ["tf.Conv2D", "tf.FusedBatchNormV3", "tf.Relu", "tf.AddV2", "tf.Tanh", "tf.Mul"]
UNARY = {"tf.Relu", "tf.Tanh"}


def random_module(seed: int, num_nodes: int, colocate_fraction: float = 0.0) -> Module:
    """A random DAG: each node takes 0-3 inputs from earlier nodes (or the graph input)."""
    rng = np.random.default_rng(seed)
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.F32, (16,)))
    values = [x]
    for i in range(num_nodes):
        k = int(rng.integers(0, 4))
        local = max(0, len(values) - 30)  # mostly local edges, as in real networks
        picks = [int(rng.integers(local if rng.random() < 0.8 else 0, len(values))) for _ in range(k)]
        inputs = [values[p] for p in picks]
        size = int(rng.integers(1, 1 << 14))
        op = str(rng.choice(OPS))
        result = inputs[0].type if op in UNARY and inputs else TensorType(DType.F32, (size,))
        node = graph.add_node(op, inputs, [result], name=f"n{i}")
        node.cost = float(rng.exponential(1e-5))
        if rng.random() < colocate_fraction:
            node.colocate = f"c{int(rng.integers(0, 5))}"
        values.append(node.outputs[0])
    graph.set_outputs([values[-1]])
    return Module("random", graph, "4xV100")


def check_fusion(module: Module) -> np.ndarray:
    """Invariants after a fusion: acyclic quotient, a dense partition, compute time conserved."""
    verify(module)
    index = module.graph.index()
    quotient = index.quotient()
    assert quotient.order is not None
    groups = index.groups()
    assert (groups >= 0).all(), "every node carries a group"
    assert sorted(set(groups.tolist())) == list(range(quotient.num_groups)), "group ids are 0..k-1"
    fine = FineGraph.from_index(index, LinkModel.from_cluster(module.cluster))
    coarse = coarsen(fine, groups)
    assert coarse.is_acyclic()
    assert math.isclose(coarse.node_time.sum(), fine.node_time.sum(), rel_tol=1e-9)
    return groups


def run(module: Module, **options: object) -> dict:
    result = Fuse.of(**options).run(module, PassContext())  # type: ignore[arg-type]
    return result.stats


ALGOS = [
    {"algo": "cpd-topo", "window": 7},
    {"algo": "cpd-topo", "mem_cap": 30000.0},
    {"algo": "rules"},
    {"algo": "acyclic-batch", "target": 5},
    {"algo": "colocation"},
]


@settings(max_examples=12)
@given(st.integers(0, 2**31 - 1), st.integers(1, 2000), st.sampled_from(range(len(ALGOS))))
@example(seed=11, num_nodes=2000, algo=0)
@example(seed=12, num_nodes=2000, algo=1)
@example(seed=13, num_nodes=2000, algo=2)
@example(seed=14, num_nodes=2000, algo=3)
@example(seed=15, num_nodes=2000, algo=4)
def test_every_algorithm_keeps_the_quotient_acyclic(seed: int, num_nodes: int, algo: int) -> None:
    module = random_module(seed, num_nodes, colocate_fraction=0.05)
    stats = run(module, **ALGOS[algo])
    groups = check_fusion(module)
    assert stats["nodes-after"] == len(set(groups.tolist()))
    assert stats["nodes-before"] == num_nodes


@settings(max_examples=25)
@given(st.integers(0, 2**31 - 1), st.integers(1, 300))
def test_all_algorithms_on_small_graphs(seed: int, num_nodes: int) -> None:
    for options in ALGOS:
        module = random_module(seed, num_nodes, colocate_fraction=0.1)
        run(module, **options)
        check_fusion(module)


@settings(max_examples=15)
@given(st.integers(0, 2**31 - 1), st.integers(2, 400))
def test_fusions_compose_into_coarser_partitions(seed: int, num_nodes: int) -> None:
    module = random_module(seed, num_nodes, colocate_fraction=0.1)
    previous = np.arange(num_nodes)
    last_after = num_nodes
    for options in (
        {"algo": "colocation"},
        {"algo": "rules"},
        {"algo": "cpd-topo", "window": 4},
        {"algo": "acyclic-batch", "target": 3},
    ):
        stats = run(module, **options)
        groups = check_fusion(module)
        assert stats["nodes-before"] == last_after
        last_after = stats["nodes-after"]
        # Every earlier group lies inside one later group (groups of groups).
        pairs = set(zip(previous.tolist(), groups.tolist(), strict=True))
        assert len({p for p, _ in pairs}) == len(pairs)
        previous = groups


@settings(max_examples=20)
@given(st.integers(0, 2**31 - 1), st.integers(2, 500), st.integers(1, 50))
def test_cpd_topo_respects_window_and_memory(seed: int, num_nodes: int, window: int) -> None:
    module = random_module(seed, num_nodes)
    run(module, algo="cpd-topo", window=window, mem_cap=40000.0)
    groups = check_fusion(module)
    index = module.graph.index()
    mem = index.out_bytes()
    sizes = np.bincount(groups)
    assert sizes.max() <= window
    group_mem = np.bincount(groups, weights=mem)
    assert all(group_mem[g] <= 40000 or sizes[g] == 1 for g in range(len(sizes)))


@settings(max_examples=20)
@given(st.integers(0, 2**31 - 1), st.integers(2, 800), st.integers(1, 100))
def test_acyclic_batch_reaches_the_target_or_runs_out_of_edges(seed: int, num_nodes: int, target: int) -> None:
    module = random_module(seed, num_nodes)
    stats = run(module, algo="acyclic-batch", target=target)
    check_fusion(module)
    quotient = module.graph.index().quotient()
    assert quotient.num_groups <= target or len(quotient.edge_src) == 0
    if stats["rounds"]:
        merges = [int(k) for k in str(stats["merges-per-round"]).split(",")]
        assert sum(merges) == num_nodes - quotient.num_groups


def test_batch_round_refuses_the_pesto_fig6_pair() -> None:
    # A=0, B=1 -> C=2, D=3 with heavy A->C and B->D.
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.F32, (1,)))
    big, small = TensorType(DType.F32, (1000,)), TensorType(DType.F32, (1,))
    a = graph.add_node("t.A", [x], [big, small], name="a")
    b = graph.add_node("t.B", [x], [small, big], name="b")
    graph.add_node("t.C", [a.outputs[0], b.outputs[0]], [small], name="c")
    graph.add_node("t.D", [a.outputs[1], b.outputs[1]], [small], name="d")
    module = Module("fig6", graph, "2xV100")
    index = graph.index()
    fine = FineGraph.from_index(index, LinkModel.from_cluster(module.cluster))
    coarse = coarsen(fine, np.arange(4))
    us, vs = batch_round(coarse, 10)
    assert list(zip(us.tolist(), vs.tolist(), strict=True)) == [(0, 2)]


def test_comm_model_is_the_mean_over_ordered_pairs(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text(
        '[[device]]\nname = "a"\n[[device]]\nname = "b"\n[[device]]\nname = "c"\n'
        "[default_link]\nlatency = 1e-5\nbandwidth = 1e9\n"
        '[[link]]\nsrc = "a"\ndst = "b"\nlatency = 4e-5\nbandwidth = 5e8\n'
    )
    model = LinkModel.from_cluster(resolve_cluster(str(toml)))
    # 6 ordered pairs: a<->b slow (2), 4 default.
    assert model.mean_latency == pytest.approx((2 * 4e-5 + 4 * 1e-5) / 6)
    assert model.mean_seconds_per_byte == pytest.approx((2 / 5e8 + 4 / 1e9) / 6)
    times = model.mean_transfer_times(np.array([0, 1000]))
    assert times[0] == pytest.approx(model.mean_latency)
    assert times[1] == pytest.approx(model.mean_latency + 1000 * model.mean_seconds_per_byte)
    # the mean of the per-pair times, pair by pair
    pairs = [model.transfer_time(1000, a, b) for a in range(3) for b in range(3) if a != b]
    assert times[1] == pytest.approx(sum(pairs) / 6)
    assert LinkModel.from_cluster(resolve_cluster("1xV100")).mean_transfer_times(np.array([10]))[0] == 0.0


def test_ccr_eq1() -> None:
    assert ccr(np.array([1.0, 2.0]), np.array([0.5, 0.5, np.nan])) == 3.0
    assert ccr(np.array([]), np.array([1.0])) == 0.0
    assert ccr(np.array([1.0]), np.array([0.0])) == math.inf


def test_fusion_reduces_ccr_on_a_chain() -> None:
    module = random_module(7, 400)
    stats = run(module, algo="cpd-topo")
    assert stats["nodes-after"] < stats["nodes-before"]
    assert stats["ccr-after"] < stats["ccr-before"]


def test_default_rules_parse() -> None:
    rules = load_rules("")
    assert {r.name for r in rules} >= {"conv-bn", "conv-bn-relu", "conv-bn-add-relu", "matmul-add-act"}
    assert parse_rules(DEFAULT_RULES_TOML, "x") == rules


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[rule]]\nname = 'a'\nops = ['onnx.Conv'\n", r"f\.toml:3: error: cannot parse fusion rules: Unclosed array$"),
        (
            "[[rule]]\nname = 'a'\nops = ['onnx.Conv']\n",
            r"f\.toml:1: error: invalid fusion rules: rule 'a' needs 'ops'",
        ),
        ("[alias]\nconv = 'onnx.Conv'\n", r"f\.toml:2: error: invalid fusion rules: alias 'conv' must list"),
        ("[[rule]]\nname = 'a'\nops = ['onnx.Conv', 'bn']\n", r"'bn' is neither an alias"),
        ("[rules]\n", r"unknown table 'rules'"),
        ("[[rule]]\nname = 'a'\nops = ['a.B', 'c.D']\nextra = 1\n", r"unknown key 'extra'"),
    ],
)
def test_bad_rule_files_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "f.toml"
    path.write_text(text)
    with pytest.raises(PassError) as info:
        load_rules(str(path))
    assert info.value.one_line().endswith(info.value.message)
    import re

    assert re.search(message, info.value.one_line()), info.value.one_line()


def test_options_that_do_not_apply_are_errors() -> None:
    module = random_module(1, 5)
    with pytest.raises(TypeError, match="option 'target' does not apply to algo=cpd-topo"):
        run(module, algo="cpd-topo", target=4)


def test_fusion_is_deterministic() -> None:
    outputs = []
    for _ in range(2):
        module = random_module(3, 600, colocate_fraction=0.05)
        run(module, algo="colocation")
        run(module, algo="rules")
        run(module, algo="cpd-topo", window=20)
        outputs.append(module.graph.index().groups().tolist())
    assert outputs[0] == outputs[1]
