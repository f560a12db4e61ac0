"""ONNX NonMaxSuppression: the TensorFlow lowering against onnxruntime, the type rule and the cost."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphir.importers.onnx import import_onnx
from graphir.ops import estimate_node, type_rule_of
from graphir.types import DType, TensorType

ort = pytest.importorskip("onnxruntime")

BATCHES, CLASSES, BOXES = 2, 3, 40


def _model(path: Path, center: int, inputs: tuple[str, ...]) -> dict[str, np.ndarray]:
    """A one-node NMS model over random overlapping boxes (seeded); its feeds."""
    rng = np.random.default_rng(3)
    corners = rng.uniform(0, 10, [BATCHES, BOXES, 2])
    sizes = rng.uniform(0.5, 4, [BATCHES, BOXES, 2])
    if center:
        boxes = np.concatenate([corners, sizes], axis=-1)
    else:  # some boxes given by their other diagonal pair of corners
        boxes = np.concatenate([corners, corners + sizes], axis=-1)
        flip = rng.random([BATCHES, BOXES]) < 0.3
        boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]
    arrays = {
        "boxes": boxes.astype(np.float32),
        "scores": rng.random([BATCHES, CLASSES, BOXES]).astype(np.float32),
        "max_output": np.array([7], np.int64),
        "iou": np.array([0.3], np.float32),
        "score_min": np.array([0.25], np.float32),
    }
    names = [n if n in inputs else "" for n in arrays]
    while not names[-1]:
        names.pop()
    node = helper.make_node("NonMaxSuppression", names, ["selected"], center_point_box=center)
    elem = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64}
    infos = [helper.make_tensor_value_info(n, elem[arrays[n].dtype.type], arrays[n].shape) for n in names if n]
    out = helper.make_tensor_value_info("selected", TensorProto.INT64, None)
    model = helper.make_model(
        helper.make_graph([node], "nms", infos, [out]), opset_imports=[helper.make_opsetid("", 13)]
    )
    onnx.save_model(model, str(path))
    return {n: arrays[n] for n in names if n}


@pytest.mark.parametrize(
    ("center", "inputs"),
    [
        (0, ("boxes", "scores", "max_output", "iou", "score_min")),
        (1, ("boxes", "scores", "max_output", "iou", "score_min")),
        (0, ("boxes", "scores", "max_output", "iou")),
        (1, ("boxes", "scores", "max_output")),
        (0, ("boxes", "scores")),  # no limit given: 0 boxes per class
    ],
)
def test_lowering_matches_onnxruntime(tmp_path, center, inputs):
    from graphir.backends.tf import lower

    path = tmp_path / "nms.onnx"
    feeds = _model(path, center, inputs)
    (expected,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    module = import_onnx(path)
    (actual,) = lower(module)(*(feeds[v.name] for v in module.graph.inputs))
    assert actual.dtype == np.int64 and actual.shape[1:] == (3,)
    np.testing.assert_array_equal(actual, expected)
    if "max_output" in inputs:
        assert len(expected) > BATCHES * CLASSES  # several boxes per class survive: not a trivial case


def test_type_rule_and_cost(tmp_path):
    path = tmp_path / "nms.onnx"
    _model(path, 0, ("boxes", "scores", "max_output", "iou", "score_min"))
    (node,) = import_onnx(path).graph.nodes
    rule = type_rule_of("onnx.NonMaxSuppression")
    ins, outs = [v.type for v in node.inputs], [v.type for v in node.outputs]
    assert rule(node, ins, outs) is None
    assert "disagree" in rule(node, [ins[0], TensorType(DType.F32, (BATCHES, CLASSES, BOXES + 1))] + ins[2:], outs)
    assert "expected a scalar" in rule(node, ins[:2] + [TensorType(DType.I64, (2,))] + ins[3:], outs)
    flops, nbytes, _, fallback, _ = estimate_node(node)
    assert not fallback
    assert flops == pytest.approx(BATCHES * CLASSES * (12 * BOXES**2 / 2 + BOXES * np.log2(BOXES)))
    assert nbytes >= (BATCHES * BOXES * 4 + BATCHES * CLASSES * BOXES) * 4
