"""Lowerings of the indexing and rearranging ops of the tensor family (split from graphir.ops.tensor).

ArgMax/ArgMin, GatherElements/ND, ScatterElements/ND, Trilu, CumSum/CumProd, OneHot, TopK, EyeLike,
Depth/SpaceToDepth, Compress, NonZero, ReverseSequence and the other ops after them.

Costs for these ops live with the rest of the tensor family in :mod:`graphir.ops.tensor`; only
their lowerings are here (each receives the ``tensorflow`` module in ``cx.tf``).
"""

# The op families share the package-private helpers of graphir.ops.work, split_plan and lower_context.
# pyright: reportPrivateUsage=false
from __future__ import annotations

from typing import Any

import numpy as np

from graphir.ops.lower_context import (
    OpContext,
    _arg,
    _norm_axis,
    _onnx_elem_dtype,
)
from graphir.ops.registry import Lowering, lowering

Converter = Lowering


def _arg_extreme(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    rank = cx.rank(0)
    axis = _norm_axis(int(cx.param("axis", 0)), rank)
    keepdims = bool(int(cx.param("keepdims", 1)))
    fn = tf.math.argmax if cx.node.op == "onnx.ArgMax" else tf.math.argmin
    if x.dtype == tf.bool:
        x = tf.cast(x, tf.int32)
    if int(cx.param("select_last_index", 0)):
        size = tf.shape(x, out_type=tf.int64)[axis]
        index = size - 1 - fn(tf.reverse(x, [axis]), axis=axis, output_type=tf.int64)
    else:
        index = fn(x, axis=axis, output_type=tf.int64)
    return [tf.expand_dims(index, axis) if keepdims else index]


lowering("ArgMax", "ArgMin")(_arg_extreme)


def _element_coordinates(tf: Any, indices: Any, axis: int, rank: int) -> Any:
    """Full coordinates ``[..., rank]`` for ``GatherElements``/``ScatterElements``.

    The grid of ``indices``' shape, with the ``axis`` coordinate replaced by the indices themselves.
    """
    shape = tf.shape(indices, out_type=tf.int64)
    grid = tf.meshgrid(*[tf.range(shape[k]) for k in range(rank)], indexing="ij")
    grid[axis] = indices
    return tf.stack(grid, axis=-1)


def _wrap_negative(tf: Any, indices: Any, size: Any) -> Any:
    indices = tf.cast(indices, tf.int64)
    return tf.where(indices < 0, indices + tf.cast(size, tf.int64), indices)


@lowering("GatherElements")
def _gather_elements(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    data, indices = operands
    rank = cx.rank(0)
    axis = _norm_axis(int(cx.param("axis", 0)), rank)
    indices = _wrap_negative(tf, indices, tf.shape(data)[axis])
    return [tf.gather_nd(data, _element_coordinates(tf, indices, axis, rank))]


def _scatter_into(tf: Any, reduction: str, data: Any, coords: Any, updates: Any) -> Any:
    if reduction == "add":
        return tf.tensor_scatter_nd_add(data, coords, updates)
    if reduction == "max":
        return tf.tensor_scatter_nd_max(data, coords, updates)
    if reduction == "min":
        return tf.tensor_scatter_nd_min(data, coords, updates)
    if reduction == "mul":  # the product of every update per position, times the data there
        flat = tf.reshape(tf.range(tf.size(data, out_type=tf.int64)), tf.shape(data, out_type=tf.int64))
        positions = tf.reshape(tf.gather_nd(flat, coords), [-1])
        factors = tf.math.unsorted_segment_prod(tf.reshape(updates, [-1]), positions, tf.size(data, out_type=tf.int64))
        return data * tf.reshape(factors, tf.shape(data))
    return tf.tensor_scatter_nd_update(data, coords, updates)


@lowering("ScatterElements", "Scatter")
def _scatter_elements(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    data, indices, updates = operands
    rank = cx.rank(0)
    axis = _norm_axis(int(cx.param("axis", 0)), rank)
    indices = _wrap_negative(tf, indices, tf.shape(data)[axis])
    coords = _element_coordinates(tf, indices, axis, rank)
    return [_scatter_into(tf, cx.param("reduction", "none"), data, coords, updates)]


@lowering("ScatterND")
def _scatter_nd(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    data, indices, updates = operands
    return [_scatter_into(tf, cx.param("reduction", "none"), data, tf.cast(indices, tf.int64), updates)]


@lowering("GatherND")
def _gather_nd(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    return [tf.gather_nd(operands[0], tf.cast(operands[1], tf.int64), batch_dims=int(cx.param("batch_dims", 0)))]


@lowering("Trilu")
def _trilu(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    k = tf.constant(0, tf.int64) if _arg(operands, 1) is None else tf.reshape(tf.cast(operands[1], tf.int64), [])
    shape = tf.shape(x, out_type=tf.int64)
    offset = tf.range(shape[-1])[None, :] - tf.range(shape[-2])[:, None]  # j - i
    keep = offset >= k if int(cx.param("upper", 1)) else offset <= k
    return [tf.where(keep, x, tf.zeros_like(x))]


@lowering("CumSum", "CumProd")
def _cumulative(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    fn = tf.math.cumsum if cx.node.op == "onnx.CumSum" else tf.math.cumprod
    axis = tf.reshape(tf.cast(operands[1], tf.int32), [])
    exclusive, reverse = bool(int(cx.param("exclusive", 0))), bool(int(cx.param("reverse", 0)))
    return [fn(operands[0], axis=axis, exclusive=exclusive, reverse=reverse)]


@lowering("OneHot")
def _one_hot(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    indices, depth, values = operands
    depth = tf.cast(tf.reshape(depth, []), tf.int64)
    indices = tf.cast(indices, tf.int64)
    indices = tf.where(indices < 0, indices + depth, indices)
    axis = int(cx.param("axis", -1))
    axis = axis + cx.rank(0) + 1 if axis < 0 else axis
    return [tf.one_hot(indices, tf.cast(depth, tf.int32), on_value=values[1], off_value=values[0], axis=axis)]


@lowering("TopK")
def _top_k(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    rank = cx.rank(0)
    axis = _norm_axis(int(cx.param("axis", -1)), rank)
    k = tf.cast(tf.reshape(operands[1], []), tf.int32) if cx.opset >= 10 else int(cx.param("k"))
    perm = [*range(axis), *range(axis + 1, rank), axis]
    moved = tf.transpose(x, perm) if axis != rank - 1 else x
    largest = bool(int(cx.param("largest", 1)))
    values, indices = tf.math.top_k(moved if largest else -moved, k=k, sorted=True)
    if not largest:
        values = -values
    if axis != rank - 1:
        inverse = [perm.index(j) for j in range(rank)]
        values, indices = tf.transpose(values, inverse), tf.transpose(indices, inverse)
    return [values, tf.cast(indices, tf.int64)]


@lowering("EyeLike")
def _eye_like(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    dtype = x.dtype if cx.param("dtype") is None else _onnx_elem_dtype(tf, int(cx.param("dtype")))
    shape = tf.shape(x, out_type=tf.int64)
    offset = tf.range(shape[1])[None, :] - tf.range(shape[0])[:, None]
    return [tf.cast(tf.equal(offset, int(cx.param("k", 0))), dtype)]


@lowering("DepthToSpace")
def _depth_to_space(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    bs = int(cx.param("blocksize"))
    b, c, h, w = (tf.shape(x)[k] for k in range(4))
    if cx.param("mode", "DCR") == "CRD":
        tmp = tf.transpose(tf.reshape(x, tf.stack([b, c // (bs * bs), bs, bs, h, w])), [0, 1, 4, 2, 5, 3])
    else:
        tmp = tf.transpose(tf.reshape(x, tf.stack([b, bs, bs, c // (bs * bs), h, w])), [0, 3, 4, 1, 5, 2])
    return [tf.reshape(tmp, tf.stack([b, c // (bs * bs), h * bs, w * bs]))]


@lowering("SpaceToDepth")
def _space_to_depth(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    bs = int(cx.param("blocksize"))
    b, c, h, w = (tf.shape(x)[k] for k in range(4))
    order = [0, 1, 3, 5, 2, 4] if cx.param("mode", "DCR") == "CRD" else [0, 3, 5, 1, 2, 4]
    tmp = tf.transpose(tf.reshape(x, tf.stack([b, c, h // bs, bs, w // bs, bs])), order)
    return [tf.reshape(tmp, tf.stack([b, c * bs * bs, h // bs, w // bs]))]


@lowering("Compress")
def _compress(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, condition = operands
    axis = cx.param("axis")
    if axis is None:
        x, axis = tf.reshape(x, [-1]), 0
    else:
        axis = _norm_axis(int(axis), cx.rank(0))
    count = tf.minimum(tf.size(condition), tf.shape(x)[axis])  # a shorter condition selects a prefix
    x = tf.gather(x, tf.range(count), axis=axis)
    return [tf.boolean_mask(x, tf.cast(condition[:count], tf.bool), axis=axis)]


@lowering("NonZero")
def _non_zero(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    return [tf.transpose(tf.where(tf.not_equal(x, tf.zeros([], x.dtype))))]


@lowering("ReverseSequence")
def _reverse_sequence(cx: OpContext, operands: list[Any]) -> list[Any]:
    time_axis, batch_axis = int(cx.param("time_axis", 0)), int(cx.param("batch_axis", 1))
    lengths = cx.tf.cast(operands[1], cx.tf.int64)
    return [cx.tf.reverse_sequence(operands[0], lengths, seq_axis=time_axis, batch_axis=batch_axis)]


@lowering("Unique")
def _unique(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    if cx.param("axis") is not None:
        raise cx.error("with an axis is not supported by the TensorFlow lowering (flattened input only)")
    flat = tf.reshape(operands[0], [-1])
    values, inverse = tf.unique(flat, out_idx=tf.int64)  # in order of first occurrence
    count = tf.size(values, out_type=tf.int64)
    first = tf.math.unsorted_segment_min(tf.range(tf.size(flat, out_type=tf.int64)), inverse, count)
    counts = tf.math.unsorted_segment_sum(tf.ones_like(inverse), inverse, count)
    if int(cx.param("sorted", 1)):
        order = tf.argsort(values, stable=True)
        rank = tf.math.invert_permutation(order)
        values, first, counts = tf.gather(values, order), tf.gather(first, order), tf.gather(counts, order)
        inverse = tf.cast(tf.gather(rank, inverse), tf.int64)
    return cx.present([values, first, inverse, counts])


@lowering("CenterCropPad")
def _center_crop_pad(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, shape = operands[0], tf.cast(operands[1], tf.int64)
    rank = cx.rank(0)
    axes = [_norm_axis(int(a), rank) for a in cx.param("axes", range(rank))]
    for k, axis in enumerate(axes):
        dim = tf.shape(x, out_type=tf.int64)[axis]
        target = shape[k]
        crop = tf.maximum(dim - target, 0)
        x = tf.gather(x, tf.range(crop // 2, crop // 2 + tf.minimum(dim, target)), axis=axis)
        pad = tf.maximum(target - dim, 0)
        paddings = tf.scatter_nd([[axis]], tf.stack([[pad // 2, pad - pad // 2]]), [rank, 2])
        x = tf.pad(x, paddings)
    return [x]


# ----------------------------------------------------------------- Resize / Upsample


def _keys_cubic(tf: Any, x: Any, a: float) -> Any:
    """Keys' cubic convolution kernel with coefficient ``a`` (zero for ``|x| >= 2``)."""
    x = tf.math.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return tf.where(x <= 1, near, tf.where(x < 2, far, tf.zeros_like(x)))


def _source_coordinates(tf: Any, mode: str, y: Any, scale: Any, size: Any, out: Any, roi: Any) -> tuple[Any, Any]:
    """ONNX ``coordinate_transformation_mode``: output positions ``y`` -> input coordinates (float64).

    Also returns, for ``tf_crop_and_resize``, the mask of positions outside the input (else ``None``).
    """
    width = scale * size  # the output length before truncation
    one = tf.equal(width, 1.0)
    if mode == "align_corners":
        return tf.where(
            one, tf.zeros_like(y), y * (size - 1) / tf.where(one, tf.constant(2.0, tf.float64), width - 1)
        ), None
    if mode == "asymmetric":
        return y / scale, None
    if mode == "tf_crop_and_resize":
        start, end = roi
        inner = y * (end - start) * (size - 1) / tf.where(one, tf.constant(2.0, tf.float64), width - 1)
        x = tf.where(one, tf.fill(tf.shape(y), (end - start) * (size - 1) / 2), inner) + start * (size - 1)
        return x, tf.logical_or(x < 0, x > size - 1)
    if mode == "pytorch_half_pixel":
        return tf.where(one, tf.fill(tf.shape(y), tf.constant(-0.5, tf.float64)), (y + 0.5) / scale - 0.5), None
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5, None
    if mode == "half_pixel_symmetric":
        adjustment = tf.cast(out, tf.float64) / width
        offset = size / 2 * (1 - adjustment)
        return offset + (y + 0.5) / scale - 0.5, None
    raise ValueError(f"coordinate_transformation_mode '{mode}'")


def _resize_axis(cx: OpContext, x: Any, axis: int, scale: Any, out: Any, roi: Any, taps: list[int]) -> Any:
    """Resize float64 ``x`` along ``axis`` to ``out`` positions, as the ONNX reference does (separably)."""
    tf = cx.tf
    mode = cx.param("mode", "nearest")
    size_int = tf.shape(x, out_type=tf.int64)[axis]
    size = tf.cast(size_int, tf.float64)
    y = tf.range(tf.cast(out, tf.int64), dtype=tf.int64)
    y = tf.cast(y, tf.float64)
    transform = cx.param("coordinate_transformation_mode", "half_pixel")
    if cx.node.op == "onnx.Upsample" or cx.opset < 11:
        transform = "asymmetric"
    source, outside = _source_coordinates(tf, transform, y, scale, size, out, roi)
    base = tf.math.ceil(source) - 1  # the reference's neighbours: ratio in (0, 1]
    ratio = source - base
    offsets = tf.constant(taps, tf.float64)
    index = base[:, None] + offsets[None, :]  # [out, taps]
    if mode == "nearest":
        nearest = cx.param("nearest_mode", "round_prefer_floor")
        if cx.node.op == "onnx.Upsample" or cx.opset < 11:
            nearest = "floor"
        whole = tf.equal(ratio, 1.0)
        if nearest == "round_prefer_floor":
            upper = ratio > 0.5
        elif nearest == "round_prefer_ceil":
            upper = ratio >= 0.5
        elif nearest == "floor":
            upper = whole
        else:
            upper = tf.ones_like(whole)
        upper = tf.logical_or(upper, whole)
        weights = tf.stack([tf.cast(tf.logical_not(upper), tf.float64), tf.cast(upper, tf.float64)], axis=1)
    else:
        stretch = tf.minimum(scale, 1.0) if int(cx.param("antialias", 0)) else tf.constant(1.0, tf.float64)
        distance = (offsets[None, :] - ratio[:, None]) * stretch
        if mode == "linear":
            weights = tf.clip_by_value(1 - tf.math.abs(distance), 0.0, 1.0)
        elif mode == "cubic":
            weights = _keys_cubic(tf, distance, float(cx.param("cubic_coeff_a", -0.75)))
        else:
            raise cx.error(f"has mode '{mode}'")
        weights = weights / tf.reduce_sum(weights, axis=1, keepdims=True)
    if int(cx.param("exclude_outside", 0)):
        weights = tf.where(tf.logical_or(index < 0, index >= size), tf.zeros_like(weights), weights)
        total = tf.reduce_sum(weights, axis=1, keepdims=True)
        weights = weights / tf.where(total == 0, tf.ones_like(total), total)
    index = tf.cast(tf.clip_by_value(index, 0, size - 1), tf.int64)
    rank = x.shape.rank
    gathered = tf.gather(x, index, axis=axis)  # [..., out, taps, ...]
    shape = [1] * axis + [-1, len(taps)] + [1] * (rank - axis - 1)
    result = tf.reduce_sum(gathered * tf.reshape(weights, shape), axis=axis + 1)
    if outside is not None:
        mask = tf.reshape(outside, [1] * axis + [-1] + [1] * (rank - axis - 1))
        fill = tf.constant(float(cx.param("extrapolation_value", 0.0)), tf.float64)
        result = tf.where(mask, fill, result)
    return result


@lowering("Resize", "Upsample")
def _resize(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    rank = cx.rank(0)
    if cx.node.op == "onnx.Upsample" or cx.opset < 11:
        if cx.node.op == "onnx.Upsample" and cx.opset < 9:
            scales, sizes, roi = tf.constant(list(cx.param("scales")), tf.float64), None, None
        else:
            scales, sizes, roi = tf.cast(operands[1], tf.float64), None, None
    else:
        roi, scales, sizes = _arg(operands, 1), _arg(operands, 2), _arg(operands, 3)
        if scales is not None and cx.maybe_shape(2) == (0,):
            scales = None
        if roi is not None and cx.maybe_shape(1) == (0,):
            roi = None
        scales = None if scales is None else tf.cast(scales, tf.float64)
    axes = [_norm_axis(int(a), rank) for a in cx.param("axes", range(rank))]
    count = len(axes)
    in_sizes = tf.cast(tf.shape(x, out_type=tf.int64), tf.float64)
    picked = tf.gather(in_sizes, axes)
    if scales is not None:
        per_axis = [scales[k] for k in range(count)]
        outs = [tf.floor(per_axis[k] * picked[k]) for k in range(count)]
    elif sizes is not None:
        wanted = tf.cast(tf.reshape(sizes, [-1]), tf.float64)
        ratios = wanted / picked
        policy = cx.param("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            per_axis = [ratios[k] for k in range(count)]
            outs = [wanted[k] for k in range(count)]
        else:
            common = tf.reduce_min(ratios) if policy == "not_larger" else tf.reduce_max(ratios)
            per_axis = [common] * count
            outs = [tf.floor(common * picked[k] + 0.5) for k in range(count)]
    else:
        raise cx.error("has neither scales nor sizes")
    roi_pairs: list[Any] = [None] * count
    if roi is not None:
        roi = tf.cast(tf.reshape(roi, [-1]), tf.float64)
        roi_pairs = [(roi[k], roi[count + k]) for k in range(count)]
    mode = cx.param("mode", "nearest")
    antialias = mode != "nearest" and int(cx.param("antialias", 0))
    support = {"nearest": 1, "linear": 1, "cubic": 2}.get(mode, 1)
    result = tf.cast(x, tf.float64)
    out_type = cx.node.outputs[0].type.shape
    for k, axis in enumerate(axes):
        if mode == "nearest":
            taps = [0, 1]
        elif not antialias:
            taps = list(range(1 - support, support + 1))
        else:  # the footprint widens by 1 / scale when downscaling; extra taps get weight 0
            in_dim = cx.maybe_shape(0)
            in_size = None if in_dim is None else in_dim[axis]
            out_dim = None if out_type is None else out_type[axis]
            if in_size is None or not isinstance(out_dim, int) or out_dim == 0:
                raise cx.error("with antialias needs static input and output sizes to be lowered")
            reach = support * max(1, -(-int(in_size) // out_dim)) + 1
            taps = list(range(1 - reach, reach + 1))
        result = _resize_axis(cx, result, axis, per_axis[k], outs[k], roi_pairs[k], taps)
    if x.dtype.is_integer:
        low, high = x.dtype.min, x.dtype.max
        result = tf.clip_by_value(result, float(low), float(high))
    return [tf.cast(result, x.dtype)]


@lowering("BitCast")
def _bit_cast(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    target = _onnx_elem_dtype(tf, int(cx.param("to")))
    if x.dtype == tf.bool or target == tf.bool:
        x = tf.cast(x, tf.uint8) if x.dtype == tf.bool else x
        bits = tf.bitcast(x, tf.uint8) if x.dtype != tf.uint8 else x
        return [tf.cast(bits, tf.bool) if target == tf.bool else tf.bitcast(bits, target)]
    if x.dtype.size == target.size:
        return [tf.bitcast(x, target)]
    raise cx.unsupported("a BitCast between element types of different sizes changes the shape")


def _window(cx: OpContext, operands: list[Any], a: list[float]) -> Any:
    """The cosine window ``sum_k (-1)^k a_k cos(2 pi k n / N)``: periodic (N = size) or symmetric (size - 1)."""
    tf = cx.tf
    size = tf.cast(tf.reshape(operands[0], []), tf.int64)
    periodic = int(cx.param("periodic", 1))
    n = tf.cast(tf.range(size), tf.float64)
    denominator = tf.cast(size if periodic else size - 1, tf.float64)
    window = tf.zeros_like(n)
    for k, coefficient in enumerate(a):
        window = window + ((-1) ** k) * coefficient * tf.math.cos(2 * np.pi * k * n / denominator)
    dtype = _onnx_elem_dtype(tf, int(cx.param("output_datatype", 1)))
    return tf.cast(window, dtype)


@lowering("HannWindow")
def _hann(cx: OpContext, operands: list[Any]) -> list[Any]:
    return [_window(cx, operands, [0.5, 0.5])]


@lowering("HammingWindow")
def _hamming(cx: OpContext, operands: list[Any]) -> list[Any]:
    return [_window(cx, operands, [25 / 46, 21 / 46])]


@lowering("BlackmanWindow")
def _blackman(cx: OpContext, operands: list[Any]) -> list[Any]:
    return [_window(cx, operands, [0.42, 0.5, 0.08])]


@lowering("DFT")
def _dft(cx: OpContext, operands: list[Any]) -> list[Any]:
    """ONNX DFT: real ``[..., 1]`` or complex ``[..., 2]`` signals, forward, inverse (``1/n``), one-sided."""
    tf = cx.tf
    x = operands[0]
    rank = cx.rank(0)
    inverse, onesided = bool(int(cx.param("inverse", 0))), bool(int(cx.param("onesided", 0)))
    length = _arg(operands, 1)
    if cx.opset >= 20:
        axis_value: Any = -2 if _arg(operands, 2) is None else cx.const(2)
        if axis_value is not None:
            axis_value = int(np.asarray(axis_value).reshape(-1)[0])
        else:
            axis_value = tf.reshape(tf.cast(operands[2], tf.int32), [])
    else:
        axis_value = int(cx.param("axis", 1))
    # As the reference (numpy 2): complex float32 signals transform in single precision, real ones in double.
    work = tf.float32 if x.dtype == tf.float32 and x.shape[-1] == 2 else tf.float64
    real = tf.cast(x[..., 0], work)
    imag = tf.cast(x[..., 1], work) if x.shape[-1] == 2 else tf.zeros_like(real)
    signal = tf.complex(real, imag)  # [...] without the complex axis

    def along(axis: int) -> Any:
        perm = [*range(axis), *range(axis + 1, rank - 1), axis]
        moved = tf.transpose(signal, perm)
        size = tf.shape(moved)[-1]
        if length is not None:
            n = tf.reshape(tf.cast(length, tf.int32), [])
        else:
            n = 2 * (size - 1) if inverse and onesided else size
        if inverse and onesided:
            out = tf.signal.irfft(moved, fft_length=tf.reshape(n, [1]))[..., None]
        else:
            cut = moved[..., : tf.minimum(n, size)]
            cut = tf.pad(cut, [[0, 0]] * (rank - 2) + [[0, tf.maximum(n - size, 0)]])
            spectrum = tf.signal.ifft(cut) if inverse else tf.signal.fft(cut)
            if onesided and not inverse:
                spectrum = spectrum[..., : n // 2 + 1]
            out = tf.stack([tf.math.real(spectrum), tf.math.imag(spectrum)], axis=-1)
        inverse_perm = [perm.index(k) for k in range(rank - 1)] + [rank - 1]
        return tf.cast(tf.transpose(out, inverse_perm), x.dtype)

    if isinstance(axis_value, int):
        return [along(axis_value % rank)]
    axis_value = tf.math.floormod(axis_value, rank)
    return [tf.switch_case(axis_value, [lambda k=k: along(k) for k in range(rank - 1)], default=lambda: along(0))]


@lowering("onnx.ai.onnx.ml.ArrayFeatureExtractor")
def _array_feature_extractor(cx: OpContext, operands: list[Any]) -> list[Any]:
    """Select the last axis' entries at the given indices (a 1-D input gives ``[1, k]``)."""
    tf = cx.tf
    x, indices = operands
    picked = tf.gather(x, tf.reshape(tf.cast(indices, tf.int64), [-1]), axis=-1)
    return [tf.reshape(picked, [1, -1]) if cx.rank(0) == 1 else picked]
