"""Matrix products (ONNX and TensorFlow): MatMul, Gemm, batched and fused variants, Einsum.

* **type rule** (``onnx.MatMul``): static operands of rank >= 2 agree on the inner dimension.
* **cost**: ``2 · |out| · K`` FLOPs with ``K`` the contracted size (after ``transA``/``transpose_a``/
  ``adj_x``), plus ``|out|`` for Gemm's bias; Einsum: ``2 · prod(size of every index)`` when some
  index is contracted, else ``|out|``; bytes in + out.
* **split**: batch rows (A's leading dim) or output features (B's last dim, ``transB`` respected);
  Gemm's ``C`` follows the result where it carries the split axis.
* **lowering**: ``tf.linalg.matmul``; 1-D operands are expanded and squeezed back (numpy rules),
  decided at run time when an operand's rank is unknown.
"""

# The op families share the package-private helpers of graphir.ops.work, split_plan and lower_context.
# pyright: reportPrivateUsage=false
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from graphir.ops.lower_context import OpContext, _arg
from graphir.ops.registry import Estimate, Estimator, Shape, cost, lowering, split_rule, type_rule
from graphir.ops.split_plan import Dim, SplitError, SplitPlan, _balanced, _bias_plan, _int_param, _shape
from graphir.ops.work import _elems

if TYPE_CHECKING:
    from graphir.ir import Node
    from graphir.types import TensorType

# --------------------------------------------------------------------------- type rule


@type_rule("onnx.MatMul")
def _matmul_type(node: Node, in_types: list[TensorType], out_types: list[TensorType]) -> str | None:
    """Operands of static rank >= 2 agree on the inner dimension (``A[..., K] @ B[..., K, N]``)."""
    if len(in_types) != 2:
        return None
    a, b = in_types
    if a.is_static and b.is_static and a.rank and b.rank and a.rank >= 2 and b.rank >= 2:
        assert a.shape is not None and b.shape is not None
        if a.shape[-1] != b.shape[-2]:
            return f"operand shapes {a} and {b} have mismatched inner dimensions"
    return None


@type_rule("tf.MatMul", "_MklMatMul", "_FusedMatMul")
def _tf_matmul_type(node: Node, in_types: list[TensorType], out_types: list[TensorType]) -> str | None:
    """TF ``MatMul`` multiplies matrices: operands and result of known rank are rank 2.

    ``op(a)[M, K] @ op(b)[K, N]`` (``transpose_a``/``transpose_b``) agree on ``K`` when static.
    """
    if len(in_types) < 2:
        return None
    checked = [("operand", in_types[0]), ("operand", in_types[1])] + [("result", t) for t in out_types[:1]]
    for what, t in checked:
        if t.rank is not None and t.rank != 2:
            return f"{what} {t} is not a matrix (tf.MatMul needs rank 2)"
    a, b = in_types[0], in_types[1]
    if a.is_static and b.is_static and a.rank == 2 and b.rank == 2:
        assert a.shape is not None and b.shape is not None
        k_a = a.shape[0] if node.params.get("transpose_a") in (1, True) else a.shape[1]
        k_b = b.shape[1] if node.params.get("transpose_b") in (1, True) else b.shape[0]
        if k_a != k_b:
            return f"operand shapes {a} and {b} have mismatched inner dimensions"
    return None


# --------------------------------------------------------------------------- cost


def _matmul(k_of: Callable[[Node, Shape, Shape], int], bias_input: int | None = None) -> Estimator:
    def estimate(
        node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
    ) -> Estimate | None:
        if len(ins) < 2 or ins[0] is None or ins[1] is None or not outs or outs[0] is None or not ins[0]:
            return None
        k = k_of(node, ins[0], ins[1])
        flops = 2.0 * _elems(outs[0]) * k
        if bias_input is not None and len(ins) > bias_input:
            flops += _elems(outs[0])
        return flops, float(sum(ib) + sum(ob)), 0

    bias = " (+ ``|out|`` for the bias)" if bias_input is not None else ""
    estimate.__doc__ = f"Matrix product: ``2 · |out| · K`` FLOPs{bias}, bytes in + out."
    return estimate


def _k_last(node: Node, a: Shape, b: Shape) -> int:
    return a[-1]


def _k_transpose(flag: str) -> Callable[[Node, Shape, Shape], int]:
    def k_of(node: Node, a: Shape, b: Shape) -> int:
        if len(a) == 1:  # (the caller passes no empty shape)
            return a[0]
        return a[-2] if node.params.get(flag) in (1, True) else a[-1]

    return k_of


