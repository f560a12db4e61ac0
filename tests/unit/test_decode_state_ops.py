"""CausalConvWithState, TensorScatter and LinearAttention lowered to TensorFlow, against onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from graphir.importers.onnx import import_onnx

F = TensorProto.FLOAT


def _model(path, node, inputs, outputs, opset) -> None:
    graph = helper.make_graph([node], "m", inputs, outputs)
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))


def _causal_conv(path, rng):
    node = helper.make_node("CausalConvWithState", ["x", "w", "b", "past"], ["y", "present"], activation="silu")
    inputs = [
        helper.make_tensor_value_info("x", F, [2, 3, 5]),
        helper.make_tensor_value_info("w", F, [3, 1, 4]),
        helper.make_tensor_value_info("b", F, [3]),
        helper.make_tensor_value_info("past", F, [2, 3, 3]),
    ]
    outputs = [helper.make_tensor_value_info("y", F, [2, 3, 5]), helper.make_tensor_value_info("present", F, [2, 3, 3])]
    _model(path, node, inputs, outputs, 27)
    shapes = {"x": [2, 3, 5], "w": [3, 1, 4], "b": [3], "past": [2, 3, 3]}
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


def _tensor_scatter(path, rng):
    node = helper.make_node("TensorScatter", ["cache", "update", "at"], ["out"], mode="circular")
    inputs = [
        helper.make_tensor_value_info("cache", F, [2, 3, 6, 4]),
        helper.make_tensor_value_info("update", F, [2, 3, 3, 4]),
        helper.make_tensor_value_info("at", TensorProto.INT64, [2]),
    ]
    _model(path, node, inputs, [helper.make_tensor_value_info("out", F, [2, 3, 6, 4])], 24)
    return {
        "cache": rng.standard_normal([2, 3, 6, 4]).astype(np.float32),
        "update": rng.standard_normal([2, 3, 3, 4]).astype(np.float32),
        "at": np.array([1, 5], np.int64),  # row 1 wraps around
    }


def _linear_attention(path, rng):
    """Gated delta rule, grouped queries (4 query heads over 2 key/value heads), a past state."""
    node = helper.make_node(
        "LinearAttention",
        ["q", "k", "v", "past", "decay", "beta"],
        ["y", "present"],
        q_num_heads=4,
        kv_num_heads=2,
        update_rule="gated_delta",
    )
    shapes = {
        "q": [2, 5, 12],
        "k": [2, 5, 6],
        "v": [2, 5, 8],
        "past": [2, 2, 3, 4],
        "decay": [2, 5, 2],
        "beta": [2, 5, 2],
    }
    inputs = [helper.make_tensor_value_info(k, F, s) for k, s in shapes.items()]
    outputs = [
        helper.make_tensor_value_info("y", F, [2, 5, 16]),
        helper.make_tensor_value_info("present", F, [2, 2, 3, 4]),
    ]
    _model(path, node, inputs, outputs, 27)
    feeds = {k: (0.5 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}
    feeds["decay"] = -np.abs(feeds["decay"])  # log-decays
    feeds["beta"] = 1 / (1 + np.exp(-feeds["beta"]))
    return feeds


@pytest.mark.parametrize("build", [_causal_conv, _tensor_scatter, _linear_attention])
def test_lowering_matches_the_reference(tmp_path, build):
    from graphir.backends.tf import lower

    path = tmp_path / "m.onnx"
    feeds = build(path, np.random.default_rng(0))
    expected = ReferenceEvaluator(str(path)).run(None, feeds)
    module = import_onnx(path)
    actual = lower(module)(*(feeds[v.name] for v in module.graph.inputs))
    for got, want in zip(actual, expected, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
