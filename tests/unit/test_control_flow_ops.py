"""ONNX If, Loop and Scan imported as regions, lowered to tf.cond / tf.while_loop, checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphir.importers.onnx import import_onnx
from graphir.parser import parse_module
from graphir.printer import print_module
from graphir.regions import node_regions
from graphir.verifier import verify

ort = pytest.importorskip("onnxruntime")

F = TensorProto.FLOAT


def _loop_model(path) -> dict[str, np.ndarray]:
    """y = Loop(M=4, cond, v0): v <- tanh(v @ W) + i (W captured, an If nested in the body), scan of v."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal([3, 3]).astype(np.float32) * 0.5, "W")
    then_graph = helper.make_graph(
        [helper.make_node("Tanh", ["prod"], ["t_out"])], "then", [], [helper.make_tensor_value_info("t_out", F, [2, 3])]
    )
    else_graph = helper.make_graph(
        [helper.make_node("Relu", ["prod"], ["e_out"])], "else", [], [helper.make_tensor_value_info("e_out", F, [2, 3])]
    )
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["v_in", "W"], ["prod"]),
            helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(np.array(2, np.int64))),
            helper.make_node("Less", ["i", "two"], ["early"]),
            helper.make_node("If", ["early"], ["act"], then_branch=then_graph, else_branch=else_graph),
            helper.make_node("Cast", ["i"], ["i_f"], to=F),
            helper.make_node("Add", ["act", "i_f"], ["v_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", F, [2, 3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", F, [2, 3]),
            helper.make_tensor_value_info("v_out", F, [2, 3]),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "cond", "v0"], ["v_final", "v_all"], body=body)],
        "loop",
        [helper.make_tensor_value_info("v0", F, [2, 3])],
        [helper.make_tensor_value_info("v_final", F, [2, 3]), helper.make_tensor_value_info("v_all", F, None)],
        initializer=[
            weight,
            numpy_helper.from_array(np.array(4, np.int64), "M"),
            numpy_helper.from_array(np.array(True), "cond"),
        ],
    )
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)]), str(path))
    return {"v0": rng.standard_normal([2, 3]).astype(np.float32)}


def _running_sum_body() -> onnx.GraphProto:
    """The Scan body both Scan models share: ``s_out = s_in + x_t``, ``y_t = x_t * s_out`` on f32[4]."""
    return helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
            helper.make_node("Mul", ["x_t", "s_out"], ["y_t"]),
        ],
        "body",
        [helper.make_tensor_value_info("s_in", F, [4]), helper.make_tensor_value_info("x_t", F, [4])],
        [helper.make_tensor_value_info("s_out", F, [4]), helper.make_tensor_value_info("y_t", F, [4])],
    )


def _scan_model(path) -> dict[str, np.ndarray]:
    """Scan over axis 1 in reverse: running sum state, scaled slices out along axis 1."""
    body = _running_sum_body()
    node = helper.make_node(
        "Scan",
        ["s0", "x"],
        ["s_final", "ys"],
        body=body,
        num_scan_inputs=1,
        scan_input_axes=[1],
        scan_input_directions=[1],
        scan_output_axes=[1],
    )
    graph = helper.make_graph(
        [node],
        "scan",
        [helper.make_tensor_value_info("s0", F, [4]), helper.make_tensor_value_info("x", F, [4, 5])],
        [helper.make_tensor_value_info("s_final", F, [4]), helper.make_tensor_value_info("ys", F, [4, 5])],
    )
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)]), str(path))
    rng = np.random.default_rng(1)
    return {"s0": rng.standard_normal([4]).astype(np.float32), "x": rng.standard_normal([4, 5]).astype(np.float32)}


def _scan8_model(path) -> dict[str, np.ndarray]:
    """Scan-8 (opset 8): batch of 2 rows of lengths 3 and 5, the scan input read in reverse within each length."""
    body = _running_sum_body()
    node = helper.make_node(
        "Scan", ["lens", "s0", "x"], ["s_final", "ys"], body=body, num_scan_inputs=1, directions=[1]
    )
    graph = helper.make_graph(
        [node],
        "scan8",
        [
            helper.make_tensor_value_info("lens", TensorProto.INT64, [2]),
            helper.make_tensor_value_info("s0", F, [2, 4]),
            helper.make_tensor_value_info("x", F, [2, 5, 4]),
        ],
        [helper.make_tensor_value_info("s_final", F, [2, 4]), helper.make_tensor_value_info("ys", F, [2, 5, 4])],
    )
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)]), str(path))
    rng = np.random.default_rng(2)
    return {
        "lens": np.array([3, 5], np.int64),
        "s0": rng.standard_normal([2, 4]).astype(np.float32),
        "x": rng.standard_normal([2, 5, 4]).astype(np.float32),
    }


@pytest.mark.parametrize("build", [_loop_model, _scan_model, _scan8_model])
def test_lowering_matches_onnxruntime(tmp_path, build):
    from graphir.backends.tf import lower

    path = tmp_path / "m.onnx"
    feeds = build(path)
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    module = import_onnx(path)
    verify(module)
    text = print_module(module)
    assert print_module(parse_module(text)) == text  # the imported regions round-trip
    actual = lower(module)(*(feeds[v.name] for v in module.graph.inputs))
    for got, want in zip(actual, expected, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_loop_imports_its_body_as_a_region_with_captures(tmp_path):
    path = tmp_path / "m.onnx"
    _loop_model(path)
    module = import_onnx(path)
    (loop,) = [n for n in module.graph.nodes if n.op == "onnx.Loop"]
    ((name, region),) = node_regions(loop)
    assert name == "body" and "_captured_inputs" not in loop.params  # W is small: copied in, not captured
    assert [v.name for v in loop.inputs] == ["M", "cond", "v0"]
    assert [v.name for v in region.graph.inputs] == ["i", "cond_in", "v_in"]
    assert [v.name for v in region.graph.constants] == ["W"]
    (inner_if,) = [n for n in region.graph.nodes if n.op == "onnx.If"]
    assert [v.name for v in inner_if.inputs] == ["early", "prod"]  # the branches capture prod
    assert inner_if.params["_captured_inputs"] == 1
    assert sorted(name for name, _ in node_regions(inner_if)) == ["else_branch", "then_branch"]
