"""The ONNX -> TensorFlow op table used to lower ONNX-imported graphs (``onnx.<Op>`` nodes).

Each entry converts one IR node into TensorFlow ops and returns one tensor per IR result. Every
tensor keeps ONNX's layout (NCHW for images): TensorFlow's CPU convolution and pooling kernels
only accept channels-last, so :func:`_conv` and :func:`_pool` transpose to NHWC (NWC, NDHWC),
run the kernel with ``VALID`` padding after an explicit ``tf.pad`` (ONNX pads may be asymmetric),
and transpose back. Elementwise, normalisation and LRN ops work on NCHW directly by broadcasting.

Semantics follow the ONNX operator docs for the opset in the module metadata (``opset =
"ai.onnx:9"``; opset 13 when absent): ``Softmax`` coerces to 2-D before opset 13, ``Unsqueeze``
and ``Squeeze`` read ``axes`` from an attribute before 13 and from an input from 13, ``Clip`` from
attributes before 11. ``Dropout`` is the inference identity. ``graphir.split`` / ``graphir.concat``
(FastT operation splitting) split and join along their ``axis``, with the part sizes taken from the
IR types. ``Pad``'s pads and axes and ``Slice``'s starts, ends, axes and steps must be constants
(initializers or ``Constant`` nodes): they are read at lowering time, not fed to TensorFlow.
Where TensorFlow lacks a kernel variant, the lowering composes an exact equivalent: strided
*and* dilated convolutions run dense and subsample, dilated ``MaxPool`` takes the maximum of one
strided slice per window offset, ``edge`` padding gathers clamped indices, and ``ConvTranspose``
runs a VALID transposed convolution, then crops ``pads`` and appends ``output_padding``.

TensorFlow is not imported here: converters receive it through :class:`OpContext`, so importing
this module (or asking :data:`ONNX_OPS` which ops are supported) does not load TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphir.attributes import DenseTensor, numpy_dtype
from graphir.errors import BackendError, Location
from graphir.ir import Node, Value
from graphir.types import TensorType

__all__ = ["ONNX_OPS", "OpContext", "Converter", "supported_op", "tf_dtype"]

Tensor = Any
"""A ``tf.Tensor`` (TensorFlow is imported lazily, so it is not named in annotations)."""


@dataclasses.dataclass
class OpContext:
    """What a converter needs besides its operands.

    Attributes:
        tf: the ``tensorflow`` module.
        node: the IR node being lowered.
        opset: the default-domain ONNX opset of the module.
    """

    tf: Any
    node: Node
    opset: int

    def error(self, message: str) -> BackendError:
        """A one-line :class:`BackendError` about this node (naming its op and node)."""
        return BackendError(f"'{self.node.op}' {message}", Location(node=self.node.name))

    def param(self, key: str, default: Any = None) -> Any:
        """The node's param ``key`` (``default`` when absent)."""
        return self.node.params.get(key, default)

    def in_type(self, position: int) -> TensorType:
        """The IR type of ONNX input ``position`` (absent inputs already re-inserted)."""
        value = onnx_inputs(self.node)[position]
        if value is None:
            raise self.error(f"input #{position} is absent")
        return value.type

    def rank(self, position: int = 0) -> int:
        """The static rank of ONNX input ``position``; raises when it is unknown."""
        rank = self.in_type(position).rank
        if rank is None:
            raise self.error(f"input #{position} has unknown rank; lowering needs it")
        return rank

    def static_shape(self, position: int = 0) -> tuple[int, ...]:
        """The static shape of ONNX input ``position``; raises when a dimension is not a number."""
        tensor_type = self.in_type(position)
        if not tensor_type.is_static:
            raise self.error(f"input #{position} has type {tensor_type}; lowering needs a static shape")
        return tuple(int(d) for d in tensor_type.shape)  # type: ignore[union-attr, arg-type]

    def out_shape(self, position: int = 0) -> tuple[int, ...]:
        """The static shape of result ``position``; raises when it is not static."""
        tensor_type = self.node.outputs[position].type
        if not tensor_type.is_static:
            raise self.error(f"result #{position} has type {tensor_type}; lowering needs a static shape")
        return tuple(int(d) for d in tensor_type.shape)  # type: ignore[union-attr, arg-type]


