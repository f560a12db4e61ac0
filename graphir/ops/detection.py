"""Detection post-processing of the default ONNX domain: ``NonMaxSuppression`` (opsets 10-22).

* **Semantics** (ONNX spec, as onnxruntime implements it): for every batch ``b`` and class ``c``,
  greedily select boxes of ``boxes[b]`` by descending ``scores[b, c]``, dropping a box whose IoU with
  an already selected one is *greater* than ``iou_threshold`` and (when given) every box whose score
  is not *greater* than ``score_threshold``; at most ``max_output_boxes_per_class`` boxes per class
  (0 or absent: none). ``center_point_box = 0``: boxes are ``[y1, x1, y2, x2]``, any diagonal pair
  of corners; ``1``: ``[x_center, y_center, width, height]``. The result ``selected_indices`` is
  ``[num_selected, 3]`` int64 rows ``(batch, class, box)``, batch-major, then class, then selection
  order.
* **type rule**: ``boxes[B, N, 4]``, ``scores[B, C, N]`` agree on ``B`` and ``N``; the scalars are
  scalars (or 1-element vectors, which exporters write); the result is ``i64[n, 3]``.
* **cost**: the worst case of greedy NMS, every pair of boxes compared once per class:
  ``B · C · N² / 2`` IoU tests of ~12 FLOPs each, plus a sort (``N log N`` comparisons); bytes in +
  out. The real count depends on the data (how early boxes are suppressed), so this is an upper bound.
* **lowering**: TensorFlow's own ``tf.image.non_max_suppression`` (``NonMaxSuppressionV3``: the same
  ``>`` tests for IoU and score and the same corner-order independence) per ``(batch, class)``
  pair, in a ``tf.while_loop`` over the ``B · C`` pairs (so batch and class counts known only at
  run time work too), the rows gathered in a ``TensorArray`` and concatenated. Centre boxes are
  converted to corners first.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from graphir.ops.lower_context import OpContext, _arg
from graphir.ops.registry import Estimate, cost, lowering, type_rule
from graphir.types import DType

if TYPE_CHECKING:
    from graphir.ir import Node
    from graphir.types import TensorType

_IOU_FLOPS = 12
"""Two intersections (4 min/max), two areas, a union and a division, a comparison."""


def _differ(a: object, b: object) -> bool:
    return isinstance(a, int) and isinstance(b, int) and a != b


@type_rule("onnx.NonMaxSuppression")
def _nms_type(node: Node, in_types: list[TensorType], out_types: list[TensorType]) -> str | None:
    """``boxes[B, N, 4]`` and ``scores[B, C, N]`` agree; scalar thresholds; ``i64[n, 3]`` result."""
    box_format = node.params.get("center_point_box", 0)
    if box_format not in (0, 1):
        return f"has center_point_box {box_format!r}, expected 0 or 1"
    if len(in_types) < 2:
        return "needs the inputs boxes and scores"
    boxes, scores = in_types[0], in_types[1]
    if boxes.shape is not None and (len(boxes.shape) != 3 or _differ(boxes.shape[2], 4)):
        return f"boxes have type {boxes}, expected [batches, boxes, 4]"
    if scores.shape is not None and len(scores.shape) != 3:
        return f"scores have type {scores}, expected [batches, classes, boxes]"
    if boxes.shape is not None and scores.shape is not None:
        if _differ(boxes.shape[0], scores.shape[0]) or _differ(boxes.shape[1], scores.shape[2]):
            return f"boxes {boxes} and scores {scores} disagree on the batch or box count"
    for position, t in enumerate(in_types[2:], start=2):
        if t.num_elements is not None and t.num_elements != 1:
            return f"operand #{position} has type {t}, expected a scalar"
    if out_types:
        result = out_types[0]
        if result.dtype is not DType.I64 or (
            result.shape is not None and (len(result.shape) != 2 or _differ(result.shape[1], 3))
        ):
            return f"result has type {result}, expected i64[selected, 3]"
    return None


@cost("onnx.NonMaxSuppression")
def _nms_cost(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """Worst case: ``B · C · (12 · N² / 2 + N log N)`` FLOPs, bytes in + out."""
    if len(ins) < 2 or ins[1] is None or len(ins[1]) != 3:
        return None
    batches, classes, count = ins[1]
    per_class = _IOU_FLOPS * count * count / 2 + count * math.log2(max(count, 2))
    return batches * classes * per_class, float(sum(ib) + sum(ob)), 0


@lowering("NonMaxSuppression")
def _non_max_suppression(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    boxes, scores = operands[0], operands[1]
    max_out, iou, score_min = (_arg(operands, k) for k in (2, 3, 4))
    if int(cx.param("center_point_box", 0)):
        x_c, y_c, width, height = tf.unstack(boxes, axis=-1)
        boxes = tf.stack([y_c - height / 2, x_c - width / 2, y_c + height / 2, x_c + width / 2], axis=-1)
    boxes = tf.cast(boxes, tf.float32)
    scores = tf.cast(scores, tf.float32)
    count = tf.shape(boxes)[1]
    limit = tf.zeros([], tf.int32)
    if max_out is not None:  # int64 in ONNX; TensorFlow wants int32, and more than N selects N
        limit = tf.cast(tf.minimum(tf.reshape(max_out, []), tf.cast(count, max_out.dtype)), tf.int32)
    iou = tf.zeros([]) if iou is None else tf.cast(tf.reshape(iou, []), tf.float32)
    score_min = tf.constant(-math.inf) if score_min is None else tf.cast(tf.reshape(score_min, []), tf.float32)
    classes = tf.shape(scores)[1]
    pairs = tf.shape(scores)[0] * classes
    rows = tf.TensorArray(tf.int64, size=pairs, infer_shape=False, element_shape=tf.TensorShape([None, 3]))

    def body(k: Any, rows: Any) -> tuple[Any, Any]:
        batch, klass = k // classes, k % classes
        chosen = tf.image.non_max_suppression(boxes[batch], scores[batch, klass], limit, iou, score_min)
        chosen = tf.cast(chosen, tf.int64)
        batch_ids = tf.fill(tf.shape(chosen), tf.cast(batch, tf.int64))
        class_ids = tf.fill(tf.shape(chosen), tf.cast(klass, tf.int64))
        triple = tf.stack([batch_ids, class_ids, chosen], axis=1)
        return k + 1, rows.write(k, triple)

    _, rows = tf.while_loop(lambda k, _: k < pairs, body, (tf.constant(0), rows))
    selected = tf.cond(pairs > 0, rows.concat, lambda: tf.zeros([0, 3], tf.int64))
    return [tf.reshape(selected, [-1, 3])]
