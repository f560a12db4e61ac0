"""graphir's own dialect: ``graphir.split`` and ``graphir.concat``, the pieces of FastT operation splitting.

``graphir.split`` cuts its one operand into parts along ``axis``; ``graphir.concat`` joins its
operands along ``axis`` (both written by :mod:`graphir.passes.transform.split_rewrite`).

* **type rule**: an integer ``axis``, one whole tensor and at least one part; static parts match the
  whole outside ``axis`` and add up to it along ``axis``.
* **cost**: a copy: every input read once, every output written once.
* **lowering**: ``tf.split`` with the part sizes taken from the IR types, ``tf.concat``.
"""

# The op families share the package-private helpers of graphir.ops.work, split_plan and lower_context.
# pyright: reportPrivateUsage=false
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphir.ops.lower_context import OpContext
from graphir.ops.registry import cost, lowering, type_rule
from graphir.ops.work import _copy
from graphir.types import is_static_shape

if TYPE_CHECKING:
    from graphir.ir import Node
    from graphir.types import TensorType

SPLIT_OP = "graphir.split"
CONCAT_OP = "graphir.concat"

cost(SPLIT_OP, CONCAT_OP)(_copy)


@type_rule(SPLIT_OP, CONCAT_OP)
def _split_concat_type(node: Node, in_types: list[TensorType], out_types: list[TensorType]) -> str | None:
    """Parts match the whole outside ``axis`` and add up to it along ``axis`` (when static)."""
    axis = node.params.get("axis")
    whole, parts = (in_types, out_types) if node.op == SPLIT_OP else (out_types, in_types)
    if not isinstance(axis, int) or len(whole) != 1 or not parts:
        return "needs an integer 'axis', one whole tensor and at least one part"
    if not all(t.is_static for t in whole + parts):
        return None
    shape = whole[0].shape
    assert is_static_shape(shape), "checked above"
    if axis < 0 or axis >= len(shape):
        return f"axis {axis} is out of range for {whole[0]}"
    total = 0
    for part in parts:
        part_shape = part.shape
        assert is_static_shape(part_shape), "checked above"
        if len(part_shape) != len(shape) or any(
            d != p for i, (d, p) in enumerate(zip(shape, part_shape, strict=True)) if i != axis
        ):
            return f"part {part} does not match {whole[0]} outside axis {axis}"
        total += part_shape[axis]
    if total != shape[axis]:
        return f"parts add up to {total} along axis {axis}, expected {shape[axis]}"
    return None


@lowering("graphir.concat")
def _graphir_concat(cx: OpContext, operands: list[Any]) -> list[Any]:
    return [cx.tf.concat(operands, axis=int(cx.param("axis")))]


@lowering("graphir.split")
def _graphir_split(cx: OpContext, operands: list[Any]) -> list[Any]:
    axis = int(cx.param("axis"))
    sizes = [cx.out_shape(k)[axis] for k in range(len(cx.node.outputs))]
    return list(cx.tf.split(operands[0], sizes, axis=axis))
