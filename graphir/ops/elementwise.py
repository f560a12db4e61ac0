"""Elementwise ops (ONNX and TensorFlow): activations, arithmetic, comparisons, casts, softmax.

* **type rules**: unary ops (ONNX and TensorFlow) keep their operand's type and shape; ONNX n-ary
  arithmetic keeps one element type.
* **cost**: ``k · |out| · max(1, inputs - 1)`` FLOPs with ``k = 1`` for cheap ops and ``k = 4`` for
  transcendental ones (exp, erf, tanh...); bytes in + out. Softmax-like ops: ``5 · |in|``. The cost
  keys are bare op types, shared by ONNX (``Add``), TensorFlow (``AddV2``, ``ReluGrad``) and vendor domains.
* **split**: any axis of the result; every operand carrying the axis (numpy broadcasting, aligned
  from the right) is cut, size-1 and missing axes are shared. ``channel`` is axis 1 for ONNX (NCHW)
  and the last axis for TensorFlow (NHWC).
* **lowering** (ONNX -> TensorFlow): one TF op each, composed where TF lacks one (``Elu``, ``Selu``,
  ``PRelu``); ``Dropout`` is the inference identity; ``Softmax`` coerces to 2-D before opset 13;
  ``Clip`` reads its bounds from attributes before opset 11; n-ary ``Sum``/``Max``/``Min``/``Mean``
  combine pairwise (numpy broadcasting, unlike ``tf.add_n``).
"""

# The op families share the package-private helpers of graphir.ops.work, split_plan and lower_context.
# pyright: reportPrivateUsage=false
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphir.ops.lower_context import OpContext, _arg, _norm_axis, _onnx_elem_dtype, _per_channel, _tf_fn
from graphir.ops.registry import Lowering, cost, lowering, split_rule, type_rule
from graphir.ops.split_plan import Dim, SplitPlan, _broadcast_plan, _named_axis, _shape
from graphir.ops.work import _elementwise, _over_input

if TYPE_CHECKING:
    from graphir.ir import Node
    from graphir.types import TensorType

Converter = Lowering

# --------------------------------------------------------------------------- cost

