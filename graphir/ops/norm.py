"""Normalisations (ONNX and TensorFlow): batch, layer, instance, group norms, LRN, and their gradients.

* **type rule** (``onnx.LRN``): the result has the operand's type.
* **cost**: proportional to the input: ``4 · |x|`` FLOPs for inference batch norm (scale and shift),
  ``10 · |x|`` for TF's training batch norm (statistics too), ``8 · |x|`` for layer-like norms,
  ``12 · |x|`` for their gradients; LRN ``(2 · size + 4) · |x|`` (a windowed sum of squares and a power).
* **split**: ``onnx.BatchNormalization`` (inference: the statistics are inputs, shared) and
  ``onnx.LRN`` split on the batch only: their channels are normalised together.
* **lowering**: inference ``BatchNormalization`` folds into one scale and shift (training mode
  normalises with the batch statistics and returns the updated running ones); LRN sums shifted
  slices of the squared input on NCHW; ``InstanceNormalization`` uses ``tf.nn.moments``; layer, RMS
  and group norms compute their statistics in float32 for half inputs (``stash_type`` 1), group
  norm scales per group before opset 21 and per channel from 21.
"""

# The op families share the package-private helpers of graphir.ops.work, split_plan and lower_context.
# pyright: reportPrivateUsage=false
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from graphir.ops.elementwise import same_type_rule
from graphir.ops.lower_context import OpContext, _arg, _norm_axis, _per_channel
from graphir.ops.registry import Estimate, Shape, cost, lowering, split_rule, type_rule
from graphir.ops.split_plan import Dim, SplitError, SplitPlan, _broadcast_plan, _int_param
from graphir.ops.work import _elems, _over_input, _param_int

if TYPE_CHECKING:
    from graphir.ir import Node

type_rule("onnx.LRN")(same_type_rule)

# --------------------------------------------------------------------------- cost


