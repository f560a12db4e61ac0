"""Tensor plumbing and reductions (ONNX and TensorFlow): shapes, copies, slices, gathers, scatters, fills.

* **cost**: metadata-only ops (reshape, shape queries, identity, TF graph plumbing and variable
  handles) do no work; copies (concat, transpose, pad, tile...) read every input and write every
  output; slices and gathers read only what they return (``2 · |out|``, plus the indices);
  scatters write the output and read the updates; fills and ranges only write; reductions cost
  ``k · |in|`` FLOPs (``k = 1`` for sums and extrema, 2 for squared norms, 4 for log-sum-exp).
  TensorFlow's ``Sum``/``Max``/``Min``/``Mean``/``Prod`` are reductions while ONNX's are n-ary
  elementwise ops: the qualified ``tf.Sum`` definition wins over the bare ``Sum`` one.
* **lowering**: one TF op each where the semantics match. ``Unsqueeze``/``Squeeze`` read ``axes`` from an
  attribute before opset 13 and from a constant input from 13 (reductions from 13 for ``ReduceSum``,
  18 for the others); ``Reshape``'s 0 copies the input dimension unless ``allowzero``; ``Pad``'s pads
  and axes and ``Slice``'s starts, ends, axes and steps must be constants (initializers or
  ``Constant`` nodes): they are read at lowering time, not fed to TensorFlow; ``edge`` padding
  gathers clamped indices.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphir.attributes import DenseTensor
from graphir.ops.lower_context import (
    OpContext,
    _arg,
    _axes,
    _const_array,
    _norm_axis,
    _required_const,
    _tf_fn,
)
from graphir.ops.registry import Lowering, cost, lowering
from graphir.ops.work import _copy, _gather, _over_input, _produce, _reduce, _scatter, _slice, _zero

Converter = Lowering

# --------------------------------------------------------------------------- cost

cost(
    # ONNX metadata / shape ops
    *("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Shape", "Size", "Constant", "Optional"),
    *("OptionalGetElement", "OptionalHasElement", "SequenceEmpty"),
    # TF graph plumbing, shape arithmetic and variable handles
    *("ExpandDims", "Const", "Placeholder", "PlaceholderWithDefault", "NoOp", "IdentityN", "StopGradient"),
    *("PreventGradient", "Snapshot", "VarHandleOp", "VariableV2", "Variable", "ReadVariableOp", "VarIsInitializedOp"),
    *("_Arg", "_Retval", "_Send", "_Recv", "Rank", "ShapeN", "BroadcastGradientArgs", "BroadcastArgs"),
    *("ConcatOffset", "InvertPermutation", "Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond"),
    *("ControlTrigger", "Assert", "Print", "PrintV2", "EnsureShape", "DestroyResourceOp", "RefIdentity"),
    *("VariableShape", "StringFormat", "SaveV2", "RestoreV2", "MergeV2Checkpoints", "ShardedFilename"),
)(_zero)
cost(
    *("Concat", "ConcatV2", "Transpose", "ConjugateTranspose", "Pad", "PadV2", "MirrorPad", "Tile", "Expand"),
    *("BroadcastTo", "Split", "SplitV", "SplitToSequence", "Pack", "Unpack", "DepthToSpace", "SpaceToDepth"),
    *("Resize", "Upsample", "ResizeNearestNeighbor", "ResizeNearestNeighborGrad", "ReverseV2", "ReverseSequence"),
    *("DynamicStitch", "ParallelDynamicStitch", "DynamicPartition", "Trilu", "MatrixBandPart", "Compress"),
    *("StridedSliceGrad", "SliceGrad", "ConcatFromSequence", "SequenceConstruct", "SequenceAt", "SequenceInsert"),
    *("TensorListFromTensor", "TensorListStack", "TensorListSetItem", "TensorListGetItem", "TensorListReserve"),
    *("TensorArrayV3", "TensorArrayScatterV3", "TensorArrayGatherV3", "TensorArrayReadV3", "TensorArrayWriteV3"),
    *("CopyHost", "Copy", "DeepCopy", "_HostSend", "_HostRecv", "MirrorPadGrad", "Roll", "Unique", "NonZero"),
    *("CenterCropPad", "Col2Im", "AffineGrid", "GridSample", "RoiAlign", "MaxUnpool"),
)(_copy)
cost("Slice", "StridedSlice", "ResourceStridedSliceAssign")(_slice)
cost(
    *("Gather", "GatherV2", "GatherElements", "GatherND", "ResourceGather", "ResourceGatherNd", "OneHot"),
    *("EmbeddingLookup", "BatchGather", "GatherBlockQuantized"),
)(_gather)
cost(
    *("ScatterND", "ScatterElements", "Scatter", "ScatterNd", "TensorScatterUpdate", "TensorScatterAdd"),
    *("UnsortedSegmentSum", "UnsortedSegmentMax", "UnsortedSegmentMin", "SegmentSum", "SegmentMean"),
    *("ResourceScatterAdd", "ResourceScatterUpdate", "ScatterAdd", "ScatterUpdate", "SparseSegmentSum"),
    *("SparseSegmentMean", "SparseSegmentSqrtN", "SparseSegmentMeanGrad", "SparseSegmentSqrtNGrad"),
)(_scatter)
cost("ConstantOfShape", "Range", "Fill", "EyeLike", "Zeros", "Ones", "LinSpace", "Empty")(_produce(0))
cost(
    *("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ArgMax", "ArgMin"),
    *("GlobalAveragePool", "GlobalMaxPool", "Prod", "All", "Any", "BiasAddGrad", "CumSum", "Cumsum"),
    *("Cumprod", "CumulativeLogsumexp", "EuclideanNorm", "Bincount", "Histogram", "SegmentMax"),
)(_reduce(1))
cost("tf.Sum", "tf.Max", "tf.Min", "tf.Mean", "tf.Prod")(_reduce(1))
cost("ReduceSumSquare", "ReduceL2", "L2Loss", "GlobalLpPool", "Norm")(_reduce(2))
cost("ReduceLogSum", "ReduceLogSumExp")(_reduce(4))
cost("ResizeBilinear", "ResizeBicubic", "ResizeBilinearGrad", "ResizeBicubicGrad")(_over_input(8))


# --------------------------------------------------------------------------- lowering


@lowering("Concat")
def _concat(cx: OpContext, operands: list[Any]) -> list[Any]:
    return [cx.tf.concat(operands, axis=_norm_axis(int(cx.param("axis")), cx.rank(0)))]


@lowering("Split")
def _lower_split(cx: OpContext, operands: list[Any]) -> list[Any]:
    axis = _norm_axis(int(cx.param("axis", 0)), cx.rank(0))
    sizes = [cx.out_shape(k)[axis] for k in range(len(cx.node.outputs))]
    return list(cx.tf.split(operands[0], sizes, axis=axis))


@lowering("Reshape")
def _reshape(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, shape = operands[0], tf.cast(operands[1], tf.int64)
    if int(cx.param("allowzero", 0)):
        return [tf.reshape(x, shape)]
    # A 0 in the target shape copies the input's dimension at that position.
    count = cx.in_type(1).shape[0] if cx.in_type(1).is_static else None  # type: ignore[index]
    if count is None:
        raise cx.error("has a shape operand of unknown length")
    dims = tf.concat([tf.shape(x, out_type=tf.int64), tf.zeros([count], tf.int64)], axis=0)[:count]
    return [tf.reshape(x, tf.where(tf.equal(shape, 0), dims, shape))]


@lowering("Flatten")
def _flatten(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    axis = _norm_axis(int(cx.param("axis", 1)), cx.rank(0))
    shape = tf.shape(x)
    return [tf.reshape(x, tf.stack([tf.reduce_prod(shape[:axis]), tf.reduce_prod(shape[axis:])]))]


@lowering("Transpose")
def _transpose(cx: OpContext, operands: list[Any]) -> list[Any]:
    perm = cx.param("perm")
    if perm is None:
        perm = tuple(reversed(range(cx.rank(0))))
    return [cx.tf.transpose(operands[0], [int(p) for p in perm])]


@lowering("Unsqueeze")
def _unsqueeze(cx: OpContext, operands: list[Any]) -> list[Any]:
    axes = _axes(cx, operands, 13)
    if axes is None:
        raise cx.error("has no axes")
    out_rank = cx.rank(0) + len(axes)
    x = operands[0]
    for axis in sorted(_norm_axis(a, out_rank) for a in axes):
        x = cx.tf.expand_dims(x, axis)
    return [x]


@lowering("Squeeze")
def _squeeze(cx: OpContext, operands: list[Any]) -> list[Any]:
    axes = _axes(cx, operands, 13)
    if axes is None:
        return [cx.tf.squeeze(operands[0])]
    return [cx.tf.squeeze(operands[0], axis=[_norm_axis(a, cx.rank(0)) for a in axes])]


@lowering("Shape")
def _lower_shape(cx: OpContext, operands: list[Any]) -> list[Any]:
    shape = cx.tf.shape(operands[0], out_type=cx.tf.int64)
    start, end = cx.param("start"), cx.param("end")
    if start is not None or end is not None:
        shape = shape[slice(start, end)]
    return [shape]


@lowering("Gather")
def _lower_gather(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, indices = operands
    axis = _norm_axis(int(cx.param("axis", 0)), cx.rank(0))
    size = tf.shape(x, out_type=indices.dtype)[axis]
    indices = tf.where(indices < 0, indices + size, indices)  # ONNX allows negative indices
    return [tf.gather(x, indices, axis=axis)]


@lowering("ConstantOfShape")
def _constant_of_shape(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    value = cx.param("value")
    if isinstance(value, DenseTensor):
        fill = value.numpy().reshape(-1)[0]
        dtype = tf.as_dtype(fill.dtype)
    else:
        fill, dtype = np.float32(0.0), tf.float32
    return [tf.fill(tf.cast(operands[0], tf.int64), tf.constant(fill, dtype=dtype))]


@lowering("Constant")
def _constant(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    params = cx.node.params
    if isinstance(params.get("value"), DenseTensor):
        return [tf.constant(params["value"].numpy())]  # type: ignore[union-attr]
    for key, dtype in (("value_float", np.float32), ("value_int", np.int64)):
        if key in params:
            return [tf.constant(np.asarray(params[key], dtype=dtype))]
    for key, dtype in (("value_floats", np.float32), ("value_ints", np.int64)):
        if key in params:
            return [tf.constant(np.asarray(params[key], dtype=dtype).reshape(-1))]
    raise cx.error("has no value the TensorFlow lowering supports (value, value_float(s), value_int(s))")


_REDUCE: dict[str, str] = {
    "ReduceMean": "math.reduce_mean",
    "ReduceSum": "math.reduce_sum",
    "ReduceMax": "math.reduce_max",
    "ReduceMin": "math.reduce_min",
    "ReduceProd": "math.reduce_prod",
}


def _make_reduce(path: str, op_type: str) -> Converter:
    def convert(cx: OpContext, operands: list[Any]) -> list[Any]:
        # ReduceSum takes axes as an input from opset 13, the others from opset 18.
        axes = _axes(cx, operands, 13 if op_type == "ReduceSum" else 18)
        keepdims = bool(int(cx.param("keepdims", 1)))
        if axes is None or not axes:
            if int(cx.param("noop_with_empty_axes", 0)) and axes is not None:
                return [cx.tf.identity(operands[0])]
            axes = list(range(cx.rank(0)))
        axes = [_norm_axis(a, cx.rank(0)) for a in axes]
        return [_tf_fn(cx.tf, path)(operands[0], axis=axes, keepdims=keepdims)]

    return convert


for _name, _path in _REDUCE.items():
    lowering(_name)(_make_reduce(_path, _name))


@lowering("Tile")
def _tile(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    if cx.opset < 6:
        raise cx.error("before opset 6 (tiles/axis inputs) is not supported by the TensorFlow lowering")
    return [tf.tile(operands[0], tf.cast(operands[1], tf.int64))]


def _edge_pad(tf: Any, x: Any, pads: Sequence[tuple[int, int]]) -> Any:
    """Pad by repeating the border values (ONNX ``edge`` mode)."""
    for axis, (begin, end) in enumerate(pads):
        if begin == 0 and end == 0:
            continue
        size = tf.shape(x)[axis]
        index = tf.clip_by_value(tf.range(-begin, size + end), 0, size - 1)
        x = tf.gather(x, index, axis=axis)
    return x


@lowering("Pad")
def _lower_pad(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    rank = cx.rank(0)
    mode = cx.param("mode", "constant")
    if cx.opset < 11:
        flat = [int(p) for p in cx.param("pads", cx.param("paddings", ()))]
        fill: Any = float(cx.param("value", 0.0))
        axes = list(range(rank))
    else:
        flat = _required_const(cx, 1, "pads")
        value = _arg(operands, 2)
        fill = None if value is None else tf.reshape(tf.cast(value, x.dtype), [])
        axes_array = _const_array(cx, 3)
        if _arg(operands, 3) is not None and axes_array is None:
            raise cx.error("needs constant axes (input #3) to be lowered")
        axes = list(range(rank)) if axes_array is None else [_norm_axis(int(a), rank) for a in axes_array.reshape(-1)]
    count = len(axes)
    if len(flat) != 2 * count:
        raise cx.error(f"has {len(flat)} pads for {count} axes")
    pads = [(0, 0)] * rank
    for k, axis in enumerate(axes):
        pads[axis] = (flat[k], flat[k + count])
    grow = [(max(b, 0), max(e, 0)) for b, e in pads]
    if any(p != (0, 0) for p in grow):
        if mode == "constant":
            x = tf.pad(x, grow, constant_values=0 if fill is None else fill)
        elif mode == "reflect":
            x = tf.pad(x, grow, mode="REFLECT")
        elif mode == "edge":
            x = _edge_pad(tf, x, grow)
        else:
            raise cx.error(f"has mode '{mode}', which the TensorFlow lowering does not support")
    if any(b < 0 or e < 0 for b, e in pads):  # negative pads crop
        shape = cx.static_shape(0)
        index = tuple(
            slice(-min(b, 0), size + max(b, 0) + max(e, 0) + min(e, 0))
            for (b, e), size in zip(pads, shape, strict=True)
        )
        x = x[index]
    return [x]


@lowering("Slice")
def _lower_slice(cx: OpContext, operands: list[Any]) -> list[Any]:
    shape = cx.static_shape(0)
    rank = len(shape)
    if cx.opset < 10:
        starts = [int(v) for v in cx.param("starts")]
        ends = [int(v) for v in cx.param("ends")]
        axes = [int(v) for v in cx.param("axes", range(len(starts)))]
        steps = [1] * len(starts)
    else:
        starts = _required_const(cx, 1, "starts")
        ends = _required_const(cx, 2, "ends")
        axes = _required_const(cx, 3, "axes") if _arg(operands, 3) is not None else list(range(len(starts)))
        steps = _required_const(cx, 4, "steps") if _arg(operands, 4) is not None else [1] * len(starts)
    index = [slice(None)] * rank
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        if step == 0:
            raise cx.error("has a zero step")
        axis = _norm_axis(axis, rank)
        begin, stop, stride = slice(start, end, step).indices(shape[axis])
        # slice.indices gives stop -1 for "before index 0" with a negative step; that is an end mask.
        index[axis] = slice(begin, None if stop < 0 else stop, stride)
    return [operands[0][tuple(index)]]
