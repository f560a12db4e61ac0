"""FastT operation splitting (passes/transform/split_rewrite.py, split.py): numerics, shapes, costs, refusals."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from helpers import f32
from hypothesis import given
from hypothesis import strategies as st

from graphir.attributes import DenseTensor
from graphir.clone import clone_module
from graphir.errors import PassError
from graphir.ir import ExternalTensor, Graph, Module, Node
from graphir.pass_infra import PassContext
from graphir.passes.profile import Profile
from graphir.passes.transform.split import Split
from graphir.passes.transform.split_rewrite import (
    SplitError,
    annotate_split,
    export_onnx_with_splits,
    split_node,
    split_reason,
)
from graphir.printer import print_module
from graphir.verifier import verify


def _run(module: Module, seed: int = 7) -> list[np.ndarray]:
    """Outputs of ``module`` under onnxruntime, inputs seeded by ``seed``."""
    model, feeds = export_onnx_with_splits(module, np.random.default_rng(seed))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


class Builder:
    """A one-op (plus a consumer) ONNX module with random constant weights."""

    def __init__(self, opset: int = 17, seed: int = 0):
        self.graph = Graph("g")
        self.rng = np.random.default_rng(seed)
        self.module = Module("m", self.graph, "2xV100", {"opset": f"ai.onnx:{opset}"})

    def input(self, name: str, *dims: int):
        return self.graph.add_input(name, f32(*dims))

    def const(self, name: str, *dims: int, external: bool = False):
        array = self.rng.standard_normal(dims).astype(np.float32)
        if external:
            return self.graph.add_constant(name, f32(*dims), ExternalTensor(f32(*dims), lambda: array))
        return self.graph.add_constant(name, f32(*dims), DenseTensor.from_numpy(array))

    def op(self, op: str, inputs, out_dims, name: str, **params) -> Node:
        return self.graph.add_node(op, inputs, [f32(*out_dims)], name=name, output_names=[name], params=params)

    def finish(self, node: Node) -> Module:
        relu = self.op("onnx.Relu", [node.outputs[0]], node.outputs[0].type.shape, "out")
        self.graph.set_outputs([relu.outputs[0], node.outputs[0]])
        return self.module


def _check_split(module: Module, name: str, dim, parts: int) -> None:
    """Splitting ``name`` keeps the outputs (1e-5), the verifier happy and the op's name on the concat."""
    expected = _run(module)
    result = split_node(module.graph.node(name), dim, parts)
    verify(module)
    assert result.concat.name == name and result.concat.outputs[0].name == name
    assert len(result.parts) == parts
    got = _run(module)
    for a, b in zip(expected, got, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def conv_module(group: int = 1, bias: bool = True, external: bool = False, opset: int = 17) -> Module:
    b = Builder(opset)
    x = b.input("x", 4, 4, 7, 7)
    w = b.const("w", 6, 4 // group, 3, 3, external=external)
    inputs = [x, w] + ([b.const("b", 6, external=external)] if bias else [])
    conv = b.op("onnx.Conv", inputs, (4, 6, 5, 5), "conv", kernel_shape=(3, 3), group=group, strides=(1, 1))
    return b.finish(conv)


@pytest.mark.parametrize("dim", ["batch", "channel"])
@pytest.mark.parametrize("parts", [2, 3, 4])
def test_conv_split_is_exact(dim: str, parts: int) -> None:
    _check_split(conv_module(), "conv", dim, parts)


def test_conv_split_external_weights_slice_lazily() -> None:
    module = conv_module(external=True)
    expected = _run(module)
    calls = []
    w = module.graph.value("w")
    load = w.const.loader
    w.const = ExternalTensor(w.type, lambda: calls.append(1) or load())
    result = split_node(module.graph.node("conv"), "channel", 2)
    assert calls == []  # nothing loaded by the rewrite itself
    assert [c.name for c in result.constants] == ["w.part0", "w.part1", "b.part0", "b.part1"]
    assert isinstance(result.constants[0].const, ExternalTensor)
    np.testing.assert_array_equal(result.constants[1].const.numpy(), load()[3:6])
    assert module.graph.get_value("w") is None  # the unused original is removed
    for a, b in zip(expected, _run(module), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def test_grouped_conv_channel_split_divides_groups() -> None:
    module = conv_module(group=2)
    _check_split(module, "conv", "channel", 2)
    parts = [n for n in module.graph.nodes if n.name.startswith("conv.part")]
    assert all(p.params["group"] == 1 for p in parts)
    with pytest.raises(SplitError, match="group=2, not a multiple of parts=3"):
        split_node(conv_module(group=2).graph.node("conv"), "channel", 3)
    _check_split(conv_module(group=2), "conv", "batch", 3)  # batch splits keep the groups


def test_weight_computed_by_a_node_is_split_by_a_split_node() -> None:
    b = Builder()
    x = b.input("x", 2, 3, 5, 5)
    w = b.input("w", 4, 3, 1, 1)
    conv = b.finish(b.op("onnx.Conv", [x, w], (2, 4, 5, 5), "conv", kernel_shape=(1, 1)))
    _check_split(conv, "conv", "channel", 2)
    assert [n.op for n in conv.graph.index().nodes].count("graphir.split") == 1


@pytest.mark.parametrize(
    ("a_dims", "b_dims", "out", "dim"),
    [
        ((6, 5), (5, 7), (6, 7), "batch"),
        ((6, 5), (5, 7), (6, 7), "channel"),
        ((3, 4, 5), (5, 7), (3, 4, 7), "batch"),
        ((3, 4, 5), (3, 5, 7), (3, 4, 7), "batch"),
        ((3, 4, 5), (3, 5, 7), (3, 4, 7), "channel"),
    ],
)
def test_matmul_split_is_exact(a_dims, b_dims, out, dim) -> None:
    b = Builder()
    node = b.op("onnx.MatMul", [b.input("a", *a_dims), b.const("w", *b_dims)], out, "mm")
    _check_split(b.finish(node), "mm", dim, 3)


@pytest.mark.parametrize("trans", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("bias", [(), (7,), (1, 7), (6, 7), (6, 1)])
@pytest.mark.parametrize("dim", ["batch", "channel"])
def test_gemm_split_is_exact(trans, bias, dim) -> None:
    b = Builder()
    a = b.input("a", *((5, 6) if trans[0] else (6, 5)))
    w = b.const("w", *((7, 5) if trans[1] else (5, 7)))
    inputs = [a, w] + ([b.const("c", *bias)] if bias else [])
    node = b.op("onnx.Gemm", inputs, (6, 7), "gemm", transA=trans[0], transB=trans[1], alpha=0.5, beta=2.0)
    _check_split(b.finish(node), "gemm", dim, 2)


@pytest.mark.parametrize(
    ("op", "params", "dim"),
    [
        ("onnx.MaxPool", {"kernel_shape": (2, 2), "strides": (2, 2)}, "batch"),
        ("onnx.AveragePool", {"kernel_shape": (3, 3), "pads": (1, 1, 1, 1)}, "batch"),
        ("onnx.MaxPool", {"kernel_shape": (2, 2), "strides": (2, 2)}, "channel"),
    ],
)
def test_pool_split_is_exact(op, params, dim) -> None:
    b = Builder()
    stride = params.get("strides", (1, 1))[0]
    out = (4, 3, 6 // stride, 6 // stride)
    node = b.op(op, [b.input("x", 4, 3, 6, 6)], out, "pool", **params)
    _check_split(b.finish(node), "pool", dim, 2)


def test_batchnorm_splits_on_batch_only() -> None:
    b = Builder()
    stats = [b.const(n, 3) for n in ("s", "bias", "mean")]
    var = b.graph.add_constant("var", f32(3), DenseTensor.from_numpy(np.full(3, 2.0, np.float32)))
    node = b.op("onnx.BatchNormalization", [b.input("x", 4, 3, 5, 5), *stats, var], (4, 3, 5, 5), "bn")
    module = b.finish(node)
    assert "batch only" in (split_reason(node, "channel", 2) or "")
    _check_split(module, "bn", "batch", 4)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, "batch", "channel"])
def test_elementwise_any_axis_with_broadcast(axis) -> None:
    b = Builder()
    x = b.input("x", 4, 3, 5, 6)
    y = b.const("y", 3, 1, 6)  # broadcasts over dims 0 and 2
    node = b.op("onnx.Add", [x, y], (4, 3, 5, 6), "add")
    _check_split(b.finish(node), "add", axis, 2)


def test_opset_below_13_uses_the_split_attribute() -> None:
    _check_split(conv_module(opset=11), "conv", "batch", 3)


def test_tf_ops_split_and_verify() -> None:
    graph = Graph("g")
    x = graph.add_input("x", f32(8, 5, 5, 3))
    w = graph.add_constant("w", f32(3, 3, 3, 6))
    graph.add_node("tf.Conv2D", [x, w], [f32(8, 5, 5, 6)], name="conv", params={"data_format": "NHWC"})
    a = graph.add_input("a", f32(5, 4))
    mm_w = graph.add_constant("mw", f32(9, 5))
    graph.add_node("tf.MatMul", [a, mm_w], [f32(4, 9)], name="mm", params={"transpose_a": True, "transpose_b": True})
    graph.set_outputs([graph.value("conv"), graph.value("mm")])
    module = Module("m", graph, "2xV100")
    r = split_node(graph.node("conv"), "channel", 2)
    assert [p.inputs[1].type for p in r.parts] == [f32(3, 3, 3, 3)] * 2 and r.concat.params["axis"] == 3
    r = split_node(graph.node("conv.part0"), "batch", 4)
    assert [p.outputs[0].type for p in r.parts] == [f32(2, 5, 5, 3)] * 4 and r.splits[0].params["axis"] == 0
    r = split_node(graph.node("mm"), "batch", 2)  # rows of op(a) = columns of a (transpose_a)
    assert r.splits[0].params["axis"] == 1 and r.concat.params["axis"] == 0
    r = split_node(graph.node("mm.part1"), "channel", 2)  # N = rows of b (transpose_b)
    assert [c.type for c in r.constants] == [f32(5, 5), f32(4, 5)]
    verify(module)


def test_refusals_say_why() -> None:
    module = conv_module()
    graph = module.graph
    sm = graph.add_node("onnx.Softmax", [graph.value("out")], [f32(4, 6, 5, 5)], name="sm")
    assert "no splitting rule" in (split_reason(sm, "batch", 2) or "")
    assert "too small for 5 parts" in (split_reason(graph.node("conv"), "batch", 5) or "")
    graph.node("conv").group = 3
    with pytest.raises(SplitError, match=r"cannot split 'conv' \(onnx.Conv\) on batch into 2 parts: it is in fusion"):
        split_node(graph.node("conv"), "batch", 2)
    assert split_reason(graph.node("out"), "batch", 1) == "needs parts >= 2, got 1"


def test_costs_of_parts_sum_to_the_original() -> None:
    b = Builder()
    x = b.input("x", 32, 64, 28, 28)
    conv = b.op(
        "onnx.Conv", [x, b.const("w", 128, 64, 3, 3)], (32, 128, 28, 28), "conv", kernel_shape=(3, 3), pads=(1,) * 4
    )
    module = b.finish(conv)
    Profile().run(module, PassContext())
    original = conv.cost.time("V100")
    mem = conv.mem
    for dim in ("batch", "channel"):
        copy = clone_module(module)
        result = split_node(copy.graph.node("conv"), dim, 4)
        annotate_split(copy, result)
        total = sum(p.cost.time("V100") for p in result.parts)
        overhead = module.cluster.kind_device("V100").launch_overhead
        assert total == pytest.approx(original + 3 * overhead, rel=1e-6)  # compute-bound: FLOPs add up
        assert sum(p.mem.activation for p in result.parts) == mem.activation
        assert result.concat.cost.time("V100") > 0 and result.concat.mem.activation == mem.activation
        if dim == "channel":
            assert sum(p.mem.persistent for p in result.parts) == mem.persistent
        else:  # a shared weight: a replica per part
            assert all(p.mem.persistent == mem.persistent for p in result.parts)
        verify(copy)


def test_measured_costs_are_scaled_by_the_parts_share() -> None:
    module = conv_module()
    reference = clone_module(module)
    Profile().run(reference, PassContext())
    whole = reference.graph.node("conv").cost.time("V100")
    analytical = split_node(reference.graph.node("conv"), "channel", 2)
    annotate_split(reference, analytical)
    conv = module.graph.node("conv")
    conv.cost = 1e-3  # a measured time, unrelated to the roofline
    result = split_node(conv, "channel", 2)
    annotate_split(module, result)
    share = [p.cost.time("V100") / whole for p in analytical.parts]
    assert [p.cost.time("V100") for p in result.parts] == pytest.approx([1e-3 * s for s in share], rel=1e-9)
    assert result.concat.cost.time("V100") == analytical.concat.cost.time("V100")


def test_undo_restores_the_original() -> None:
    module = conv_module()
    module.graph.node("conv").cost = 2e-6
    before = sorted(print_module(module).splitlines())
    result = split_node(module.graph.node("conv"), "channel", 3)
    annotate_split(module, result)
    restored = result.undo()
    verify(module)
    assert restored.cost.default == 2e-6
    assert sorted(print_module(module).splitlines()) == before


def test_clone_prints_identically_and_is_independent() -> None:
    module = conv_module()
    copy = clone_module(module)
    assert print_module(copy) == print_module(module)
    split_node(copy.graph.node("conv"), "batch", 2)
    assert module.graph.node("conv").op == "onnx.Conv"


def test_split_pass_drops_a_stale_placement_and_reports() -> None:
    module = conv_module()
    for k, node in enumerate(module.graph.index().nodes):
        node.device, node.order = "gpu0", k
    stats = Split(op="conv", parts=2, axis="channel").run(module, PassContext()).stats
    assert stats["placement-dropped"] == 1 and stats["sliced-constants"] == 4 and stats["new-nodes"] == 3
    assert all(n.device is None for n in module.graph.nodes)
    verify(module)
    with pytest.raises(ValueError, match="axis must be batch, channel or an integer"):
        Split(op="conv", axis="rows")
    with pytest.raises(PassError, match="no node named 'nope'"):
        Split(op="nope").run(module, PassContext())


@st.composite
def small_cases(draw):
    """A random conv or matmul op, and a dimension and part count to split it with."""
    if draw(st.booleans()):
        n, cin, k = draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 3))
        group = draw(st.sampled_from([g for g in (1, 2, 4) if cin % g == 0]))
        cout = group * draw(st.integers(1, 3))
        size = draw(st.integers(k, 6))
        b = Builder(seed=draw(st.integers(0, 99)))
        inputs = [b.input("x", n, cin, size, size), b.const("w", cout, cin // group, k, k)]
        if draw(st.booleans()):
            inputs.append(b.const("b", cout))
        out = (n, cout, size - k + 1, size - k + 1)
        node = b.op("onnx.Conv", inputs, out, "op", kernel_shape=(k, k), group=group)
    else:
        m, kk, nn = draw(st.integers(1, 6)), draw(st.integers(1, 5)), draw(st.integers(1, 6))
        b = Builder(seed=draw(st.integers(0, 99)))
        node = b.op("onnx.MatMul", [b.input("a", m, kk), b.const("w", kk, nn)], (m, nn), "op")
    return b.finish(node), draw(st.sampled_from(["batch", "channel"])), draw(st.integers(2, 5))


@given(small_cases())
def test_random_splits_are_exact_or_refused(case) -> None:
    module, dim, parts = case
    reason = split_reason(module.graph.node("op"), dim, parts)
    if reason is None:
        _check_split(module, "op", dim, parts)
    else:
        assert reason and "\n" not in reason
        with pytest.raises(SplitError):
            split_node(module.graph.node("op"), dim, parts)