@cost("LRN")
def _lrn(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate | None:
    """Local response normalisation: a sum of squares over ``size`` channels, then a power: ``(2·size + 4)/elem``."""
    if not ins or ins[0] is None:
        return None
    size = _param_int(node, "size", 0) or 2 * _param_int(node, "depth_radius", 2) + 1
    return float(_elems(ins[0]) * (2 * size + 4)), float(sum(ib) + sum(ob)), 0


@cost("LRNGrad")
def _lrn_grad(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate | None:
    """LRN gradient: about twice the forward work."""
    if not ins or ins[0] is None:
        return None
    size = 2 * _param_int(node, "depth_radius", 2) + 1
    return float(_elems(ins[0]) * (4 * size + 8)), float(sum(ib) + sum(ob)), 0


@cost("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "_FusedBatchNormEx")
def _fused_batch_norm(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate | None:
    """TF batch norm: training computes mean and variance (10 FLOPs/elem), inference scales (4)."""
    if not ins or ins[0] is None:
        return None
    training = node.params.get("is_training", True) in (True, 1)
    return float(_elems(ins[0]) * (10 if training else 4)), float(sum(ib) + sum(ob)), 0


cost("BatchNormalization")(_over_input(4))
cost(
    *("LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization", "InstanceNormalization"),
    *("GroupNormalization", "RMSNormalization", "MeanVarianceNormalization", "LpNormalization"),
)(_over_input(8))
cost(
    *("FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3", "LayerNormalizationGrad"),
)(_over_input(12))


# --------------------------------------------------------------------------- split rule


@split_rule(("batch",), "onnx.BatchNormalization", "onnx.LRN")
def _onnx_batch_only(node: Node, dim: Dim, parts: int) -> SplitPlan:
    """Batch normalisation (inference: statistics are inputs, shared) and LRN: batch only."""
    if dim != "batch" and dim != 0:
        raise SplitError("splits on the batch only (its channels are normalised together)")
    if _int_param(node, "training_mode", 0):
        raise SplitError("runs in training mode: its batch statistics need the whole batch")
    plan = _broadcast_plan(node, 0, parts)
    operands = (plan.operands[0],) + (None,) * (len(node.inputs) - 1)
    return dataclasses.replace(plan, operands=operands)


# --------------------------------------------------------------------------- lowering


@lowering("BatchNormalization")
def _batch_norm(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, scale, bias, mean, var = operands[:5]
    rank = cx.rank(0)
    eps = float(cx.param("epsilon", 1e-5))
    if int(cx.param("training_mode", 0)):
        # Training mode (opset 14+): normalise with the batch statistics and update the running ones.
        momentum = float(cx.param("momentum", 0.9))
        axes = [0, *range(2, rank)]
        batch_mean, batch_var = tf.nn.moments(x, axes=axes)
        factor = scale * tf.math.rsqrt(batch_var + eps)
        y = x * _per_channel(tf, factor, rank) + _per_channel(tf, bias - batch_mean * factor, rank)
        running_mean = mean * momentum + batch_mean * (1 - momentum)
        running_var = var * momentum + batch_var * (1 - momentum)
        return cx.present([y, running_mean, running_var])
    if len(cx.node.outputs) > 1:
        raise cx.error("with saved statistics outputs outside training mode is not supported")
    factor = scale * tf.math.rsqrt(var + eps)
    shift = bias - mean * factor
    return [x * _per_channel(tf, factor, rank) + _per_channel(tf, shift, rank)]


@lowering("LRN")
def _lower_lrn(cx: OpContext, operands: list[Any]) -> list[Any]:
    # ONNX: square_sum[c] = sum over c' in [c - floor((size-1)/2), c + ceil((size-1)/2)] of x[c']^2,
    # y = x / (bias + alpha / size * square_sum) ^ beta. Computed on NCHW by summing shifted slices.
    tf = cx.tf
    x = operands[0]
    size = int(cx.param("size"))
    alpha, beta, bias = float(cx.param("alpha", 1e-4)), float(cx.param("beta", 0.75)), float(cx.param("bias", 1.0))
    rank = cx.rank(0)
    channels = cx.static_shape(0)[1]
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = tf.pad(tf.math.square(x), [(0, 0), (before, after)] + [(0, 0)] * (rank - 2))
    square_sum = padded[:, 0:channels]
    for shift in range(1, size):
        square_sum = square_sum + padded[:, shift : shift + channels]
    return [x / tf.math.pow(bias + (alpha / size) * square_sum, beta)]


@lowering("InstanceNormalization")
def _instance_norm(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, scale, bias = operands[:3]
    rank = cx.rank(0)
    eps = float(cx.param("epsilon", 1e-5))
    mean, var = tf.nn.moments(x, axes=list(range(2, rank)), keepdims=True)
    normed = (x - mean) * tf.math.rsqrt(var + eps)
    return [normed * _per_channel(tf, scale, rank) + _per_channel(tf, bias, rank)]


def _stash(cx: OpContext, x: Any) -> Any:
    """``stash_type`` 1 (the default) computes the statistics in float32."""
    tf = cx.tf
    if int(cx.param("stash_type", 1)) == 1 and x.dtype in (tf.float16, tf.bfloat16):
        return tf.cast(x, tf.float32)
    return x


@lowering("LayerNormalization")
def _layer_norm(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, scale, bias = operands[0], operands[1], _arg(operands, 2)
    rank = cx.rank(0)
    axis = _norm_axis(int(cx.param("axis", -1)), rank)
    eps = float(cx.param("epsilon", 1e-5))
    wide = _stash(cx, x)
    axes = list(range(axis, rank))
    mean = tf.reduce_mean(wide, axis=axes, keepdims=True)
    var = tf.reduce_mean(tf.math.square(wide - mean), axis=axes, keepdims=True)
    inv_std = tf.math.rsqrt(var + tf.cast(eps, wide.dtype))
    y = tf.cast((wide - mean) * inv_std, x.dtype) * scale
    if bias is not None:
        y = y + bias
    return cx.present([y, mean, inv_std])


@lowering("RMSNormalization")
def _rms_norm(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, scale = operands[0], operands[1]
    rank = cx.rank(0)
    axis = _norm_axis(int(cx.param("axis", -1)), rank)
    eps = float(cx.param("epsilon", 1e-5))
    wide = _stash(cx, x)
    mean_square = tf.reduce_mean(tf.math.square(wide), axis=list(range(axis, rank)), keepdims=True)
    y = tf.cast(wide * tf.math.rsqrt(mean_square + tf.cast(eps, wide.dtype)), x.dtype)
    return [y * scale]


@lowering("GroupNormalization")
def _group_norm(cx: OpContext, operands: list[Any]) -> list[Any]:
    # Opset 18 scales and shifts per group, opset 21 per channel.
    tf = cx.tf
    x, scale, bias = operands[:3]
    rank = cx.rank(0)
    groups = int(cx.param("num_groups"))
    eps = float(cx.param("epsilon", 1e-5))
    shape = tf.shape(x)
    wide = _stash(cx, x)
    grouped = tf.reshape(wide, tf.concat([shape[:1], [groups, -1]], axis=0))
    mean, var = tf.nn.moments(grouped, axes=[2], keepdims=True)
    normed = tf.cast(tf.reshape((grouped - mean) * tf.math.rsqrt(var + eps), shape), x.dtype)
    if cx.opset < 21:
        channels = shape[1]
        scale = tf.repeat(scale, channels // groups)
        bias = tf.repeat(bias, channels // groups)
    return [normed * _per_channel(tf, scale, rank) + _per_channel(tf, bias, rank)]


@lowering("MeanVarianceNormalization")
def _mvn(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    axes = [_norm_axis(int(a), cx.rank(0)) for a in cx.param("axes", (0, 2, 3))]
    mean = tf.reduce_mean(x, axis=axes, keepdims=True)
    var = tf.reduce_mean(tf.math.square(x), axis=axes, keepdims=True) - tf.math.square(mean)
    return [(x - mean) / (tf.math.sqrt(var) + 1e-9)]


@lowering("LpNormalization")
def _lp_norm(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    axis = _norm_axis(int(cx.param("axis", -1)), cx.rank(0))
    p = int(cx.param("p", 2))
    if p == 1:
        norm = tf.reduce_sum(tf.math.abs(x), axis=axis, keepdims=True)
    else:
        norm = tf.math.sqrt(tf.reduce_sum(tf.math.square(x), axis=axis, keepdims=True))
    return [tf.where(norm == 0, tf.zeros_like(x), x / tf.where(norm == 0, tf.ones_like(norm), norm))]