cost("MatMul", "MatMulInteger")(_matmul(_k_last))
cost("Gemm")(_matmul(_k_transpose("transA"), bias_input=2))
cost("tf.MatMul")(_matmul(_k_transpose("transpose_a")))
cost("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")(_matmul(_k_transpose("adj_x")))
cost("_MklMatMul", "_FusedMatMul")(_matmul(_k_transpose("transpose_a")))


@cost("Einsum")
def _einsum_cost(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate | None:
    """``2 · prod(size of every distinct index)`` when some index is contracted, else ``|out|``."""
    equation = node.params.get("equation")
    if not isinstance(equation, str) or any(s is None for s in ins):
        return None
    lhs, _, rhs = equation.replace(" ", "").partition("->")
    sizes: dict[str, int] = {}
    for term, shape in zip(lhs.split(","), ins, strict=False):
        letters = [c for c in term if c.isalpha()]
        if "..." in term or shape is None or len(letters) != len(shape):
            return None
        sizes.update(zip(letters, shape, strict=True))
    contracted = set(sizes) - set(rhs)
    flops = 2.0 * math.prod(sizes.values()) if contracted else float(sum(_elems(s) for s in outs))
    return flops, float(sum(ib) + sum(ob)), 0


# --------------------------------------------------------------------------- split rules


@split_rule(("batch", "channel"), "onnx.MatMul")
def _split_onnx_matmul(node: Node, dim: Dim, parts: int) -> SplitPlan:
    """ONNX MatMul ``A[..., M, K] @ B[..., K, N]``: batch (A's dim 0) or output features (B's N)."""
    a, b = _shape(node.inputs[0]), _shape(node.inputs[1])
    out = _shape(node.outputs[0])
    if len(a) < 2 or len(b) < 2:
        raise SplitError("has a 1-D operand: no batch rows or feature columns to split")
    if dim in ("channel", len(out) - 1, -1):
        sizes = _balanced(out[-1], parts)
        return SplitPlan(len(out) - 1, sizes, (None, (len(b) - 1, sizes)), dict(node.params))
    if dim not in ("batch", 0):
        raise SplitError(f"splits on the batch or the output features, not axis {dim}")
    if len(b) > len(a):
        raise SplitError(f"its operand {node.inputs[1].type} broadcasts leading dims over {node.inputs[0].type}")
    sizes = _balanced(out[0], parts)
    b_plan: tuple[int, tuple[int, ...]] | None = None
    if len(b) == len(a) and len(a) > 2 and b[0] != 1:
        b_plan = (0, sizes)
    return SplitPlan(0, sizes, ((0, sizes), b_plan), dict(node.params))


@split_rule(("batch", "channel"), "onnx.Gemm")
def _split_onnx_gemm(node: Node, dim: Dim, parts: int) -> SplitPlan:
    """ONNX Gemm ``alpha·A'·B' + beta·C``: batch rows (A's M) or output features (B's N); C follows."""
    out = _shape(node.outputs[0])
    trans_a, trans_b = _int_param(node, "transA", 0), _int_param(node, "transB", 0)
    if dim in ("batch", 0):
        axis, operand, operand_axis = 0, 0, 1 if trans_a else 0
    elif dim in ("channel", 1, -1):
        axis, operand, operand_axis = 1, 1, 0 if trans_b else 1
    else:
        raise SplitError(f"splits on the batch rows or the output features, not axis {dim}")
    sizes = _balanced(out[axis], parts)
    operands: list[Any] = [None, None]
    operands[operand] = (operand_axis, sizes)
    if len(node.inputs) > 2:
        operands.append(_bias_plan(_shape(node.inputs[2]), out, axis, sizes))
    return SplitPlan(axis, sizes, tuple(operands), dict(node.params))


@split_rule(("batch", "channel"), "tf.MatMul")
def _split_tf_matmul(node: Node, dim: Dim, parts: int) -> SplitPlan:
    """TF MatMul ``op(a)[M, K] @ op(b)[K, N]`` (``transpose_a``/``transpose_b``): rows or features."""
    out = _shape(node.outputs[0])
    trans_a = bool(node.params.get("transpose_a", False))
    trans_b = bool(node.params.get("transpose_b", False))
    if dim in ("batch", 0):
        sizes = _balanced(out[0], parts)
        return SplitPlan(0, sizes, ((1 if trans_a else 0, sizes), None), dict(node.params))
    if dim not in ("channel", 1, -1):
        raise SplitError(f"splits on the batch rows or the output features, not axis {dim}")
    sizes = _balanced(out[1], parts)
    return SplitPlan(1, sizes, (None, (0 if trans_b else 1, sizes)), dict(node.params))


# --------------------------------------------------------------------------- lowering


@lowering("Gemm")
def _lower_gemm(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    a, b, c = operands[0], operands[1], _arg(operands, 2)
    y = tf.linalg.matmul(a, b, transpose_a=bool(cx.param("transA", 0)), transpose_b=bool(cx.param("transB", 0)))
    alpha, beta = float(cx.param("alpha", 1.0)), float(cx.param("beta", 1.0))
    if alpha != 1.0:
        y = y * alpha
    if c is not None:
        y = y + (c if beta == 1.0 else c * beta)
    return [y]


@lowering("MatMul")
def _lower_matmul(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    a, b = operands
    shape_a, shape_b = cx.maybe_shape(0), cx.maybe_shape(1)
    if shape_a is None or shape_b is None:
        return [_matmul_of_unknown_rank(tf, a, b)]
    rank_a, rank_b = len(shape_a), len(shape_b)
    if rank_a == 1:
        a = tf.expand_dims(a, 0)
    if rank_b == 1:
        b = tf.expand_dims(b, -1)
    y = tf.linalg.matmul(a, b)
    if rank_b == 1:
        y = tf.squeeze(y, -1)
    if rank_a == 1:
        y = tf.squeeze(y, -1 if rank_b == 1 else -2)
    return [y]


def _matmul_of_unknown_rank(tf: Any, a: Any, b: Any) -> Any:
    """ONNX MatMul when an operand's rank is decided by data: numpy's 1-D rules applied at run time.

    A 1-D ``a`` becomes ``[1, K]`` and a 1-D ``b`` ``[K, 1]``; the product's matching unit axis
    (-2 for ``a``, -1 for ``b``) is then dropped again by a reshape to the kept dims.
    """
    a_vector = tf.equal(tf.rank(a), 1)
    b_vector = tf.equal(tf.rank(b), 1)
    a2 = tf.cond(a_vector, lambda: tf.expand_dims(a, 0), lambda: a)
    b2 = tf.cond(b_vector, lambda: tf.expand_dims(b, -1), lambda: b)
    product = tf.linalg.matmul(a2, b2)
    shape = tf.shape(product, out_type=tf.int64)
    kept = tf.boolean_mask(shape[-2:], tf.stack([tf.logical_not(a_vector), tf.logical_not(b_vector)]))
    return tf.reshape(product, tf.concat([shape[:-2], kept], axis=0))


@lowering("Einsum")
def _einsum(cx: OpContext, operands: list[Any]) -> list[Any]:
    equation = str(cx.param("equation")).replace(" ", "")
    return [cx.tf.einsum(equation, *operands)]


def _int_matmul(tf: Any, a: Any, b: Any) -> Any:
    """An exact integer product of 8-bit operands: int32 accumulation through float64 (TF has no int8 MatMul)."""
    return tf.cast(tf.linalg.matmul(tf.cast(a, tf.float64), tf.cast(b, tf.float64)), tf.int32)


@lowering("MatMulInteger")
def _matmul_integer(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    a, b = tf.cast(operands[0], tf.int32), tf.cast(operands[1], tf.int32)
    a_zero, b_zero = _arg(operands, 2), _arg(operands, 3)
    if a_zero is not None:
        zero = tf.cast(a_zero, tf.int32)
        a = a - (tf.reshape(zero, [-1, 1]) if cx.rank(2) == 1 and cx.rank(0) >= 2 else zero)
    if b_zero is not None:
        b = b - tf.cast(b_zero, tf.int32)
    return [_int_matmul(tf, a, b)]


@lowering("QLinearMatMul")
def _qlinear_matmul(cx: OpContext, operands: list[Any]) -> list[Any]:
    # y = saturate(round((a - a_zero) * a_scale @ (b - b_zero) * b_scale / y_scale) + y_zero)
    tf = cx.tf
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = operands
    wide = tf.float64
    left = (tf.cast(a, wide) - tf.cast(a_zero, wide)) * tf.cast(a_scale, wide)
    right = (tf.cast(b, wide) - tf.cast(b_zero, wide)) * tf.cast(b_scale, wide)
    y = tf.math.round(tf.linalg.matmul(left, right) / tf.cast(y_scale, wide)) + tf.cast(y_zero, wide)
    out = y_zero.dtype
    return [tf.cast(tf.clip_by_value(y, float(out.min), float(out.max)), out)]


@lowering("Det")
def _det(cx: OpContext, operands: list[Any]) -> list[Any]:
    return [cx.tf.linalg.det(operands[0])]
