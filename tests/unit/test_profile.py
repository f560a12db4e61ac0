"""``profile``: analytical FLOPs/bytes/memory, per-kind roofline times, and measured onnxruntime times."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import f32

from graphir.annotations import Mem
from graphir.attributes import DenseTensor
from graphir.backends.host import CACHE_DIR_ENV, CPU_MEASURE_ENV
from graphir.backends.json_export import cost_graph
from graphir.cluster import resolve_cluster
from graphir.driver import load_builtin_passes
from graphir.errors import PassError
from graphir.importers import load_module
from graphir.ir import Graph, Module
from graphir.ops import estimate_node
from graphir.parser import parse_module
from graphir.pass_infra import PassContext, providers_of
from graphir.passes.profile import Profile, measure_onnxruntime
from graphir.passes.profile.roofline import analyze_graph
from graphir.printer import print_module
from graphir.types import DType, TensorType

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = sorted(LIGHT.glob("light_*.onnx"))


@pytest.fixture(autouse=True)
def fixed_cpu(monkeypatch, tmp_path):
    monkeypatch.setenv(CPU_MEASURE_ENV, "0")
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))


def run_profile(module: Module, **options):
    return Profile.of(**options).run(module, PassContext())


def flops_bytes(node):
    flops, nbytes, _, fallback, _ = estimate_node(node)
    assert not fallback, node.op
    return flops, nbytes


# ----------------------------------------------------------------------------- FLOPs by hand


def test_conv_gemm_and_pooling_flops():
    g = Graph()
    x = g.add_input("x", f32(2, 8, 16, 16))
    w = g.add_constant("w", f32(4, 4, 3, 3))  # group = 2: Cin/g = 4
    conv = g.add_node("onnx.Conv", [x, w], [f32(2, 4, 14, 14)], params={"group": 2})
    assert flops_bytes(conv)[0] == 2 * (2 * 4 * 14 * 14) * (4 * 3 * 3)
    assert estimate_node(conv)[2] == 4 * 3 * 3 * 14 * 14 * 4  # im2col of one image
    pool = g.add_node("onnx.MaxPool", [conv.outputs[0]], [f32(2, 4, 7, 7)], params={"kernel_shape": (2, 2)})
    assert flops_bytes(pool) == (2 * 4 * 7 * 7 * 4, (2 * 4 * 14 * 14 + 2 * 4 * 7 * 7) * 4)
    a = g.add_input("a", f32(64, 32))  # transA: A is [K, M] = [64, 32]
    b = g.add_input("b", f32(64, 10))
    c = g.add_input("c", f32(10))
    gemm = g.add_node("onnx.Gemm", [a, b, c], [f32(32, 10)], params={"transA": 1})
    assert flops_bytes(gemm)[0] == 2 * 32 * 10 * 64 + 32 * 10
    q = g.add_input("q", f32(2, 4, 8, 16))
    k = g.add_input("k", f32(2, 4, 16, 8))
    qk = g.add_node("onnx.MatMul", [q, k], [f32(2, 4, 8, 8)])
    assert flops_bytes(qk)[0] == 2 * (2 * 4 * 8 * 8) * 16
    e = g.add_node("onnx.Einsum", [q, k], [f32(2, 4, 8, 8)], params={"equation": "bhid,bhdj->bhij"})
    assert flops_bytes(e)[0] == 2 * 2 * 4 * 8 * 16 * 8


def test_tf_training_ops_flops():
    g = Graph()
    x = g.add_input("x", f32(8, 32, 32, 16))  # NHWC
    filt = g.add_input("filt", f32(3, 3, 16, 64))  # HWIO
    dy = g.add_input("dy", f32(8, 32, 32, 64))
    sizes = g.add_input("sizes", TensorType(DType.I32, (4,)))
    forward = g.add_node("tf.Conv2D", [x, filt], [f32(8, 32, 32, 64)])
    dx = g.add_node("tf.Conv2DBackpropInput", [sizes, filt, dy], [f32(8, 32, 32, 16)])
    dw = g.add_node("tf.Conv2DBackpropFilter", [x, sizes, dy], [f32(3, 3, 16, 64)])
    expected = 2 * (8 * 32 * 32 * 64) * (3 * 3 * 16)
    assert flops_bytes(forward)[0] == flops_bytes(dx)[0] == flops_bytes(dw)[0] == expected
    a = g.add_input("a", f32(4, 128, 64))
    b = g.add_input("b", f32(4, 128, 32))
    bmm = g.add_node("tf.BatchMatMulV2", [a, b], [f32(4, 64, 32)], params={"adj_x": True})
    assert flops_bytes(bmm)[0] == 2 * 4 * 64 * 32 * 128
    total = g.add_node("tf.Sum", [a, sizes], [f32(4)])  # a reduction in TF
    assert flops_bytes(total)[0] == 4 * 128 * 64
    summed = g.add_node("onnx.Sum", [a, a, a], [f32(4, 128, 64)])  # n-ary elementwise in ONNX
    assert flops_bytes(summed)[0] == 2 * 4 * 128 * 64
    table = g.add_input("table", TensorType(DType.RESOURCE, ()))
    ids = g.add_input("ids", TensorType(DType.I64, (32,)))
    rows = g.add_node("tf.ResourceGather", [table, ids], [f32(32, 256)])
    assert flops_bytes(rows)[1] == 2 * 32 * 256 * 4 + 32 * 8  # only the gathered rows move
    scalars = [g.add_input(f"s{i}", f32()) for i in range(6)]
    grad = g.add_input("grad", f32(1000))
    adam = g.add_node("tf.ResourceApplyAdam", [table, table, table, *scalars, grad], [])
    assert flops_bytes(adam) == (18 * 1000, 7 * 1000 * 4)
    bn = g.add_node("tf.FusedBatchNormGradV3", [dy, x], [f32(8, 32, 32, 64)])
    assert flops_bytes(bn)[0] == 12 * 8 * 32 * 32 * 64
    relu_grad = g.add_node("tf.ReluGrad", [dy, dy], [f32(8, 32, 32, 64)])
    assert flops_bytes(relu_grad) == (8 * 32 * 32 * 64, 3 * 8 * 32 * 32 * 64 * 4)
    reshape = g.add_node("tf.Reshape", [dy, sizes], [f32(8, 65536)])
    assert flops_bytes(reshape) == (0, 0)


def test_unknown_ops_fall_back_to_bytes_and_are_counted():
    g = Graph()
    x = g.add_input("x", f32(1000))
    y = g.add_node("custom.Frobnicate", [x], [f32(1000)])
    z = g.add_node("onnx.Conv", [y.outputs[0], x], [f32(*([None] * 4))])  # shape unknown
    g.set_outputs(z.outputs)
    module = Module("m", g, "4xV100")
    result = run_profile(module)
    assert result.stats["fallback-ops"] == 2
    assert result.stats["fallback-op-types"] == "custom.Frobnicate,onnx.Conv"
    assert y.cost.time("V100") == pytest.approx(8000 / 900e9 + 5e-6)  # never silently zero


def test_heterogeneous_preset_gives_different_times_per_kind():
    g = Graph()
    x = g.add_input("x", f32(32, 64, 56, 56))
    w = g.add_constant("w", f32(64, 64, 3, 3))
    conv = g.add_node("onnx.Conv", [x, w], [f32(32, 64, 56, 56)])
    g.set_outputs(conv.outputs)
    module = Module("m", g, "moirai-inter")
    run_profile(module)
    times = dict(conv.cost.times)
    assert set(times) == {"2080Ti", "T4", "P4", "3060Ti"}
    assert len(set(times.values())) == 4
    assert times["P4"] > times["T4"] > times["2080Ti"] > times["3060Ti"]  # compute bound: 5.5 < 8.1 < 13.4 < 16.2 TF
    flops = 2 * 32 * 64 * 56 * 56 * 64 * 9
    assert times["T4"] == pytest.approx(flops / 8.1e12 + 5e-6)
    per_device = cost_graph(module)["nodes"][0]["times"]
    assert per_device["gpu2"] == times["P4"] and per_device["gpu0"] == times["2080Ti"]


# ----------------------------------------------------------------------------- memory


def test_shared_weights_are_attributed_once_and_variables_are_persistent():
    g = Graph()
    x = g.add_input("x", f32(4, 16))
    w = g.add_constant("w", f32(16, 16))
    a = g.add_node("onnx.MatMul", [x, w], [f32(4, 16)], name="a")
    b = g.add_node("onnx.MatMul", [a.outputs[0], w], [f32(4, 16)], name="b")
    var = g.add_node(
        "tf.VarHandleOp", [], [TensorType(DType.RESOURCE, ())], name="v", params={"shape": (300, 10), "dtype": "f32"}
    )
    const = g.add_node("tf.Const", [], [f32(5)], name="k", params={"value": DenseTensor.from_numpy(np.ones(5, "f4"))})
    g.set_outputs([b.outputs[0], var.outputs[0], const.outputs[0]])
    module = Module("m", g, "2xV100")
    result = run_profile(module)
    assert a.mem == Mem(persistent=16 * 16 * 4, activation=4 * 16 * 4)
    assert b.mem == Mem(persistent=0, activation=4 * 16 * 4)
    assert var.mem == Mem(persistent=300 * 10 * 4)
    assert const.mem == Mem(persistent=20)
    assert result.stats["persistent-bytes"] == 1024 + 12000 + 20


def test_light_model_persistent_bytes_equal_its_parameters():
    module = load_module(LIGHT / "light_squeezenet.onnx")
    run_profile(module)
    index = module.graph.index()
    assert int(index.persistent_bytes().sum()) == sum(v.nbytes for v in module.graph.constants)


def test_fallback_share_over_the_onnx_light_models():
    nodes = fallback = 0
    for path in LIGHT_MODELS:
        work = analyze_graph(load_module(path).graph)
        nodes += len(work.fallback)
        fallback += int(work.fallback.sum())
    assert len(LIGHT_MODELS) == 9
    print(f"light models: {fallback}/{nodes} ops use the fallback")
    assert fallback / nodes < 0.02


# ----------------------------------------------------------------------------- text, JSON, pipeline


def test_cost_and_mem_survive_gir_and_json():
    module = load_module(LIGHT / "light_squeezenet.onnx")
    module.set_cluster(resolve_cluster("pesto"))
    run_profile(module)
    text = print_module(module)
    again = parse_module(text)
    assert print_module(again) == text
    for before, after in zip(module.graph.index().nodes, again.graph.index().nodes, strict=True):
        assert before.cost == after.cost and before.mem == after.mem
        assert set(dict(after.cost.times)) == {"V100", "cpu"}
    data = cost_graph(again)
    first = data["nodes"][0]
    assert first["times"]["gpu0"] != first["times"]["cpu0"] and first["mem"] is not None


def test_profile_is_the_first_provider_of_cost_and_mem():
    load_builtin_passes()
    assert providers_of("cost")[0] is Profile and providers_of("mem")[0] is Profile


def test_summary_reports_compute_bytes_and_fallback(capsys):
    from graphir.driver import run

    assert run([str(LIGHT / "light_squeezenet.onnx"), "--passes=profile", "--cluster=celeritas", "--emit=summary"]) == 0
    out = capsys.readouterr().out
    for line in ("total compute:", "parameter bytes:", "activation bytes:", "fallback-costed:  0 ops"):
        assert line in out


def _repeated_chain(repeats: int) -> Module:
    """``repeats`` copies of MatMul -> Relu -> Add -> Reshape on f32[64,256], chained."""
    g = Graph()
    value = g.add_input("x", f32(64, 256))
    w = g.add_constant("w", f32(256, 256))
    ops = ("onnx.MatMul", "onnx.Relu", "onnx.Add", "onnx.Reshape")
    for i in range(4 * repeats):
        op = ops[i % 4]
        inputs = [value, w] if op == "onnx.MatMul" else [value, value] if op == "onnx.Add" else [value]
        value = g.add_node(op, inputs, [f32(64, 256)]).outputs[0]
    g.set_outputs([value])
    return Module("big", g, "moirai-intra")


def test_large_graph_profiles_without_fallback():
    """100,000 nodes are costed like 4: every copy of the pattern gets the one pattern's costs.

    The profile is vectorised over the whole graph; a size-dependent slip (a wrong row, a dropped
    chunk) would show as a copy that differs from the 4-node graph's costs, on either device kind.
    """
    small = _repeated_chain(1)
    assert run_profile(small).stats["fallback-ops"] == 0
    module = _repeated_chain(25_000)
    result = run_profile(module)
    assert result.stats["fallback-ops"] == 0 and result.stats["nodes"] == 100_000
    for kind in ("V100-32GB", "P100"):
        pattern = small.graph.index().times(kind)
        times = module.graph.index().times(kind).reshape(25_000, 4)
        assert (pattern > 0).all() and (times == pattern).all(), kind


# ----------------------------------------------------------------------------- onnxruntime


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values))
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    return (np.bincount(inverse, weights=ranks) / counts)[inverse]  # ties get their average rank


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(_ranks(a), _ranks(b))[0, 1])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "inception_v1"])
def test_onnxruntime_times_add_up_and_rank_like_the_roofline(monkeypatch, name):
    monkeypatch.setenv(CPU_MEASURE_ENV, "1")  # the analytical side uses this CPU's measured speed
    module = load_module(LIGHT / f"light_{name}.onnx")
    measured = measure_onnxruntime(module, iterations=10, warmup=2)
    nodes = module.graph.index().nodes
    times = np.array([measured.node_times.get(node, np.nan) for node in nodes])
    assert np.isnan(times).sum() == 0  # with optimisations off every node is one kernel
    node_sum = float(times.sum())
    analytical = analyze_graph(module.graph).times(resolve_cluster("1xcpu").devices[0])
    rho = spearman(analytical, times)
    print(
        f"{name}: node sum {node_sum * 1e3:.2f} ms, median run {measured.run_time * 1e3:.2f} ms, "
        f"fastest run {measured.fastest_run * 1e3:.2f} ms, spearman {rho:.3f}"
    )
    # Other processes may share this machine: per-node medians filter their disturbances node by
    # node, so the whole run they add up to is the least disturbed (fastest) one.
    assert abs(node_sum - measured.fastest_run) <= 0.25 * measured.fastest_run
    assert rho >= 0.6


@pytest.mark.slow
def test_onnxruntime_mode_annotates_every_kind_and_works_from_gir_text():
    module = parse_module(print_module(load_module(LIGHT / "light_squeezenet.onnx")))  # constants: 'external'
    module.set_cluster(resolve_cluster("pesto"))
    result = run_profile(module, mode="onnxruntime", iterations=2, warmup=1)
    assert result.stats["unmeasured-ops"] == 0 and result.stats["measured-run-s"] > 0
    node = next(n for n in module.graph.nodes if n.op == "onnx.Conv")
    times = dict(node.cost.times)
    assert set(times) == {"V100", "cpu"} and times["V100"] == times["cpu"] > 0
    assert node.mem.activation > 0


def test_onnxruntime_mode_rejects_non_onnx_ops():
    g = Graph()
    x = g.add_input("x", f32(4))
    y = g.add_node("tf.Relu", [x], [f32(4)], name="r")
    g.set_outputs(y.outputs)
    with pytest.raises(PassError, match="runs ONNX ops only, but node 'r' is 'tf.Relu'"):
        run_profile(Module("m", g), mode="onnxruntime")


def test_bad_options():
    with pytest.raises(PassError, match="'iterations' must be >= 1"):
        run_profile(Module("m", Graph()), mode="onnxruntime", iterations=0)


def test_print_is_deterministic():
    texts = []
    for _ in range(2):
        module = load_module(LIGHT / "light_inception_v1.onnx")
        module.set_cluster(resolve_cluster("moirai-intra"))
        run_profile(module)
        out = io.StringIO()
        print_module(module, out)
        texts.append(out.getvalue())
    assert texts[0] == texts[1]