cost(
    *("Relu", "Abs", "Neg", "Sign", "Floor", "Ceil", "Round", "Not", "Cast", "CastLike", "Clip", "LeakyRelu"),
    *("Relu6", "ReluGrad", "Relu6Grad", "LeakyReluGrad", "Square", "Reciprocal", "Inv", "IsNaN", "IsInf"),
    *("Add", "AddV2", "Sub", "Mul", "Div", "RealDiv", "FloorDiv", "TruncateDiv", "Mod", "FloorMod"),
    *("Max", "Min", "Maximum", "Minimum", "Sum", "AddN", "Mean", "Equal", "NotEqual", "Less", "LessEqual"),
    *("Greater", "GreaterEqual", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "LogicalAnd"),
    *("LogicalOr", "LogicalNot", "Where", "Select", "SelectV2", "PRelu", "BiasAdd", "BiasAddV1"),
    *("SquaredDifference", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "ThresholdedRelu"),
    *("Shrink", "HardSwish", "Dropout", "DivNoNan", "MulNoNan", "ClipByValue", "ZerosLike", "OnesLike"),
    *("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "ApproximateEqual"),
)(_elementwise(1))
cost(
    *("Exp", "Log", "Sqrt", "Rsqrt", "Sigmoid", "Tanh", "Erf", "Elu", "Selu", "Celu", "Softplus", "Softsign"),
    *("HardSigmoid", "Mish", "Gelu", "Pow", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh"),
    *("Asinh", "Acosh", "Atanh", "Expm1", "Log1p", "SigmoidGrad", "TanhGrad", "RsqrtGrad", "SqrtGrad"),
    *("EluGrad", "SeluGrad", "SoftplusGrad", "SoftsignGrad", "Erfc", "Lgamma", "Digamma", "Swish", "FastGelu"),
    *("BiasGelu", "QuickGelu", "ReciprocalGrad", "Xlogy", "Xdivy", "GeluGrad"),
)(_elementwise(4))
cost("Softmax", "LogSoftmax", "Hardmax", "SoftmaxGrad", "LogSoftmaxGrad")(_over_input(5))

# --------------------------------------------------------------------------- type rules

UNARY_SAME_TYPE = tuple(
    "Relu Sigmoid Tanh Abs Neg Exp Log Sqrt Reciprocal Floor Ceil Erf Softplus Selu Elu LeakyRelu "
    "HardSigmoid Identity Dropout Softmax LogSoftmax".split()
)
BINARY_SAME_DTYPE = tuple("Add Sub Mul Div Max Min Sum Mean".split())


def same_type_rule(node: Node, in_types: list[TensorType], out_types: list[TensorType]) -> str | None:
    """The (first) result has the operand's element type and shape (an element-wise unary op).

    Shapes are compared when both ranks are known: the ranks must agree, and so must each pair of
    static dims; a static result dim where the operand's dim is symbolic (``[n,2] -> [3,2]``) claims
    a size the operand does not have and is an error too. Unknown (``?``) dims, and symbolic result
    dims, match anything.
    """
    if not in_types or not out_types:
        return None
    operand, result = in_types[0], out_types[0]
    mismatch = f"result type {result} does not match operand type {operand}"
    if operand.dtype != result.dtype:
        return mismatch
    if operand.shape is None or result.shape is None:
        return None
    if len(operand.shape) != len(result.shape):
        return mismatch
    for have, claimed in zip(operand.shape, result.shape, strict=True):
        if isinstance(claimed, int) and have is not None and have != claimed:
            return mismatch
    return None


TF_UNARY_SAME_TYPE = tuple(
    "Relu Relu6 Sigmoid Tanh Abs Neg Exp Log Sqrt Rsqrt Square Reciprocal Floor Ceil Erf Softplus Softsign "
    "Selu Elu".split()
)

type_rule(*(f"onnx.{op}" for op in UNARY_SAME_TYPE))(same_type_rule)
type_rule(*(f"tf.{op}" for op in TF_UNARY_SAME_TYPE))(same_type_rule)


@type_rule(*(f"onnx.{op}" for op in BINARY_SAME_DTYPE))
def same_dtype_rule(node: Node, in_types: list[TensorType], out_types: list[TensorType]) -> str | None:
    """Operands and results share one element type (shapes broadcast)."""
    if not in_types or len({t.dtype.short for t in in_types + out_types}) <= 1:
        return None
    joined = ", ".join(str(t) for t in in_types)
    return f"operands and result must share one element type, got ({joined}) -> {out_types[0]}"


# --------------------------------------------------------------------------- split rules

_ONNX_ELEMENTWISE = (
    "Relu Sigmoid Tanh Abs Neg Exp Log Sqrt Reciprocal Floor Ceil Erf Softplus Softsign Selu Elu Celu LeakyRelu "
    "HardSigmoid HardSwish Identity Clip Cast Not Sign Round Sin Cos Add Sub Mul Div Pow Max Min Sum Mean PRelu "
    "And Or Xor Equal Less Greater LessOrEqual GreaterOrEqual Where Gelu Mish"
).split()


_TF_ELEMENTWISE = (
    "Relu Relu6 Sigmoid Tanh Abs Neg Exp Log Sqrt Rsqrt Square Identity Elu Selu Softplus AddV2 Add Sub Mul "
    "RealDiv Maximum Minimum SquaredDifference ReluGrad Relu6Grad SigmoidGrad TanhGrad"
).split()


@split_rule(("batch", "channel"), *(f"onnx.{op}" for op in _ONNX_ELEMENTWISE))
def _onnx_elementwise(node: Node, dim: Dim, parts: int) -> SplitPlan:
    """Elementwise ops: any axis of the result (channel = axis 1, NCHW)."""
    return _broadcast_plan(node, _named_axis(node, dim, 1), parts)


@split_rule(("batch", "channel"), *(f"tf.{op}" for op in _TF_ELEMENTWISE))
def _tf_elementwise(node: Node, dim: Dim, parts: int) -> SplitPlan:
    """TF elementwise ops: any axis of the result (channel = the last axis, NHWC)."""
    return _broadcast_plan(node, _named_axis(node, dim, len(_shape(node.outputs[0])) - 1), parts)


# --------------------------------------------------------------------------- lowering

_UNARY: dict[str, str] = {
    "Relu": "nn.relu",
    "Sigmoid": "math.sigmoid",
    "Tanh": "math.tanh",
    "Exp": "math.exp",
    "Log": "math.log",
    "Sqrt": "math.sqrt",
    "Neg": "math.negative",
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
    "Equal": "math.equal",
    "Less": "math.less",
    "Greater": "math.greater",
    "And": "math.logical_and",
    "Or": "math.logical_or",
}


_VARIADIC: dict[str, str] = {"Sum": "math.add", "Max": "math.maximum", "Min": "math.minimum"}


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
    lowering(_name)(_make_unary(_path))
for _name, _path in _BINARY.items():
    lowering(_name)(_make_binary(_path))
for _name, _path in _VARIADIC.items():
    lowering(_name)(_make_variadic(_path))


@lowering("Div")
def _div(cx: OpContext, operands: list[Any]) -> list[Any]:
    a, b = operands[0], operands[1]
    if a.dtype.is_integer:
        return [cx.tf.raw_ops.TruncateDiv(x=a, y=b)]  # ONNX integer division truncates toward zero
    return [cx.tf.math.divide(a, b)]


@lowering("Mean")
def _mean(cx: OpContext, operands: list[Any]) -> list[Any]:
    total = _make_variadic("math.add")(cx, operands)[0]
    return [total / cx.tf.cast(len(operands), total.dtype)]


@lowering("Identity", "Dropout")
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


@lowering("LeakyRelu")
def _leaky_relu(cx: OpContext, operands: list[Any]) -> list[Any]:
    return [cx.tf.nn.leaky_relu(operands[0], alpha=float(cx.param("alpha", 0.01)))]


@lowering("Elu")
def _elu(cx: OpContext, operands: list[Any]) -> list[Any]:
    x = operands[0]
    alpha = float(cx.param("alpha", 1.0))
    return [cx.tf.where(x > 0, x, alpha * (cx.tf.math.exp(x) - 1))]


@lowering("Clip")
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


@lowering("Softmax", "LogSoftmax")
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


@lowering("PRelu")
def _prelu(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, slope = operands
    rank, slope_rank = cx.rank(0), cx.rank(1)
    if cx.opset < 7 and slope_rank == 1 and rank > 2:
        slope = _per_channel(tf, slope, rank)  # before opset 7 a [C] slope applies per channel
    return [tf.where(x < 0, x * slope, x)]


@lowering("Selu")
def _selu(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    alpha = float(cx.param("alpha", 1.67326319217681884765625))
    gamma = float(cx.param("gamma", 1.05070102214813232421875))
    return [tf.where(x > 0, gamma * x, (gamma * alpha) * (tf.math.exp(x) - 1))]


_MORE_UNARY: dict[str, str] = {
    "Sin": "math.sin",
    "Cos": "math.cos",
    "Tan": "math.tan",
    "Asin": "math.asin",
    "Acos": "math.acos",
    "Atan": "math.atan",
    "Sinh": "math.sinh",
    "Cosh": "math.cosh",
    "Asinh": "math.asinh",
    "Acosh": "math.acosh",
    "Atanh": "math.atanh",
    "Softsign": "math.softsign",
    "Round": "math.round",  # banker's rounding, as ONNX (round half to even)
    "BitwiseNot": "bitwise.invert",
}
_MORE_BINARY: dict[str, str] = {
    "LessOrEqual": "math.less_equal",
    "GreaterOrEqual": "math.greater_equal",
    "Xor": "math.logical_xor",
    "BitwiseAnd": "bitwise.bitwise_and",
    "BitwiseOr": "bitwise.bitwise_or",
    "BitwiseXor": "bitwise.bitwise_xor",
}
for _name, _path in _MORE_UNARY.items():
    lowering(_name)(_make_unary(_path))
for _name, _path in _MORE_BINARY.items():
    lowering(_name)(_make_binary(_path))


def _unsigned(dtype: Any) -> bool:
    return bool(dtype.is_integer and dtype.is_unsigned)


@lowering("Sign")
def _sign(cx: OpContext, operands: list[Any]) -> list[Any]:
    x = operands[0]
    if _unsigned(x.dtype):
        return [cx.tf.cast(x > 0, x.dtype)]
    return [cx.tf.math.sign(x)]


@lowering("CastLike")
def _cast_like(cx: OpContext, operands: list[Any]) -> list[Any]:
    return [_cast_to(cx, operands[0], operands[1].dtype)]


def _cast_to(cx: OpContext, x: Any, dtype: Any) -> Any:
    """ONNX ``Cast`` semantics: strings parse and print numbers, floats to bool test non-zero."""
    tf = cx.tf
    if x.dtype == dtype:
        return tf.identity(x)
    if dtype == tf.string:
        if x.dtype.is_floating:
            return _float_to_string(tf, x)
        return tf.strings.as_string(x)
    if x.dtype == tf.string:
        if dtype.is_floating:
            return tf.cast(tf.strings.to_number(x, tf.float64), dtype)
        if dtype == tf.bool:
            return tf.strings.to_number(x, tf.float64) != 0
        return tf.cast(tf.strings.to_number(x, tf.int64), dtype)
    return tf.cast(x, dtype)


def _float_to_string(tf: Any, x: Any) -> Any:
    """Floats as ONNX's reference prints them: like numpy's ``str`` of a float32 (``%g``-like, 9 digits)."""
    text = tf.strings.as_string(tf.cast(x, tf.float32), shortest=True)
    text = tf.strings.regex_replace(text, "^inf$", "INF")
    text = tf.strings.regex_replace(text, "^-inf$", "-INF")
    return tf.strings.regex_replace(text, "^-?nan$", "NaN")


@lowering("Cast")
def _cast_onnx(cx: OpContext, operands: list[Any]) -> list[Any]:
    return [_cast_to(cx, operands[0], _onnx_elem_dtype(cx.tf, int(cx.param("to"))))]


@lowering("Where")
def _where(cx: OpContext, operands: list[Any]) -> list[Any]:
    return [cx.tf.where(operands[0], operands[1], operands[2])]


@lowering("Mod")
def _mod(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    a, b = operands
    if int(cx.param("fmod", 0)) and not a.dtype.is_integer:
        wide = tf.float64 if a.dtype == tf.float64 else tf.float32
        result = tf.raw_ops.TruncateMod(x=tf.cast(a, wide), y=tf.cast(b, wide))  # C fmod: the dividend's sign
        return [tf.cast(result, a.dtype)]
    if int(cx.param("fmod", 0)):
        return [a - b * tf.raw_ops.TruncateDiv(x=a, y=b)]
    return [tf.math.floormod(a, b)]  # integer mod: the divisor's sign (Python's %)


@lowering("BitShift")
def _bit_shift(cx: OpContext, operands: list[Any]) -> list[Any]:
    # A shift by a negative amount or by the bit width or more gives 0 (-1 for a negative value
    # shifted right), as the ONNX reference defines it; TensorFlow leaves those undefined.
    tf = cx.tf
    a, b = operands
    a, b = a + tf.zeros_like(b), b + tf.zeros_like(a)  # broadcast both
    bits = a.dtype.size * 8
    valid = tf.logical_and(b >= 0, b < tf.cast(bits, b.dtype))
    safe = tf.where(valid, b, tf.zeros_like(b))
    if cx.param("direction") == "LEFT":
        shifted, fallback = tf.bitwise.left_shift(a, safe), tf.zeros_like(a)
    else:
        shifted = tf.bitwise.right_shift(a, safe)
        fallback = tf.where(a < 0, -tf.ones_like(a), tf.zeros_like(a)) if not _unsigned(a.dtype) else tf.zeros_like(a)
    return [tf.where(valid, shifted, fallback)]


@lowering("IsNaN")
def _is_nan(cx: OpContext, operands: list[Any]) -> list[Any]:
    return [cx.tf.math.is_nan(operands[0])]


@lowering("IsInf")
def _is_inf(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    result = tf.math.is_inf(x)
    if not int(cx.param("detect_positive", 1)):
        result = tf.logical_and(result, x < 0)
    if not int(cx.param("detect_negative", 1)):
        result = tf.logical_and(result, x > 0)
    return [result]


@lowering("HardSigmoid")
def _hard_sigmoid(cx: OpContext, operands: list[Any]) -> list[Any]:
    x = operands[0]
    alpha, beta = float(cx.param("alpha", 0.2)), float(cx.param("beta", 0.5))
    return [cx.tf.clip_by_value(alpha * x + beta, 0.0, 1.0)]


@lowering("HardSwish")
def _hard_swish(cx: OpContext, operands: list[Any]) -> list[Any]:
    x = operands[0]
    return [x * cx.tf.clip_by_value(x / 6.0 + 0.5, 0.0, 1.0)]


@lowering("Gelu")
def _gelu(cx: OpContext, operands: list[Any]) -> list[Any]:
    approximate = cx.param("approximate", "none") == "tanh"
    return [cx.tf.nn.gelu(operands[0], approximate=approximate)]


@lowering("Swish")
def _swish(cx: OpContext, operands: list[Any]) -> list[Any]:
    x = operands[0]
    return [x * cx.tf.math.sigmoid(float(cx.param("alpha", 1.0)) * x)]


@lowering("Mish")
def _mish(cx: OpContext, operands: list[Any]) -> list[Any]:
    x = operands[0]
    return [x * cx.tf.math.tanh(cx.tf.math.softplus(x))]


@lowering("Celu")
def _celu(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    alpha = float(cx.param("alpha", 1.0))
    zero = tf.zeros_like(x)
    return [tf.maximum(x, zero) + tf.minimum(zero, alpha * (tf.math.exp(x / alpha) - 1.0))]


@lowering("ThresholdedRelu")
def _thresholded_relu(cx: OpContext, operands: list[Any]) -> list[Any]:
    x = operands[0]
    return [cx.tf.where(x > float(cx.param("alpha", 1.0)), x, cx.tf.zeros_like(x))]


@lowering("Shrink")
def _shrink(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    bias, lambd = float(cx.param("bias", 0.0)), float(cx.param("lambd", 0.5))
    low = tf.cast(-lambd, x.dtype) if x.dtype.is_floating else tf.cast(int(-lambd), x.dtype)
    return [
        tf.where(
            x < low,
            x + tf.cast(bias, x.dtype),
            tf.where(x > tf.cast(lambd, x.dtype), x - tf.cast(bias, x.dtype), tf.zeros_like(x)),
        )
    ]


@lowering("Hardmax")
def _hardmax(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    rank = cx.rank()
    if cx.opset >= 13:
        axis = _norm_axis(int(cx.param("axis", -1)), rank)
        index = tf.math.argmax(x, axis=axis)
        hot = tf.one_hot(index, tf.shape(x)[axis], axis=axis, dtype=x.dtype)
        return [hot]
    axis = _norm_axis(int(cx.param("axis", 1)), rank)
    shape = tf.shape(x)
    flat = tf.reshape(x, tf.stack([tf.reduce_prod(shape[:axis]), tf.reduce_prod(shape[axis:])]))
    hot = tf.one_hot(tf.math.argmax(flat, axis=1), tf.shape(flat)[1], dtype=x.dtype)
    return [tf.reshape(hot, shape)]


@lowering("Abs")
def _abs(cx: OpContext, operands: list[Any]) -> list[Any]:
    x = operands[0]
    return [cx.tf.identity(x) if _unsigned(x.dtype) else cx.tf.math.abs(x)]


@lowering("Pow")
def _pow(cx: OpContext, operands: list[Any]) -> list[Any]:
    # From opset 12 the exponent may have another type; the result has the base's type.
    tf = cx.tf
    base, exponent = operands
    if base.dtype == exponent.dtype and base.dtype.is_floating:
        return [tf.math.pow(base, exponent)]
    wide = tf.math.pow(tf.cast(base, tf.float64), tf.cast(exponent, tf.float64))
    return [tf.cast(wide, base.dtype)]


@lowering("SwiGLU")
def _swiglu(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    gate, linear = tf.split(x, 2, axis=-1) if _arg(operands, 1) is None else (operands[0], operands[1])
    alpha = float(cx.param("alpha", 1.0))
    return [gate * tf.math.sigmoid(alpha * gate) * linear]


def _quant_param(cx: OpContext, value: Any, rank: int) -> Any:
    """A scale or zero point: per tensor, per axis (1-D, along ``axis``) or blocked (``block_size``)."""
    tf = cx.tf
    if value.shape.rank == 0 or value.shape.rank is None or rank == 0:
        return value
    axis = _norm_axis(int(cx.param("axis", 1)), rank)
    block = int(cx.param("block_size", 0))
    if block:
        value = tf.repeat(value, block, axis=axis)
        return value
    if value.shape.rank == 1:
        return tf.reshape(value, [-1] + [1] * (rank - axis - 1))
    return value


@lowering("QuantizeLinear")
def _quantize_linear(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, scale = operands[0], operands[1]
    zero = _arg(operands, 2)
    rank = cx.rank(0)
    if zero is not None:
        out = zero.dtype
    else:
        out = _onnx_elem_dtype(tf, int(cx.param("output_dtype", 0) or 2))
    if not out.is_integer:
        raise cx.unsupported(f"quantizing to {out.name} (no TensorFlow kernels for low-precision floats)")
    # x / scale in x's own float type (as the reference: its rounding decides ties), then wide.
    y = tf.cast(tf.math.round(x / _quant_param(cx, tf.cast(scale, x.dtype), rank)), tf.float64)
    if zero is not None:
        y = y + _quant_param(cx, tf.cast(zero, tf.float64), rank)
    return [tf.cast(tf.clip_by_value(y, float(out.min), float(out.max)), out)]


@lowering("DequantizeLinear")
def _dequantize_linear(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, scale = operands[0], operands[1]
    zero = _arg(operands, 2)
    rank = cx.rank(0)
    wide = tf.float64 if scale.dtype == tf.float64 else tf.float32
    y = tf.cast(x, wide)
    if zero is not None:
        y = y - _quant_param(cx, tf.cast(zero, wide), rank)
    y = y * _quant_param(cx, tf.cast(scale, wide), rank)
    out = scale.dtype if cx.param("output_dtype") is None else _onnx_elem_dtype(tf, int(cx.param("output_dtype")))
    return [tf.cast(y, out)]


@lowering("DynamicQuantizeLinear")
def _dynamic_quantize_linear(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x = operands[0]
    low = tf.minimum(tf.reduce_min(x), 0.0)
    high = tf.maximum(tf.reduce_max(x), 0.0)
    scale = (high - low) / 255.0
    zero = tf.clip_by_value(tf.math.round(-low / scale), 0.0, 255.0)
    y = tf.clip_by_value(tf.math.round(x / scale) + zero, 0.0, 255.0)
    return [tf.cast(y, tf.uint8), scale, tf.cast(zero, tf.uint8)]


@lowering("onnx.ai.onnx.ml.Binarizer")
def _binarizer(cx: OpContext, operands: list[Any]) -> list[Any]:
    x = operands[0]
    threshold = cx.tf.cast(float(cx.param("threshold", 0.0)), x.dtype)
    return [cx.tf.cast(x > threshold, x.dtype)]