Converter = Callable[[OpContext, list[Any]], list[Any]]
"""``fn(cx, operands) -> results``: operands in ONNX positions (``None`` for an absent optional input)."""

ONNX_OPS: dict[str, Converter] = {}
"""IR op name (``onnx.Conv``, ``graphir.split``) -> converter."""


def supported_op(op: str) -> bool:
    """True when ``op`` (an IR op name such as ``onnx.Conv``) is in the table."""
    return op in ONNX_OPS


def _register(*names: str) -> Callable[[Converter], Converter]:
    def decorate(fn: Converter) -> Converter:
        for name in names:
            ONNX_OPS[name if "." in name else "onnx." + name] = fn
        return fn

    return decorate


def onnx_inputs(node: Node) -> list[Value | None]:
    """The node's operands at their ONNX positions: ``None`` where ``_absent_inputs`` records a gap."""
    absent = node.params.get("_absent_inputs", ())
    if not absent:
        return list(node.inputs)
    gaps = set(absent)  # type: ignore[arg-type]
    values = iter(node.inputs)
    total = len(node.inputs) + len(gaps)
    return [None if k in gaps else next(values) for k in range(total)]


def tf_dtype(tf: Any, tensor_type: TensorType) -> Any:
    """The TensorFlow dtype of an IR tensor type; ``KeyError`` when numpy has no such type."""
    if tensor_type.dtype.short == "str":
        return tf.string
    return tf.as_dtype(np.dtype(numpy_dtype(tensor_type.dtype)))


def _onnx_elem_dtype(tf: Any, elem_type: int) -> Any:
    import onnx

    return tf.as_dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


def _arg(operands: list[Any], position: int) -> Any:
    return operands[position] if position < len(operands) else None


def _norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


# ------------------------------------------------------------------------------- elementwise

_UNARY: dict[str, str] = {
    "Relu": "nn.relu",
    "Sigmoid": "math.sigmoid",
    "Tanh": "math.tanh",
    "Exp": "math.exp",
    "Log": "math.log",
    "Sqrt": "math.sqrt",
    "Neg": "math.negative",
    "Abs": "math.abs",
    "Reciprocal": "math.reciprocal",
    "Floor": "math.floor",
    "Ceil": "math.ceil",
    "Erf": "math.erf",
    "Softplus": "math.softplus",
    "Not": "math.logical_not",
}

_BINARY: dict[str, str] = {
    "Add": "math.add",
    "Sub": "math.subtract",
    "Mul": "math.multiply",
    "Pow": "math.pow",
    "Equal": "math.equal",
    "Less": "math.less",
    "Greater": "math.greater",
    "And": "math.logical_and",
    "Or": "math.logical_or",
}

_VARIADIC: dict[str, str] = {"Sum": "math.add", "Max": "math.maximum", "Min": "math.minimum"}


def _tf_fn(tf: Any, path: str) -> Callable[..., Any]:
    target = tf
    for part in path.split("."):
        target = getattr(target, part)
    return target


def _make_unary(path: str) -> Converter:
    def convert(cx: OpContext, operands: list[Any]) -> list[Any]:
        return [_tf_fn(cx.tf, path)(operands[0])]

    return convert


def _make_binary(path: str) -> Converter:
    def convert(cx: OpContext, operands: list[Any]) -> list[Any]:
        return [_tf_fn(cx.tf, path)(operands[0], operands[1])]

    return convert


def _make_variadic(path: str) -> Converter:
    def convert(cx: OpContext, operands: list[Any]) -> list[Any]:
        fn = _tf_fn(cx.tf, path)
        result = operands[0]
        for operand in operands[1:]:
            result = fn(result, operand)  # pairwise: numpy broadcasting, unlike tf.add_n
        return [result]

    return convert


for _name, _path in _UNARY.items():
    _register(_name)(_make_unary(_path))
for _name, _path in _BINARY.items():
    _register(_name)(_make_binary(_path))
for _name, _path in _VARIADIC.items():
    _register(_name)(_make_variadic(_path))


@_register("Div")
def _div(cx: OpContext, operands: list[Any]) -> list[Any]:
    a, b = operands[0], operands[1]
    if a.dtype.is_integer:
        return [cx.tf.math.truncatediv(a, b)]  # ONNX integer division truncates toward zero
    return [cx.tf.math.divide(a, b)]


