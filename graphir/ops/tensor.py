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
from typing import Any, cast

import numpy as np

from graphir.attributes import DenseTensor
from graphir.ops.lower_context import (
    OpContext,
    _arg,
    _axes_or_tensor,
    _int_vector,
    _norm_axis,
    _tf_fn,
    _vector_length,
)
from graphir.ops.registry import Lowering, cost, lowering
from graphir.ops.work import _copy, _gather, _over_input, _produce, _reduce, _scatter, _slice, _zero
from graphir.types import is_static_shape

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
    return [cx.tf.concat(operands, axis=cx.axis(int(cx.param("axis"))))]


@lowering("Split")
def _lower_split(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    axis = cx.axis(int(cx.param("axis", 0)))
    count = len(cx.node.outputs)
    sizes: Any = cx.param("split") if cx.opset < 13 else _int_vector(cx, operands, 1)
    if sizes is None:
        shapes = [cx.node.outputs[k].type.shape for k in range(count)]
        if all(s is not None and isinstance(s[axis], int) for s in shapes):
            sizes = [int(cast(int, s[axis])) for s in shapes if s is not None]  # (all are: checked above)
        else:  # equal parts, the last one smaller (opset 18's num_outputs): ceil(dim / count) each
            dim = tf.shape(operands[0], out_type=tf.int64)[axis]
            chunk = (dim + count - 1) // count
            # min(chunk, what is left), never negative: the same sizes wherever ONNX's rule is
            # valid, and sizes that sum to dim where it is not (a branch tf.cond traces but never runs).
            left = dim - chunk * tf.range(count, dtype=tf.int64)
            sizes = tf.clip_by_value(left, tf.zeros([], tf.int64), chunk)
    elif isinstance(sizes, (list, tuple)):
        sizes = [int(v) for v in sizes]
    return list(tf.split(operands[0], sizes, axis=axis, num=count))


@lowering("Reshape")
def _reshape(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, shape = operands[0], tf.cast(operands[1], tf.int64)
    if int(cx.param("allowzero", 0)):
        return [tf.reshape(x, shape)]
    # A 0 in the target shape copies the input's dimension at that position.
    target_shape = cx.in_type(1).shape
    count: Any = target_shape[0] if is_static_shape(target_shape) else None
    if count is None:
        count = tf.size(shape)  # a shape computed at run time
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
    tf = cx.tf
    axes = _axes_or_tensor(cx, operands, 13)
    if axes is None:
        raise cx.error("has no axes")
    x = operands[0]
    if isinstance(axes, list):
        for axis in sorted(cx.axis(a, 0, len(axes)) for a in axes):
            x = tf.expand_dims(x, axis)
        return [x]
    # Axes computed at run time: the result's rank is static, its shape is built from the mask of new axes.
    out_rank = cx.rank(0) + _vector_length(cx, 1)
    axes = tf.where(axes < 0, axes + out_rank, axes)
    new = tf.reduce_any(tf.equal(tf.range(out_rank, dtype=tf.int64)[:, None], axes[None, :]), axis=1)
    source = tf.concat([[1], tf.shape(x, out_type=tf.int64)], axis=0)
    picks = tf.math.cumsum(tf.cast(tf.logical_not(new), tf.int64))  # 1-based position in the input shape
    shape = tf.where(new, tf.ones([out_rank], tf.int64), tf.gather(source, picks))
    return [tf.reshape(x, shape)]


@lowering("Squeeze")
def _squeeze(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    axes = _axes_or_tensor(cx, operands, 13)
    if axes is None:
        return [tf.squeeze(operands[0])]
    if isinstance(axes, list):
        return [tf.squeeze(operands[0], axis=[_norm_axis(a, cx.rank(0)) for a in axes])]
    rank = cx.rank(0)
    axes = tf.where(axes < 0, axes + rank, axes)
    dropped = tf.reduce_any(tf.equal(tf.range(rank, dtype=tf.int64)[:, None], axes[None, :]), axis=1)
    shape = tf.boolean_mask(tf.shape(operands[0], out_type=tf.int64), tf.logical_not(dropped))
    return [tf.reshape(operands[0], shape)]


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
    value = params.get("value")
    if isinstance(value, DenseTensor):
        return [tf.constant(value.numpy())]
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
    "ReduceL1": "math.reduce_sum",
    "ReduceL2": "math.reduce_sum",
    "ReduceSumSquare": "math.reduce_sum",
    "ReduceLogSum": "math.reduce_sum",
    "ReduceLogSumExp": "math.reduce_logsumexp",
}
_REDUCE_BOOL = {"ReduceMax": "math.reduce_any", "ReduceMin": "math.reduce_all"}


def _reduce_input(tf: Any, op_type: str, x: Any) -> Any:
    if op_type == "ReduceL1":
        return tf.math.abs(x) if not (x.dtype.is_integer and x.dtype.is_unsigned) else x
    if op_type in ("ReduceL2", "ReduceSumSquare"):
        return x * x
    return x


def _reduce_output(tf: Any, op_type: str, y: Any) -> Any:
    if op_type == "ReduceL2":
        return tf.cast(tf.math.sqrt(tf.cast(y, tf.float64)), y.dtype) if y.dtype.is_integer else tf.math.sqrt(y)
    if op_type == "ReduceLogSum":
        return tf.math.log(y)
    return y


def _make_reduce(path: str, op_type: str) -> Converter:
    def convert(cx: OpContext, operands: list[Any]) -> list[Any]:
        tf = cx.tf
        x = operands[0]
        # ReduceSum takes axes as an input from opset 13, the others from opset 18.
        axes = _axes_or_tensor(cx, operands, 13 if op_type == "ReduceSum" else 18)
        keepdims = bool(int(cx.param("keepdims", 1)))
        noop = int(cx.param("noop_with_empty_axes", 0))
        fn = _tf_fn(tf, _REDUCE_BOOL[op_type] if x.dtype == tf.bool and op_type in _REDUCE_BOOL else path)
        source = _reduce_input(tf, op_type, x)

        def reduce(axis: Any) -> Any:
            return _reduce_output(tf, op_type, fn(source, axis=axis, keepdims=keepdims))

        if axes is None or isinstance(axes, list):
            if not axes:
                if noop and axes is not None:
                    return [tf.identity(x)]
                return [reduce(None)]
            return [reduce([_norm_axis(a, cx.rank(0)) for a in axes])]
        # Axes computed at run time: an empty tensor means all axes (or none with noop_with_empty_axes).
        length = cx.maybe_shape(1)
        if length is not None and length[0] is not None and length[0] > 0:
            return [reduce(axes)]
        if length is not None and length[0] == 0:
            return [tf.identity(x) if noop else reduce(None)]
        if noop:
            return [tf.cond(tf.size(axes) > 0, lambda: reduce(axes), lambda: tf.identity(x))]
        every = tf.range(tf.rank(x, name="rank"), dtype=tf.int64)
        return [reduce(tf.cond(tf.size(axes) > 0, lambda: axes, lambda: every))]

    return convert


for _name, _path in _REDUCE.items():
    lowering(_name)(_make_reduce(_path, _name))


@lowering("Tile")
def _tile(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    if cx.opset < 6:
        raise cx.error("before opset 6 (tiles/axis inputs) is not supported by the TensorFlow lowering")
    return [tf.tile(operands[0], tf.cast(operands[1], tf.int64))]


def _edge_pad(tf: Any, x: Any, pads: Sequence[tuple[Any, Any]], wrap: bool = False) -> Any:
    """Pad by repeating the border values (ONNX ``edge``) or by wrapping around (``wrap``), axis by axis."""
    for axis, (begin, end) in enumerate(pads):
        if isinstance(begin, int) and isinstance(end, int) and begin == 0 and end == 0:
            continue
        size = tf.shape(x, out_type=tf.int64)[axis]
        index = tf.range(-tf.cast(begin, tf.int64), size + tf.cast(end, tf.int64))
        index = tf.math.floormod(index, size) if wrap else tf.clip_by_value(index, 0, size - 1)
        x = tf.gather(x, index, axis=axis)
    return x


@lowering("Pad")
def _lower_pad(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    rank = cx.rank(0)
    mode = cx.param("mode", "constant")
    fill: Any = None
    if cx.opset < 11:
        flat: Any = [int(p) for p in cx.param("pads", cx.param("paddings", ()))]
        fill = float(cx.param("value", 0.0))
        axes: Any = list(range(rank))
    else:
        flat = _int_vector(cx, operands, 1)
        value = _arg(operands, 2)
        fill = None if value is None else tf.reshape(tf.cast(value, x.dtype), [])
        axes = _int_vector(cx, operands, 3)
        if axes is None:
            axes = list(range(rank))
    if isinstance(axes, list) and isinstance(flat, list):
        count = len(axes)
        if len(flat) != 2 * count:
            raise cx.error(f"has {len(flat)} pads for {count} axes")
        static = [(0, 0)] * rank
        for k, axis in enumerate(axes):
            static[_norm_axis(axis, rank)] = (flat[k], flat[k + count])
        begins = tf.constant([b for b, _ in static], tf.int64)
        ends = tf.constant([e for _, e in static], tf.int64)
    else:
        count = len(axes) if isinstance(axes, list) else _vector_length(cx, 3)
        flat = tf.constant(flat, tf.int64) if isinstance(flat, list) else flat
        axes_t = tf.constant(axes, tf.int64) if isinstance(axes, list) else axes
        axes_t = tf.where(axes_t < 0, axes_t + rank, axes_t)[:, None]
        begins = tf.scatter_nd(axes_t, flat[:count], [rank])
        ends = tf.scatter_nd(axes_t, flat[count:], [rank])
        static = None
    grow = tf.stack([tf.maximum(begins, 0), tf.maximum(ends, 0)], axis=1)
    if mode == "constant":
        x = tf.pad(x, grow, constant_values=0 if fill is None else fill)
    elif mode == "reflect":
        x = tf.pad(x, grow, mode="REFLECT")
    elif mode in ("edge", "wrap"):
        pads = (
            [(grow[k, 0], grow[k, 1]) for k in range(rank)]
            if static is None
            else [(max(b, 0), max(e, 0)) for b, e in static]
        )
        x = _edge_pad(tf, x, pads, wrap=mode == "wrap")
    else:
        raise cx.error(f"has mode '{mode}', which the TensorFlow lowering does not support")
    if static is None or any(b < 0 or e < 0 for b, e in static):  # negative pads crop
        crop_begin, crop_end = tf.maximum(-begins, 0), tf.maximum(-ends, 0)
        size = tf.shape(x, out_type=tf.int64) - crop_begin - crop_end
        x = tf.slice(x, crop_begin, size)
    return [x]


@lowering("Slice")
def _lower_slice(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    if cx.opset < 10:
        starts: Any = [int(v) for v in cx.param("starts")]
        ends: Any = [int(v) for v in cx.param("ends")]
        axes: Any = [int(v) for v in cx.param("axes", range(len(starts)))]
        steps: Any = [1] * len(starts)
    else:
        starts, ends = _int_vector(cx, operands, 1), _int_vector(cx, operands, 2)
        axes, steps = _int_vector(cx, operands, 3), _int_vector(cx, operands, 4)
    shape = cx.maybe_shape(0)
    rank = cx.rank(0)
    known = shape is not None and all(d is not None for d in shape)
    if all(isinstance(v, list) or v is None for v in (starts, ends, axes, steps)) and known:
        axes = list(range(len(starts))) if axes is None else axes
        steps = [1] * len(starts) if steps is None else steps
        index = [slice(None)] * rank
        for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
            if step == 0:
                raise cx.error("has a zero step")
            axis = _norm_axis(axis, rank)
            begin, stop, stride = slice(start, end, step).indices(cast(tuple[int, ...], shape)[axis])  # known
            # slice.indices gives stop -1 for "before index 0" with a negative step: an end mask.
            index[axis] = slice(begin, None if stop < 0 else stop, stride)
        return [operands[0][tuple(index)]]
    # Starts, ends, axes or steps computed at run time: gather the selected indices axis by axis.
    count = len(starts) if isinstance(starts, list) else _vector_length(cx, 1)

    def item(values: Any, k: int, default: int | None) -> Any:
        if values is None:
            return default if default is not None else k
        return values[k]

    x = operands[0]
    for k in range(count):
        axis = item(axes, k, None)
        if isinstance(axis, int):
            axis = _norm_axis(axis, rank)
        else:
            axis = tf.where(axis < 0, axis + rank, axis)
        dim = tf.shape(x, out_type=tf.int64)[axis]
        start = tf.cast(item(starts, k, 0), tf.int64)
        end = tf.cast(item(ends, k, 0), tf.int64)
        step = tf.cast(item(steps, k, 1), tf.int64)
        start = tf.where(start < 0, start + dim, start)
        end = tf.where(end < 0, end + dim, end)
        forward = step > 0
        start = tf.where(forward, tf.clip_by_value(start, 0, dim), tf.clip_by_value(start, 0, dim - 1))
        end = tf.where(forward, tf.clip_by_value(end, 0, dim), tf.clip_by_value(end, -1, dim - 1))
        x = tf.gather(x, tf.range(start, end, step), axis=axis)
    return [x]


@lowering("Expand")
def _expand(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, shape = operands[0], tf.cast(operands[1], tf.int64)
    target = tf.broadcast_dynamic_shape(tf.shape(x, out_type=tf.int64), shape)  # bidirectional broadcast
    return [tf.broadcast_to(x, target)]


@lowering("Size")
def _size(cx: OpContext, operands: list[Any]) -> list[Any]:
    return [cx.tf.size(operands[0], out_type=cx.tf.int64)]


@lowering("Range")
def _range(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    # ONNX wants scalars; exporters also pass 1-element vectors, which onnxruntime accepts.
    start, limit, delta = (tf.reshape(v, []) for v in operands)
    dtype = start.dtype
    if dtype in (tf.int8, tf.int16, tf.uint8, tf.uint16, tf.uint32, tf.uint64):
        wide = [tf.cast(v, tf.int64) for v in (start, limit, delta)]
        return [tf.cast(tf.range(*wide), dtype)]
    return [tf.range(start, limit, delta)]
