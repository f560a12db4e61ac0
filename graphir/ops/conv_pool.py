"""Convolutions and pooling (ONNX and TensorFlow), forward and gradient ops.

* **cost**: a convolution costs ``2 · |out| · Cin/g · prod(kernel)`` FLOPs (ONNX ``W = [Cout, Cin/g, k...]``,
  TF ``filter = [k..., Cin/g, Cout]``; the bias adds ``|out|``) and keeps the im2col buffer of one
  image as scratch; its gradients cost the forward FLOPs each; pooling costs ``|out| · prod(kernel)``.
* **split**: ``onnx.Conv`` on the batch (activations cut, weights shared) or the output channels
  (``W[Cout, ...]`` and the bias cut on axis 0; a grouped convolution only when its group count is a
  multiple of the parts, each part then convolving ``g / n`` whole groups); ``tf.Conv2D`` likewise
  (``filter[kh, kw, Cin, Cout]`` cut on axis 3, NHWC or NCHW); ONNX pooling on batch or channels.
* **lowering**: TensorFlow's CPU convolution and pooling kernels only accept channels-last, so
  ``Conv`` and the pools transpose to NHWC (NWC, NDHWC), run the kernel with ``VALID`` padding after
  an explicit ``tf.pad`` (ONNX pads may be asymmetric), and transpose back. Where TensorFlow lacks a
  kernel variant the lowering composes an exact equivalent: strided *and* dilated convolutions run
  dense and subsample, dilated ``MaxPool`` takes the maximum of one strided slice per window offset,
  and ``ConvTranspose`` runs a VALID transposed convolution, then crops ``pads`` and appends
  ``output_padding``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from graphir.ops.lower_context import OpContext, _arg, _vector_length, onnx_inputs
from graphir.ops.registry import Estimate, Shape, cost, lowering, split_rule, weight_layout
from graphir.ops.split_plan import (
    Dim,
    SplitError,
    SplitPlan,
    _balanced,
    _broadcast_plan,
    _int_param,
    _named_axis,
    _shape,
)
from graphir.ops.work import _elems, _itemsize, _param_ints

if TYPE_CHECKING:
    from graphir.ir import Node

# --------------------------------------------------------------------------- cost


@cost("Conv", "FusedConv", "ConvInteger")
def _onnx_conv(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate | None:
    """ONNX Conv, W = [Cout, Cin/g, k...]: ``2 · |Y| · prod(W[1:])`` (+ |Y| for the bias)."""
    if len(ins) < 2 or ins[1] is None or not outs or outs[0] is None:
        return None
    weight, out = ins[1], outs[0]
    per_output = _elems(weight[1:])
    flops = 2.0 * _elems(out) * per_output + (_elems(out) if len(ins) > 2 else 0)
    temporary = 0
    if any(k != 1 for k in weight[2:]) and len(out) > 2:
        # im2col of one image: (Cin/g · prod(k)) rows x prod(out spatial) columns.
        temporary = per_output * _elems(out[2:]) * _itemsize(node)
    return flops, float(sum(ib) + sum(ob)), temporary


@cost("ConvTranspose")
def _onnx_conv_transpose(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate | None:
    """ONNX ConvTranspose, W = [Cin, Cout/g, k...]: ``2 · |X| · prod(W[1:])``."""
    if len(ins) < 2 or ins[0] is None or ins[1] is None:
        return None
    return 2.0 * _elems(ins[0]) * _elems(ins[1][1:]), float(sum(ib) + sum(ob)), 0


@cost("Conv2D", "Conv3D", "Conv1D", "_FusedConv2D")
def _tf_conv(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate | None:
    """TF Conv, filter = [k..., Cin/g, Cout]: ``2 · |out| · prod(filter[:-1])``."""
    if len(ins) < 2 or ins[1] is None or not outs or outs[0] is None:
        return None
    per_output = _elems(ins[1][:-1])
    temporary = per_output * _elems(outs[0][1:-1]) * _itemsize(node) if any(k != 1 for k in ins[1][:-2]) else 0
    return 2.0 * _elems(outs[0]) * per_output, float(sum(ib) + sum(ob)), temporary


@cost("DepthwiseConv2dNative", "DepthwiseConv2D")
def _tf_depthwise(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate | None:
    """Depthwise conv, filter = [kh, kw, Cin, multiplier]: ``2 · |out| · kh · kw``."""
    if len(ins) < 2 or ins[1] is None or not outs or outs[0] is None:
        return None
    return 2.0 * _elems(outs[0]) * _elems(ins[1][:-2]), float(sum(ib) + sum(ob)), 0


@cost("Conv2DBackpropInput", "Conv3DBackpropInputV2", "Conv3DBackpropInput")
def _tf_conv_backprop_input(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate | None:
    """DX of a conv (inputs: input_sizes, filter, dY): the forward FLOPs, ``2 · |dY| · prod(filter[:-1])``."""
    if len(ins) < 3 or ins[1] is None or ins[2] is None:
        return None
    return 2.0 * _elems(ins[2]) * _elems(ins[1][:-1]), float(sum(ib[1:]) + sum(ob)), 0


@cost("Conv2DBackpropFilter", "Conv3DBackpropFilterV2", "Conv3DBackpropFilter")
def _tf_conv_backprop_filter(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate | None:
    """DW of a conv (inputs: input, filter_sizes, dY; output: filter-shaped): ``2 · |dY| · prod(dW[:-1])``."""
    if len(ins) < 3 or ins[2] is None or not outs or outs[0] is None:
        return None
    return 2.0 * _elems(ins[2]) * _elems(outs[0][:-1]), float(ib[0] + ib[2] + sum(ob)), 0


@cost("DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter")
def _tf_depthwise_backprop(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate | None:
    """Depthwise conv gradients: ``2 · |dY| · kh · kw`` (kernel from the filter or the result)."""
    if len(ins) < 3 or ins[2] is None:
        return None
    kernel = ins[1] if node.op.endswith("Input") else (outs[0] if outs else None)
    if kernel is None or len(kernel) < 2:
        return None
    return 2.0 * _elems(ins[2]) * _elems(kernel[:-2]), float(sum(ib) + sum(ob)), 0


def _kernel_elems(node: Node) -> int | None:
    kernel = _param_ints(node, "kernel_shape") or _param_ints(node, "ksize")
    return math.prod(kernel) if kernel is not None else None


@cost("MaxPool", "AveragePool", "AvgPool", "AvgPool3D", "MaxPool3D", "LpPool", "MaxPoolWithArgmax")
def _pool(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate | None:
    """Windowed pooling: ``|out| · prod(kernel)`` comparisons/additions."""
    kernel = _kernel_elems(node)
    if kernel is None or not outs or outs[0] is None:
        return None
    return float(_elems(outs[0]) * kernel), float(sum(ib) + sum(ob)), 0


@cost("MaxPoolGrad", "AvgPoolGrad", "MaxPoolGradV2", "MaxPool3DGrad", "AvgPool3DGrad", "MaxPoolGradGrad")
def _pool_grad(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate | None:
    """Pooling gradients: ``|dY| · prod(kernel)`` (dY is the last input)."""
    kernel = _kernel_elems(node)
    if kernel is None or not ins or ins[-1] is None:
        return None
    return float(_elems(ins[-1]) * kernel), float(sum(ib) + sum(ob)), 0


# --------------------------------------------------------------------------- split rules


@split_rule(("batch", "channel"), "onnx.MaxPool", "onnx.AveragePool", "onnx.GlobalAveragePool", "onnx.GlobalMaxPool")
def _split_onnx_pool(node: Node, dim: Dim, parts: int) -> SplitPlan:
    """Pooling works per image and per channel: batch or channel (axis 1)."""
    axis = _named_axis(node, dim, 1)
    if axis > 1:
        raise SplitError("splits on the batch or the channels only (its window spans the spatial axes)")
    return _broadcast_plan(node, axis, parts)


@split_rule(("batch", "channel"), "onnx.Conv")
def _split_onnx_conv(node: Node, dim: Dim, parts: int) -> SplitPlan:
    """ONNX Conv ``X[N, Cin, ...] * W[Cout, Cin/g, k...] (+ B[Cout])``: batch or output channels."""
    x, w = _shape(node.inputs[0]), _shape(node.inputs[1])
    out = _shape(node.outputs[0])
    group = _int_param(node, "group", 1)
    bias = len(node.inputs) > 2
    if dim in ("batch", 0):
        if x[0] != out[0]:
            raise SplitError(f"its input batch {x[0]} differs from its result batch {out[0]}")
        sizes = _balanced(out[0], parts)
        return SplitPlan(0, sizes, ((0, sizes), None) + ((None,) if bias else ()), dict(node.params))
    if dim not in ("channel", 1):
        raise SplitError(f"splits on the batch or the output channels, not axis {dim}")
    if w[0] != out[1]:
        raise SplitError(f"its weight {node.inputs[1].type} does not give the result's {out[1]} channels")
    params = dict(node.params)
    if group == 1:
        sizes = _balanced(out[1], parts)
        operands: tuple[tuple[int, tuple[int, ...]] | None, ...] = (None, (0, sizes))
    else:
        if group % parts:
            raise SplitError(
                f"has group={group}, not a multiple of parts={parts}: a part would cut a group of channels"
            )
        sizes = (out[1] // parts,) * parts
        operands = ((1, (x[1] // parts,) * parts), (0, sizes))
        params["group"] = group // parts
    return SplitPlan(1, sizes, operands + (((0, sizes),) if bias else ()), params)


@split_rule(("batch", "channel"), "tf.Conv2D")
def _split_tf_conv2d(node: Node, dim: Dim, parts: int) -> SplitPlan:
    """TF Conv2D ``input * filter[kh, kw, Cin, Cout]``: batch or output channels (NHWC or NCHW)."""
    out = _shape(node.outputs[0])
    channel = 1 if node.params.get("data_format") == "NCHW" else 3
    if dim in ("batch", 0):
        sizes = _balanced(out[0], parts)
        return SplitPlan(0, sizes, ((0, sizes), None), dict(node.params))
    if dim not in ("channel", channel):
        raise SplitError(f"splits on the batch or the output channels, not axis {dim}")
    f = _shape(node.inputs[1])
    x = _shape(node.inputs[0])
    if f[2] != x[channel]:
        raise SplitError(f"is a grouped convolution (filter {node.inputs[1].type}): not supported")
    sizes = _balanced(out[channel], parts)
    return SplitPlan(channel, sizes, (None, (3, sizes)), dict(node.params))


# --------------------------------------------------------------------------- lowering


def _filters(cx: OpContext, w: Any, perm: list[int]) -> Any:
    """ONNX weights ``w`` (input #1) in TensorFlow's filter layout, ``w`` transposed by ``perm``.

    A weight that is a graph ``Const`` is transposed here, once, into a new constant on the
    convolution's device: the runs keep Grappler's constant folding off (so the graph stays the
    placement's), and a ``Transpose`` of the constant would otherwise run every step, on the
    convolution's device but ahead of its activation, work the cost of the convolution node
    cannot place in time (fidelity-notes.md, resnet50-infer). The original constant is then
    unconsumed and pruned. A weight that is a ``Fill`` is made again in the filter layout
    (:func:`_filled`). A large weight (a variable) that only convolutions read is stored in the
    filter layout by the lowering driver (:func:`_filter_layout`, ``cx.laid_out``) and read as is;
    one that another op reads too keeps ONNX's layout and is transposed in the graph.
    """
    if cx.laid_out.get(1) == tuple(perm):
        return w
    op_type = getattr(getattr(w, "op", None), "type", None)
    if op_type == "Fill":
        filled = _filled(cx, w, perm)
        if filled is not None:
            return filled
    array = cx.const(1) if op_type == "Const" else None
    if array is None:
        return cx.tf.transpose(w, perm)
    return cx.tf.constant(np.ascontiguousarray(np.transpose(array, perm)), dtype=w.dtype)


@weight_layout("Conv", "ConvTranspose")
def _filter_layout(node: Node) -> dict[int, tuple[int, ...]]:
    """Weights ``[M, C/group, k...]`` (``ConvTranspose``: ``[C, M/group, k...]``) read as ``[k..., C/group, M]``."""
    inputs = onnx_inputs(node)
    shape = inputs[1].type.shape if len(inputs) > 1 and inputs[1] is not None else None
    if shape is None:
        return {}
    rank = len(shape)
    return {1: (*range(2, rank), 1, 0)}


def _filled(cx: OpContext, w: Any, perm: list[int]) -> Any:
    """A weight made by a ``Fill`` of static dims and value, made again in TF's filter layout.

    ``onnx.ConstantOfShape`` lowers to ``Fill``, and the fill of one value is the same tensor in
    any layout, so ``Transpose(Fill(dims, v), perm)`` is ``Fill(dims[perm], v)``. The new ``Fill``
    is made where the old one was: in its producer's name scope (the lowering charges a TF op to the
    IR node whose scope holds it, so the measured time stays the producer's), on its device and
    with its control inputs, not the convolution's; the old one, unconsumed, is pruned (under the
    ``enforced`` order it stays the control predecessor of the producer's successor and still runs:
    two fills a step, both charged to the producer, no transpose). The IR has
    no Transpose here: the producer node makes the weight, the convolution consumes it. Without
    this, the zoo's weightless ONNX models (``ConstantOfShape`` weights: resnet50, squeezenet,
    inception_v1) ran one ``Transpose`` of every convolution's weights each step, charged to the
    convolution but ready at the start of the step: resnet50-infer on one rig worker, 46 of its
    168 ms of kernels a step; in its METIS split worker 1 ran them while worker 0 computed the
    first half, a 23 % gain the simulator could not see (benchmarks/results/ruler-weight-fills.md).

    Returns:
        The new fill, or ``None`` when the dims or the value are not static.
    """
    tf = cx.tf
    fill = w.op
    dims = tf.get_static_value(fill.inputs[0])
    value = tf.get_static_value(fill.inputs[1])
    if dims is None or value is None or np.ndim(value) != 0 or len(dims) != len(perm):
        return None
    scope = fill.name.rsplit("/", 1)[0] + "/" if "/" in fill.name else None
    with (
        tf.name_scope(scope),
        tf.device(fill.device),
        tf.control_dependencies(None),
        tf.control_dependencies(fill.control_inputs),
    ):
        return tf.fill([int(dims[k]) for k in perm], tf.constant(value, dtype=w.dtype))


def _channels_last(rank: int) -> tuple[list[int], list[int]]:
    """Permutations NC... -> N...C and back."""
    to_last = [0, *range(2, rank), 1]
    to_first = [0, rank - 1, *range(1, rank - 1)]
    return to_last, to_first


def _explicit_pads(
    cx: OpContext, spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]
) -> list[tuple[int, int]]:
    """(begin, end) per spatial axis from ``pads`` / ``auto_pad`` (ONNX conv and pool rules)."""
    count = len(kernel)
    auto_pad = cx.param("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", ""):
        pads = tuple(cx.param("pads", (0,) * (2 * count)))
        if len(pads) != 2 * count:
            raise cx.error(f"has {len(pads)} pads for {count} spatial axes")
        return [(int(pads[i]), int(pads[i + count])) for i in range(count)]
    if auto_pad == "VALID":
        return [(0, 0)] * count
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise cx.error(f"has unknown auto_pad '{auto_pad}'")
    result = []
    for size, k, s, d in zip(spatial, kernel, strides, dilations, strict=True):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, large = total // 2, total - total // 2
        result.append((small, large) if auto_pad == "SAME_UPPER" else (large, small))
    return result


def _spatial_params(cx: OpContext, kernel: Sequence[int]) -> tuple[list[int], list[int]]:
    count = len(kernel)
    strides = [int(s) for s in cx.param("strides", (1,) * count)]
    dilations = [int(d) for d in cx.param("dilations", (1,) * count)]
    return strides, dilations


@lowering("Conv")
def _lower_conv(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, w, bias = operands[0], operands[1], _arg(operands, 2)
    rank = cx.rank(0)
    w_shape = cx.static_shape(1)
    kernel = [int(k) for k in cx.param("kernel_shape", w_shape[2:])]
    if rank not in (3, 4, 5):
        raise cx.error(f"has a rank-{rank} input; only 1-D, 2-D and 3-D convolutions are lowered")
    strides, dilations = _spatial_params(cx, kernel)
    group = int(cx.param("group", 1))
    spatial = cx.static_shape(0)[2:]
    pads = _explicit_pads(cx, spatial, kernel, strides, dilations)
    to_last, to_first = _channels_last(rank)
    x = tf.transpose(x, to_last)
    if any(p != (0, 0) for p in pads):
        x = tf.pad(x, [(0, 0), *pads, (0, 0)])
    # ONNX weights [M, C/group, k...] -> TensorFlow filters [k..., C/group, M].
    w = _filters(cx, w, [*range(2, rank), 1, 0])
    # TensorFlow rejects strides > 1 together with dilations > 1: convolve densely, then subsample.
    subsample = any(s > 1 for s in strides) and any(d > 1 for d in dilations)
    run_strides = [1] * len(strides) if subsample else strides
    if rank == 4:
        # Conv2D infers the group count from C / (C/group): grouped convolution runs on CPU too.
        y = tf.nn.conv2d(x, w, strides=run_strides, padding="VALID", dilations=dilations)
    elif group == 1:
        y = tf.nn.convolution(x, w, strides=run_strides, padding="VALID", dilations=dilations)
    else:
        xs = tf.split(x, group, axis=-1)
        ws = tf.split(w, group, axis=-1)
        parts = [
            tf.nn.convolution(xi, wi, strides=run_strides, padding="VALID", dilations=dilations)
            for xi, wi in zip(xs, ws, strict=True)
        ]
        y = tf.concat(parts, axis=-1)
    if subsample:
        y = y[(slice(None), *(slice(None, None, s) for s in strides), slice(None))]
    if bias is not None:
        y = y + bias
    return [tf.transpose(y, to_first)]


def _ceil_extra(size: int, pads: tuple[int, int], k: int, s: int, d: int) -> int:
    """Extra end padding so a VALID pool produces ONNX's ``ceil_mode=1`` output size."""
    span = (k - 1) * d + 1
    out = -(-(size + pads[0] + pads[1] - span) // s) + 1
    if (out - 1) * s >= size + pads[0]:  # the last window would start in the end padding only
        out -= 1
    return max(0, (out - 1) * s + span - (size + pads[0] + pads[1]))


@lowering("MaxPool", "AveragePool", "LpPool")
def _lower_pool(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    rank = cx.rank(0)
    if rank not in (3, 4, 5):
        raise cx.error(f"has a rank-{rank} input; only 1-D, 2-D and 3-D pooling is lowered")
    if len(cx.node.outputs) > 1:
        raise cx.error("with an Indices output is not supported by the TensorFlow lowering")
    kernel = [int(k) for k in cx.param("kernel_shape")]
    strides, dilations = _spatial_params(cx, kernel)
    spatial = cx.static_shape(0)[2:]
    pads = _explicit_pads(cx, spatial, kernel, strides, dilations)
    if int(cx.param("ceil_mode", 0)):
        extra = [
            _ceil_extra(n, p, k, s, d) for n, p, k, s, d in zip(spatial, pads, kernel, strides, dilations, strict=True)
        ]
    else:
        extra = [0] * len(kernel)
    padding = [(0, 0), *((b, e + x_) for (b, e), x_ in zip(pads, extra, strict=True)), (0, 0)]
    to_last, to_first = _channels_last(rank)
    x = tf.transpose(x, to_last)
    padded = any(p != (0, 0) for p in padding)
    if cx.node.op == "onnx.MaxPool":
        if padded:
            low = x.dtype.min if not x.dtype.is_floating else -math.inf
            x = tf.pad(x, padding, constant_values=low)
        if any(d != 1 for d in dilations):
            y = _dilated_window(tf, x, kernel, strides, dilations, tf.math.maximum)
        else:
            y = tf.nn.max_pool(x, kernel, strides, "VALID")
        return [tf.transpose(y, to_first)]
    if cx.node.op == "onnx.LpPool":
        p = float(cx.param("p", 2))
        x = tf.math.pow(tf.math.abs(x), p)
        if padded:
            x = tf.pad(x, padding)
        y = _dilated_window(tf, x, kernel, strides, dilations, tf.math.add)
        return [tf.transpose(tf.math.pow(y, 1.0 / p), to_first)]
    if padded:
        x = tf.pad(x, padding)
    if any(d != 1 for d in dilations):
        # Dilated windows: the sum of one strided slice per window offset, over the counted cells.
        include = bool(int(cx.param("count_include_pad", 0)))
        total = _dilated_window(tf, x, kernel, strides, dilations, tf.math.add)
        counts = _pool_counts(spatial, pads, extra, kernel, strides, include, dilations)
        return [tf.transpose(total / tf.constant(counts.reshape((1, *counts.shape, 1)), dtype=total.dtype), to_first)]
    y = tf.nn.avg_pool(x, kernel, strides, "VALID")
    if padded:
        # avg_pool divided by the full window; ONNX divides by the cells that are input (plus the
        # explicit pads when count_include_pad=1, never ceil_mode's extra cells).
        include = bool(int(cx.param("count_include_pad", 0)))
        counts = _pool_counts(spatial, pads, extra, kernel, strides, include)
        scale = math.prod(kernel) / counts
        y = y * tf.constant(scale.reshape((1, *scale.shape, 1)), dtype=y.dtype)
    return [tf.transpose(y, to_first)]


def _dilated_window(
    tf: Any, x: Any, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int], combine: Any
) -> Any:
    """VALID pooling of channels-last ``x`` with dilations, one spatial axis at a time.

    A pooling window is the product of one (dilated, strided) window per spatial axis, and ``combine``
    (``maximum`` or ``add``) is associative and commutative, so the window's result is the axes'
    windows applied in turn: along axis ``i``, ``combine`` of ``kernel[i]`` strided slices. That is
    ``sum(kernel)`` slices instead of one per window offset (``prod(kernel)``): 140 instead of 4,800
    TensorFlow ops for a 60 x 80 kernel.
    """
    for axis, (k, d, s) in enumerate(zip(kernel, dilations, strides, strict=True), start=1):
        size = int(x.shape[axis])
        out = (size - ((k - 1) * d + 1)) // s + 1
        result = None
        for offset in range(k):
            index = [slice(None)] * len(x.shape)
            index[axis] = slice(offset * d, offset * d + (out - 1) * s + 1, s)
            part = x[tuple(index)]
            result = part if result is None else combine(result, part)
        x = result
    return x


def _pool_counts(
    spatial: Sequence[int],
    pads: Sequence[tuple[int, int]],
    extra: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    include_pads: bool,
    dilations: Sequence[int] | None = None,
) -> np.ndarray:
    """Number of counted cells in every pooling window (float64, one entry per output position)."""
    axes = []
    dilations = dilations or [1] * len(kernel)
    for size, (begin, end), more, k, s, d in zip(spatial, pads, extra, kernel, strides, dilations, strict=True):
        mask = np.zeros(begin + size + end + more)
        if include_pads:
            mask[: begin + size + end] = 1.0
        else:
            mask[begin : begin + size] = 1.0
        span = (k - 1) * d + 1
        windows = (len(mask) - span) // s + 1
        axes.append(np.array([mask[i * s : i * s + span : d].sum() for i in range(windows)]))
    counts = axes[0]
    for axis in axes[1:]:
        counts = np.multiply.outer(counts, axis)
    return np.maximum(counts, 1.0)


@lowering("GlobalAveragePool", "GlobalMaxPool")
def _lower_global_pool(cx: OpContext, operands: list[Any]) -> list[Any]:
    axes = list(range(2, cx.rank(0)))
    fn = cx.tf.math.reduce_mean if cx.node.op == "onnx.GlobalAveragePool" else cx.tf.math.reduce_max
    return [fn(operands[0], axis=axes, keepdims=True)]


@lowering("ConvTranspose")
def _lower_conv_transpose(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, w, bias = operands[0], operands[1], _arg(operands, 2)
    rank = cx.rank(0)
    if rank not in (3, 4, 5):
        raise cx.error(f"has a rank-{rank} input; only 1-D, 2-D and 3-D transposed convolutions are lowered")
    in_shape, w_shape = cx.static_shape(0), cx.static_shape(1)
    kernel = [int(k) for k in cx.param("kernel_shape", w_shape[2:])]
    strides, dilations = _spatial_params(cx, kernel)
    group = int(cx.param("group", 1))
    count = len(kernel)
    out_padding = [int(p) for p in cx.param("output_padding", (0,) * count)]
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    full = [(n - 1) * s + span for n, s, span in zip(in_shape[2:], strides, spans, strict=True)]
    out_spatial = cx.out_shape(0)[2:]
    auto_pad = cx.param("auto_pad", "NOTSET")
    if cx.param("output_shape") is not None or auto_pad not in ("NOTSET", ""):
        # The pads follow from the requested size; onnxruntime puts the odd cell at the end for
        # SAME_UPPER (and NOTSET) and at the beginning for SAME_LOWER.
        pads = []
        for size, extra, want in zip(full, out_padding, out_spatial, strict=True):
            total = size + extra - want
            small, large = total // 2, total - total // 2
            pads.append((large, small) if auto_pad == "SAME_LOWER" else (small, large))
    else:
        flat = [int(p) for p in cx.param("pads", (0,) * (2 * count))]
        pads = [(flat[i], flat[i + count]) for i in range(count)]
    to_last, to_first = _channels_last(rank)
    x = tf.transpose(x, to_last)
    # ONNX weights [C, M/group, k...] -> TensorFlow transposed filters [k..., M/group, C].
    w = _filters(cx, w, [*range(2, rank), 1, 0])
    batch = in_shape[0]
    per_group = w_shape[1]
    xs = tf.split(x, group, axis=-1) if group > 1 else [x]
    ws = tf.split(w, group, axis=-1) if group > 1 else [w]
    parts = [
        tf.nn.conv_transpose(xi, wi, [batch, *full, per_group], strides=strides, padding="VALID", dilations=dilations)
        for xi, wi in zip(xs, ws, strict=True)
    ]
    y = tf.concat(parts, axis=-1) if group > 1 else parts[0]
    if any(out_padding):
        y = tf.pad(y, [(0, 0), *((0, p) for p in out_padding), (0, 0)])
    index = (
        slice(None),
        *(slice(b, size + extra - e) for (b, e), size, extra in zip(pads, full, out_padding, strict=True)),
        slice(None),
    )
    y = y[index]
    if bias is not None:
        y = y + bias
    return [tf.transpose(y, to_first)]


# --------------------------------------------------------------------------- GridSample / AffineGrid


def _reflect(tf: Any, v: Any, low: float | Any, high: float | Any) -> Any:
    """Reflect ``v`` by the nearer border until it lies in ``[low, high]`` (the ONNX reference's rule)."""
    span = high - low
    below = low - v
    n_below = tf.math.floor(below / span)
    r_below = below - n_below * span
    from_below = tf.where(tf.math.floormod(n_below, 2) == 0, low + r_below, high - r_below)
    above = v - high
    n_above = tf.math.floor(above / span)
    r_above = above - n_above * span
    from_above = tf.where(tf.math.floormod(n_above, 2) == 0, high - r_above, low + r_above)
    return tf.where(v < low, from_below, tf.where(v > high, from_above, v))


@lowering("GridSample")
def _grid_sample(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, grid = operands
    rank = cx.rank(0)
    count = rank - 2
    mode = cx.param("mode", "linear" if cx.opset >= 20 else "bilinear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = cx.param("padding_mode", "zeros")
    align = bool(int(cx.param("align_corners", 0)))
    dims = [tf.cast(tf.shape(x)[2 + i], tf.float32) for i in range(count)]
    normal = tf.cast(grid, tf.float32)
    taps_per_dim = []
    for i in range(count):
        n = normal[..., count - 1 - i]  # the grid's last axis lists (x, y, z): reversed dims
        size = dims[i]
        v = (n + 1) / 2 * (size - 1) if align else ((n + 1) * size - 1) / 2
        if mode == "nearest":
            v = tf.math.round(v)  # rint: half to even
        low, high = (0.0, size - 1) if align else (-0.5, size - 0.5)
        if padding == "border":
            v = tf.where((v < low) | (v > high), tf.clip_by_value(v, 0.0, size - 1), v)
        elif padding == "reflection":
            v = _reflect(tf, v, low, high)
        if mode == "nearest":
            taps = [(v, tf.ones_like(v))]
        else:
            base = tf.math.floor(v)
            frac = v - base
            if mode == "linear":
                taps = [(base, 1 - frac), (base + 1, frac)]
            else:
                a = -0.75
                cubic = [
                    ((a * (frac + 1) - 5 * a) * (frac + 1) + 8 * a) * (frac + 1) - 4 * a,
                    ((a + 2) * frac - (a + 3)) * frac * frac + 1,
                    ((a + 2) * (1 - frac) - (a + 3)) * (1 - frac) * (1 - frac) + 1,
                    ((a * (2 - frac) - 5 * a) * (2 - frac) + 8 * a) * (2 - frac) - 4 * a,
                ]
                taps = [(base + k - 1, cubic[k]) for k in range(4)]
        resolved = []
        for position, weight in taps:
            index = tf.cast(position, tf.int32)  # the reference's int(): toward zero
            size_int = tf.shape(x)[2 + i]
            inside = (index >= 0) & (index < size_int)
            if padding == "zeros":
                weight = tf.where(inside, weight, tf.zeros_like(weight))
                index = tf.clip_by_value(index, 0, size_int - 1)
            elif padding == "border":
                index = tf.clip_by_value(index, 0, size_int - 1)
            else:
                reflected = _reflect(tf, tf.cast(index, tf.float32), low, high)
                index = tf.where(inside, index, tf.cast(reflected, tf.int32))
                index = tf.clip_by_value(index, 0, size_int - 1)
            resolved.append((index, weight))
        taps_per_dim.append(resolved)
    channels_last = tf.transpose(x, [0, *range(2, rank), 1])
    result = None
    for combo in np.ndindex(*[len(t) for t in taps_per_dim]):
        indices = tf.stack([taps_per_dim[i][k][0] for i, k in enumerate(combo)], axis=-1)
        weight = taps_per_dim[0][combo[0]][1]
        for i, k in enumerate(combo[1:], start=1):
            weight = weight * taps_per_dim[i][k][1]
        values = tf.gather_nd(channels_last, indices, batch_dims=1)  # [N, out..., C]
        term = values * tf.cast(weight, x.dtype)[..., None]
        result = term if result is None else result + term
    assert result is not None, "every axis has a tap: one combination at least"
    out_rank = result.shape.rank
    return [tf.transpose(result, [0, out_rank - 1, *range(1, out_rank - 1)])]


@lowering("AffineGrid")
def _affine_grid(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    theta, size = operands
    align = bool(int(cx.param("align_corners", 0)))
    count = _vector_length(cx, 1) - 2
    size = tf.cast(size, tf.int32)
    axes = []
    for i in range(count):  # spatial dims in (x, y, z) order: the last size first
        length = size[2 + count - 1 - i]
        steps = tf.cast(tf.range(length), theta.dtype)
        span = tf.cast(length, theta.dtype)
        if align:
            axes.append(tf.where(length > 1, steps * 2 / tf.maximum(span - 1, 1) - 1, tf.zeros_like(steps)))
        else:
            axes.append((steps * 2 + 1) / span - 1)
    mesh = tf.meshgrid(*reversed(axes), indexing="ij")  # [D, H, W] order
    coords = tf.stack([*reversed(mesh), tf.ones_like(mesh[0])], axis=-1)  # (x, y[, z], 1)
    flat = tf.reshape(coords, [-1, count + 1])
    grid = tf.linalg.matmul(flat[None], theta, transpose_b=True)  # [N, points, count]
    shape = tf.concat([size[:1], size[2:], [count]], axis=0)
    return [tf.reshape(grid, shape)]


@lowering("ConvInteger")
def _conv_integer(cx: OpContext, operands: list[Any]) -> list[Any]:
    """``Conv`` of zero-point-shifted 8-bit operands, exact in float64, as int32."""
    tf = cx.tf
    x, w = tf.cast(operands[0], tf.float64), tf.cast(operands[1], tf.float64)
    x_zero, w_zero = _arg(operands, 2), _arg(operands, 3)
    if x_zero is not None:
        x = x - tf.cast(x_zero, tf.float64)
    if w_zero is not None:
        zero = tf.cast(w_zero, tf.float64)
        w = w - (tf.reshape(zero, [-1] + [1] * (cx.rank(1) - 1)) if cx.rank(3) == 1 else zero)
    return [tf.cast(tf.math.round(_lower_conv(cx, [x, w])[0]), tf.int32)]