@_register("Mean")
def _mean(cx: OpContext, operands: list[Any]) -> list[Any]:
    total = _make_variadic("math.add")(cx, operands)[0]
    return [total / cx.tf.cast(len(operands), total.dtype)]


@_register("Identity", "Dropout")
def _identity(cx: OpContext, operands: list[Any]) -> list[Any]:
    # Dropout at inference is the identity. Its optional mask output is a bool tensor of all true
    # from opset 10; before, the mask has the input's type and onnxruntime (the reference) fills it
    # with zeros, which is matched here.
    results = [cx.tf.identity(operands[0])]
    if len(cx.node.outputs) > 1:
        if cx.opset >= 10:
            results.append(cx.tf.ones_like(operands[0], dtype=cx.tf.bool))
        else:
            results.append(cx.tf.zeros_like(operands[0]))
    return results


@_register("LeakyRelu")
def _leaky_relu(cx: OpContext, operands: list[Any]) -> list[Any]:
    return [cx.tf.nn.leaky_relu(operands[0], alpha=float(cx.param("alpha", 0.01)))]


@_register("Elu")
def _elu(cx: OpContext, operands: list[Any]) -> list[Any]:
    x = operands[0]
    alpha = float(cx.param("alpha", 1.0))
    return [cx.tf.where(x > 0, x, alpha * (cx.tf.math.exp(x) - 1))]


@_register("Clip")
def _clip(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    if cx.opset < 11:
        low, high = cx.param("min"), cx.param("max")
    else:
        low, high = _arg(operands, 1), _arg(operands, 2)
    if low is not None:
        x = tf.math.maximum(x, tf.cast(low, x.dtype))
    if high is not None:
        x = tf.math.minimum(x, tf.cast(high, x.dtype))
    return [x]


@_register("Cast")
def _cast(cx: OpContext, operands: list[Any]) -> list[Any]:
    return [cx.tf.cast(operands[0], _onnx_elem_dtype(cx.tf, int(cx.param("to"))))]


@_register("Softmax", "LogSoftmax")
def _softmax(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    rank = cx.rank()
    fn = tf.nn.softmax if cx.node.op == "onnx.Softmax" else tf.nn.log_softmax
    if cx.opset >= 13:
        axis = _norm_axis(int(cx.param("axis", -1)), rank)
        if axis == rank - 1:
            return [fn(x, axis=-1)]  # a non-last axis makes TF build a Rank op it never runs
        perm = [*range(axis), *range(axis + 1, rank), axis]
        inverse = [perm.index(k) for k in range(rank)]
        return [tf.transpose(fn(tf.transpose(x, perm), axis=-1), inverse)]
    # Before opset 13 the input is coerced to 2-D [prod(shape[:axis]), prod(shape[axis:])].
    axis = _norm_axis(int(cx.param("axis", 1)), rank)
    if axis == rank - 1:
        return [fn(x, axis=-1)]
    shape = tf.shape(x)
    flat = tf.reshape(x, tf.stack([tf.reduce_prod(shape[:axis]), tf.reduce_prod(shape[axis:])]))
    return [tf.reshape(fn(flat, axis=-1), shape)]


# ------------------------------------------------------------------------------- matrix products


@_register("Gemm")
def _gemm(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    a, b, c = operands[0], operands[1], _arg(operands, 2)
    y = tf.linalg.matmul(a, b, transpose_a=bool(cx.param("transA", 0)), transpose_b=bool(cx.param("transB", 0)))
    alpha, beta = float(cx.param("alpha", 1.0)), float(cx.param("beta", 1.0))
    if alpha != 1.0:
        y = y * alpha
    if c is not None:
        y = y + (c if beta == 1.0 else c * beta)
    return [y]


@_register("MatMul")
def _matmul(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    a, b = operands
    rank_a, rank_b = cx.rank(0), cx.rank(1)
    if rank_a == 1:
        a = tf.expand_dims(a, 0)
    if rank_b == 1:
        b = tf.expand_dims(b, -1)
    y = tf.linalg.matmul(a, b)
    if rank_b == 1:
        y = tf.squeeze(y, -1)
    if rank_a == 1:
        y = tf.squeeze(y, -2)
    return [y]


# ------------------------------------------------------------------------------- convolution and pooling


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


@_register("Conv")
def _conv(cx: OpContext, operands: list[Any]) -> list[Any]:
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
    w = tf.transpose(w, [*range(2, rank), 1, 0])
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


@_register("MaxPool", "AveragePool")
def _pool(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    rank = cx.rank(0)
    if rank not in (3, 4, 5):
        raise cx.error(f"has a rank-{rank} input; only 1-D, 2-D and 3-D pooling is lowered")
    if len(cx.node.outputs) > 1:
        raise cx.error("with an Indices output is not supported by the TensorFlow lowering")
    kernel = [int(k) for k in cx.param("kernel_shape")]
    strides, dilations = _spatial_params(cx, kernel)
    if any(d != 1 for d in dilations) and cx.node.op != "onnx.MaxPool":
        raise cx.error("with dilations is not supported by the TensorFlow lowering")
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
            y = _dilated_max_pool(tf, x, kernel, strides, dilations)
        else:
            y = tf.nn.max_pool(x, kernel, strides, "VALID")
        return [tf.transpose(y, to_first)]
    if padded:
        x = tf.pad(x, padding)
    y = tf.nn.avg_pool(x, kernel, strides, "VALID")
    if padded:
        # avg_pool divided by the full window; ONNX divides by the cells that are input (plus the
        # explicit pads when count_include_pad=1, never ceil_mode's extra cells).
        include = bool(int(cx.param("count_include_pad", 0)))
        counts = _pool_counts(spatial, pads, extra, kernel, strides, include)
        scale = math.prod(kernel) / counts
        y = y * tf.constant(scale.reshape((1, *scale.shape, 1)), dtype=y.dtype)
    return [tf.transpose(y, to_first)]


def _dilated_max_pool(tf: Any, x: Any, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]) -> Any:
    """VALID max pooling of channels-last ``x`` with dilations: the maximum of one strided slice per window offset."""
    sizes = [int(n) for n in x.shape[1:-1]]
    outs = [(n - ((k - 1) * d + 1)) // s + 1 for n, k, d, s in zip(sizes, kernel, dilations, strides, strict=True)]
    result = None
    for offset in np.ndindex(*kernel):
        index = tuple(
            slice(o * d, o * d + (m - 1) * s + 1, s)
            for o, d, m, s in zip(offset, dilations, outs, strides, strict=True)
        )
        part = x[(slice(None), *index, slice(None))]
        result = part if result is None else tf.math.maximum(result, part)
    return result


def _pool_counts(
    spatial: Sequence[int],
    pads: Sequence[tuple[int, int]],
    extra: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    include_pads: bool,
) -> np.ndarray:
    """Number of counted cells in every pooling window (float64, one entry per output position)."""
    axes = []
    for size, (begin, end), more, k, s in zip(spatial, pads, extra, kernel, strides, strict=True):
        mask = np.zeros(begin + size + end + more)
        if include_pads:
            mask[: begin + size + end] = 1.0
        else:
            mask[begin : begin + size] = 1.0
        windows = (len(mask) - k) // s + 1
        axes.append(np.array([mask[i * s : i * s + k].sum() for i in range(windows)]))
    counts = axes[0]
    for axis in axes[1:]:
        counts = np.multiply.outer(counts, axis)
    return np.maximum(counts, 1.0)


@_register("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(cx: OpContext, operands: list[Any]) -> list[Any]:
    axes = list(range(2, cx.rank(0)))
    fn = cx.tf.math.reduce_mean if cx.node.op == "onnx.GlobalAveragePool" else cx.tf.math.reduce_max
    return [fn(operands[0], axis=axes, keepdims=True)]


# ------------------------------------------------------------------------------- normalisation


def _per_channel(tf: Any, value: Any, rank: int) -> Any:
    """A [C] tensor shaped [C, 1, ...] to broadcast against N,C,... activations."""
    return tf.reshape(value, [-1] + [1] * (rank - 2))


@_register("BatchNormalization")
def _batch_norm(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    if int(cx.param("training_mode", 0)) or len(cx.node.outputs) > 1:
        raise cx.error("in training mode is not supported (inference BatchNormalization only)")
    x, scale, bias, mean, var = operands[:5]
    rank = cx.rank(0)
    eps = float(cx.param("epsilon", 1e-5))
    factor = scale * tf.math.rsqrt(var + eps)
    shift = bias - mean * factor
    return [x * _per_channel(tf, factor, rank) + _per_channel(tf, shift, rank)]


@_register("LRN")
def _lrn(cx: OpContext, operands: list[Any]) -> list[Any]:
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


# ------------------------------------------------------------------------------- shapes and layout


@_register("Concat")
def _concat(cx: OpContext, operands: list[Any]) -> list[Any]:
    return [cx.tf.concat(operands, axis=_norm_axis(int(cx.param("axis")), cx.rank(0)))]


@_register("graphir.concat")
def _graphir_concat(cx: OpContext, operands: list[Any]) -> list[Any]:
    return [cx.tf.concat(operands, axis=int(cx.param("axis")))]


@_register("graphir.split")
def _graphir_split(cx: OpContext, operands: list[Any]) -> list[Any]:
    axis = int(cx.param("axis"))
    sizes = [cx.out_shape(k)[axis] for k in range(len(cx.node.outputs))]
    return list(cx.tf.split(operands[0], sizes, axis=axis))


@_register("Split")
def _split(cx: OpContext, operands: list[Any]) -> list[Any]:
    axis = _norm_axis(int(cx.param("axis", 0)), cx.rank(0))
    sizes = [cx.out_shape(k)[axis] for k in range(len(cx.node.outputs))]
    return list(cx.tf.split(operands[0], sizes, axis=axis))


@_register("Reshape")
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


@_register("Flatten")
def _flatten(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    axis = _norm_axis(int(cx.param("axis", 1)), cx.rank(0))
    shape = tf.shape(x)
    return [tf.reshape(x, tf.stack([tf.reduce_prod(shape[:axis]), tf.reduce_prod(shape[axis:])]))]


@_register("Transpose")
def _transpose(cx: OpContext, operands: list[Any]) -> list[Any]:
    perm = cx.param("perm")
    if perm is None:
        perm = tuple(reversed(range(cx.rank(0))))
    return [cx.tf.transpose(operands[0], [int(p) for p in perm])]


def _axes(cx: OpContext, operands: list[Any], from_input_opset: int) -> list[int] | None:
    """``axes`` from the attribute (older opsets) or the constant input #1 (newer ones)."""
    if cx.opset < from_input_opset:
        axes = cx.param("axes")
        return None if axes is None else [int(a) for a in axes]
    value = onnx_inputs(cx.node)[1] if len(onnx_inputs(cx.node)) > 1 else None
    if value is None:
        return None
    data = value.const if value.const is not None else None
    if isinstance(data, DenseTensor) or (data is not None and hasattr(data, "numpy")):
        return [int(a) for a in np.asarray(data.numpy()).reshape(-1)]
    raise cx.error("needs constant axes to be lowered")


@_register("Unsqueeze")
def _unsqueeze(cx: OpContext, operands: list[Any]) -> list[Any]:
    axes = _axes(cx, operands, 13)
    if axes is None:
        raise cx.error("has no axes")
    out_rank = cx.rank(0) + len(axes)
    x = operands[0]
    for axis in sorted(_norm_axis(a, out_rank) for a in axes):
        x = cx.tf.expand_dims(x, axis)
    return [x]


@_register("Squeeze")
def _squeeze(cx: OpContext, operands: list[Any]) -> list[Any]:
    axes = _axes(cx, operands, 13)
    if axes is None:
        return [cx.tf.squeeze(operands[0])]
    return [cx.tf.squeeze(operands[0], axis=[_norm_axis(a, cx.rank(0)) for a in axes])]


@_register("Shape")
def _shape(cx: OpContext, operands: list[Any]) -> list[Any]:
    shape = cx.tf.shape(operands[0], out_type=cx.tf.int64)
    start, end = cx.param("start"), cx.param("end")
    if start is not None or end is not None:
        shape = shape[slice(start, end)]
    return [shape]


@_register("Gather")
def _gather(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, indices = operands
    axis = _norm_axis(int(cx.param("axis", 0)), cx.rank(0))
    size = tf.shape(x, out_type=indices.dtype)[axis]
    indices = tf.where(indices < 0, indices + size, indices)  # ONNX allows negative indices
    return [tf.gather(x, indices, axis=axis)]


@_register("ConstantOfShape")
def _constant_of_shape(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    value = cx.param("value")
    if isinstance(value, DenseTensor):
        fill = value.numpy().reshape(-1)[0]
        dtype = tf.as_dtype(fill.dtype)
    else:
        fill, dtype = np.float32(0.0), tf.float32
    return [tf.fill(tf.cast(operands[0], tf.int64), tf.constant(fill, dtype=dtype))]


@_register("Constant")
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
    _register(_name)(_make_reduce(_path, _name))


# ------------------------------------------------------------------------------- constant operands


def _const_array(cx: OpContext, position: int) -> np.ndarray | None:
    """The value of ONNX input ``position`` when it is a constant (an initializer or a ``Constant`` node)."""
    inputs = onnx_inputs(cx.node)
    value = inputs[position] if position < len(inputs) else None
    if value is None:
        return None
    if value.const is not None:
        try:
            return np.asarray(value.const.numpy())
        except ValueError:
            return None
    producer = value.producer
    if producer is not None and producer.op == "onnx.Constant":
        data = producer.params.get("value")
        if isinstance(data, DenseTensor):
            return np.asarray(data.numpy())
        for key, dtype in (("value_int", np.int64), ("value_ints", np.int64), ("value_float", np.float32)):
            if key in producer.params:
                return np.asarray(producer.params[key], dtype=dtype)
    return None


def _required_const(cx: OpContext, position: int, what: str) -> list[int]:
    array = _const_array(cx, position)
    if array is None:
        raise cx.error(f"needs constant {what} (input #{position}) to be lowered")
    return [int(v) for v in array.reshape(-1)]


# ------------------------------------------------------------------------------- more elementwise


@_register("PRelu")
def _prelu(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, slope = operands
    rank, slope_rank = cx.rank(0), cx.rank(1)
    if cx.opset < 7 and slope_rank == 1 and rank > 2:
        slope = _per_channel(tf, slope, rank)  # before opset 7 a [C] slope applies per channel
    return [tf.where(x < 0, x * slope, x)]


@_register("Selu")
def _selu(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    alpha = float(cx.param("alpha", 1.67326319217681884765625))
    gamma = float(cx.param("gamma", 1.05070102214813232421875))
    return [tf.where(x > 0, gamma * x, (gamma * alpha) * (tf.math.exp(x) - 1))]


@_register("Tile")
def _tile(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    if cx.opset < 6:
        raise cx.error("before opset 6 (tiles/axis inputs) is not supported by the TensorFlow lowering")
    return [tf.tile(operands[0], tf.cast(operands[1], tf.int64))]


@_register("InstanceNormalization")
def _instance_norm(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, scale, bias = operands[:3]
    rank = cx.rank(0)
    eps = float(cx.param("epsilon", 1e-5))
    mean, var = tf.nn.moments(x, axes=list(range(2, rank)), keepdims=True)
    normed = (x - mean) * tf.math.rsqrt(var + eps)
    return [normed * _per_channel(tf, scale, rank) + _per_channel(tf, bias, rank)]


# ------------------------------------------------------------------------------- padding and slicing


def _edge_pad(tf: Any, x: Any, pads: Sequence[tuple[int, int]]) -> Any:
    """Pad by repeating the border values (ONNX ``edge`` mode)."""
    for axis, (begin, end) in enumerate(pads):
        if begin == 0 and end == 0:
            continue
        size = tf.shape(x)[axis]
        index = tf.clip_by_value(tf.range(-begin, size + end), 0, size - 1)
        x = tf.gather(x, index, axis=axis)
    return x


@_register("Pad")
def _pad(cx: OpContext, operands: list[Any]) -> list[Any]:
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


@_register("Slice")
def _slice(cx: OpContext, operands: list[Any]) -> list[Any]:
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


# ------------------------------------------------------------------------------- transposed convolution


@_register("ConvTranspose")
def _conv_transpose(cx: OpContext, operands: list[Any]) -> list[Any]:
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
    w = tf.transpose(w, [*range(2, rank), 1, 0])
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
