"""Frozen attribute values used in op params and constants, and their exact text forms.

Param values are plain Python scalars (``int``, ``float``, ``str``, ``bool``), tuples of them,
:class:`~graphir.types.TensorType`, :class:`DenseTensor` (a small or large constant tensor held as
raw bytes) or :class:`Opaque` (a blob the IR does not interpret, such as an ONNX subgraph).

Durations and byte sizes print with units (``41.5us``, ``3MiB``) and re-parse to exactly the same
number: the printer chooses the shortest decimal that round-trips through the parser's arithmetic.
"""

from __future__ import annotations

import base64
import decimal
import math
import re
from typing import Any, cast

import attrs
import numpy as np

from graphir.regions import Region
from graphir.types import DType, TensorType

_NUMPY_DTYPES: dict[DType, Any] = {
    DType.F16: np.float16,
    DType.F32: np.float32,
    DType.F64: np.float64,
    DType.I8: np.int8,
    DType.I16: np.int16,
    DType.I32: np.int32,
    DType.I64: np.int64,
    DType.U8: np.uint8,
    DType.U16: np.uint16,
    DType.U32: np.uint32,
    DType.U64: np.uint64,
    DType.BOOL: np.bool_,
    DType.C64: np.complex64,
    DType.C128: np.complex128,
}

INLINE_ELEMENTS = 16
"""Tensors with at most this many elements print their values as a list; larger ones as base64."""


def numpy_dtype(dtype: DType) -> Any:
    """The numpy dtype for ``dtype``; raises ``KeyError`` for types numpy cannot hold (bf16, str)."""
    return _NUMPY_DTYPES[dtype]


def dtype_from_numpy(np_dtype: Any) -> DType:
    """The graphir dtype for a numpy dtype; raises ``KeyError`` when there is none."""
    np_dtype = np.dtype(np_dtype)
    for dtype, candidate in _NUMPY_DTYPES.items():
        if np.dtype(candidate) == np_dtype:
            return dtype
    raise KeyError(str(np_dtype))


@attrs.frozen
class DenseTensor:
    """A constant tensor: its type and its raw little-endian bytes (or a list of strings).

    Attributes:
        type: static tensor type.
        data: raw bytes in C order for numeric types; a tuple of ``str`` for ``DType.STRING``.
    """

    type: TensorType
    data: bytes | tuple[str, ...]

    @classmethod
    def from_numpy(cls, array: np.ndarray) -> DenseTensor:
        """Wrap a numpy array (copied into bytes, little-endian, C order)."""
        if array.dtype.kind in "OUS":
            flat = tuple(str(x.decode() if isinstance(x, bytes) else x) for x in array.reshape(-1))
            return cls(TensorType(DType.STRING, array.shape), flat)
        dtype = dtype_from_numpy(array.dtype)
        little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        return cls(TensorType(dtype, array.shape), little.tobytes())

    def numpy(self) -> np.ndarray:
        """The value as a numpy array."""
        shape = cast(tuple[int, ...], self.type.shape or ())  # a dense tensor's type is static
        if isinstance(self.data, tuple):
            return np.array(self.data, dtype=object).reshape(shape)
        np_dtype = np.dtype(numpy_dtype(self.type.dtype)).newbyteorder("<")
        return np.frombuffer(self.data, dtype=np_dtype).reshape(shape)


@attrs.frozen
class Opaque:
    """An uninterpreted blob (an ONNX subgraph, a TF function...), kept so nothing is lost.

    Attributes:
        kind: what the bytes are, e.g. ``"onnx.GraphProto"``.
        data: the serialized bytes.
    """

    kind: str
    data: bytes


ParamValue = int | float | str | bool | tuple[Any, ...] | TensorType | DenseTensor | Opaque | Region


# ---------------------------------------------------------------- durations and byte sizes

TIME_UNITS: dict[str, int] = {"ns": -9, "us": -6, "ms": -3, "s": 0}
"""Unit name -> decimal exponent: ``1.5us`` is the decimal 1.5e-6."""
_EXPONENT_TEXT = {unit: f"e{exponent}" for unit, exponent in TIME_UNITS.items()}
"""Unit name -> the exponent suffix :func:`seconds_from` appends (``"us"`` -> ``"e-6"``)."""

BYTE_UNITS: dict[str, int] = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def seconds_from(text: str, unit: str) -> float:
    """The float nearest to the decimal ``text`` scaled by ``unit`` (``"1.112", "us"`` -> 1.112e-6).

    Scaling the decimal exactly before rounding once (rather than dividing a rounded float) makes
    ``1.112us`` read as the same float as the literal ``1.112e-6``. A plain decimal of at most 28
    characters reads through ``float("<text>e<exponent>")``, which is the same single correct
    rounding; longer or exponent-carrying text goes through :mod:`decimal` (whose 28-digit context
    then decides, as it always did). An exponent too large for :mod:`decimal` gives an infinity
    (the readers report a duration that is not finite).
    """
    if type(text) is str and len(text) <= 28 and "e" not in text and "E" not in text:
        return float(text + _EXPONENT_TEXT[unit])
    value = decimal.Decimal(text)
    try:
        return float(value.scaleb(TIME_UNITS[unit]))
    except decimal.Overflow:  # an exponent past the context's (1e8055797723): infinite, as float() reads it
        return -math.inf if value.is_signed() else math.inf


def format_duration(seconds: float) -> str:
    """Exact, shortest text ``<number><unit>`` for a time in seconds: the one rule for durations.

    The digits are those of ``repr(seconds)``, Python's shortest decimal that reads back to the
    same double (no shorter decimal does, and among equally short ones it is the nearest). The unit
    is chosen by magnitude (``ns`` below 1 us, ``us`` below 1 ms, ``ms`` below 1 s, else ``s``)
    and only moves the decimal point: ``4.413898511032245e-05`` prints as ``44.13898511032245us``.
    The parser scales the decimal text exactly before its single rounding
    (:func:`seconds_from`), so the text reads back to exactly ``seconds``. No float arithmetic
    happens here, so equal doubles always print equally, whatever the unit.
    """
    if type(seconds) is float and 1e-6 <= seconds < 1e16:
        # The common durations (a us cost, a ms or s start time) by string slicing alone; every
        # other value (and any float subclass or numpy scalar) takes the general rule below.
        text = repr(seconds)
        if seconds >= 1.0:  # repr is "ddd.ddd" (no exponent below 1e16): the digits as they are
            return text[:-2] + "s" if text[-2:] == ".0" else text + "s"
        if seconds >= 1e-3:  # "0.ddd...": the point moves three digits right
            fraction = text[2:]
            if len(fraction) > 3:
                return f"{fraction[:3].lstrip('0')}.{fraction[3:]}ms"
            return (fraction + "00")[:3].lstrip("0") + "ms"
        if seconds >= 1e-4:  # "0.000ddd...": six digits right
            fraction = text[2:]
            if len(fraction) > 6:
                return f"{fraction[:6].lstrip('0')}.{fraction[6:]}us"
            return (fraction + "00000")[:6].lstrip("0") + "us"
        if text[-1] == "6":  # "d.ddde-06" or "de-06": the mantissa is the number of us as it is
            return text[:-4] + "us"
        # "d.ddde-05", "d.de-05" or "de-05": the point moves one digit right
        if len(text) > 7:
            return f"{text[0]}{text[2]}.{text[3:-4]}us"
        return text[0] + text[2] + "us" if len(text) == 7 else text[0] + "0us"
    return _format_duration_general(seconds)


def _format_duration_general(seconds: float) -> str:
    """:func:`format_duration` for any value (the fast path's cases included, as a reference)."""
    if seconds == 0:
        return "0s"
    if not math.isfinite(seconds):
        return f"{seconds!r}s"
    seconds = float(seconds)  # numpy scalars: repr() below needs the plain float
    if seconds < 0:
        return "-" + _format_duration_general(-seconds)
    if seconds < 1e-6:
        unit, shift = "ns", 9
    elif seconds < 1e-3:
        unit, shift = "us", 6
    elif seconds < 1.0:
        unit, shift = "ms", 3
    else:
        unit, shift = "s", 0
    text = repr(seconds)
    # ``significant``: the digits without leading or trailing zeros; ``point``: where the decimal
    # point goes among them once the unit has moved it ``shift`` places right.
    if "e" in text:  # d.ddde-XX (repr's mantissa has one non-zero digit before its point)
        mantissa, exponent = text.split("e")
        significant = mantissa[0] + mantissa[2:]
        point = int(exponent) + shift + 1
    else:
        whole, fraction = text.split(".")
        if whole == "0":
            significant = fraction.lstrip("0")
            point = shift + len(significant) - len(fraction)
        else:
            significant = (whole + fraction).rstrip("0")
            point = len(whole) + shift
    size = len(significant)
    if point <= 0:
        return "0." + "0" * -point + significant + unit
    if point >= size:
        return significant + "0" * (point - size) + unit
    return significant[:point] + "." + significant[point:] + unit


def format_bytes(count: int) -> str:
    """An exact byte size with the largest binary unit that divides it (``3MiB``, ``1536B``)."""
    if count == 0:
        return "0B"
    if count & 1023:  # not a whole number of KiB, so of no larger unit either
        return f"{count}B"
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        size = BYTE_UNITS[unit]
        if count % size == 0:
            return f"{count // size}{unit}"
    return f"{count}B"


def format_float(value: float) -> str:
    """A float that reads back exactly and never looks like an int (``1.0``, ``1e+20``, ``inf``)."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(float(value))


def _format_numpy_float(value: Any) -> str:
    if not np.isfinite(value):
        return format_float(float(value))
    text = str(value)
    return text if any(c in text for c in ".einf") else text + ".0"


def b64encode(data: bytes) -> str:
    """Base64 text of ``data``."""
    return base64.b64encode(data).decode("ascii")


def b64decode(text: str) -> bytes:
    """Bytes of base64 ``text``; raises ``ValueError`` when malformed."""
    return base64.b64decode(text.encode("ascii"), validate=True)


@attrs.frozen
class Duration:
    """A time in seconds as written in text with a unit (``41.5us``)."""

    seconds: float


@attrs.frozen
class ByteSize:
    """A byte count as written in text with a unit (``3MiB``)."""

    count: int


def format_string(text: str) -> str:
    """A double-quoted string with JSON-style escapes."""
    out = ['"']
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F or ch in "\u0085\u2028\u2029":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.$]*$")
_RESERVED_KEYS = frozenset({"true", "false", "inf", "nan", "type", "dense", "opaque", "external"})


def format_key(key: str) -> str:
    """A param/attribute key: bare when it is an identifier, quoted otherwise."""
    return key if _KEY.match(key) and key not in _RESERVED_KEYS else format_string(key)


def format_value(value: Any) -> str:
    """Text of a param or annotation value; the parser reads it back to an equal value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        return format_string(value)
    if isinstance(value, Duration):
        return format_duration(value.seconds)
    if isinstance(value, ByteSize):
        return format_bytes(value.count)
    if isinstance(value, tuple):
        return "[" + ", ".join(format_value(v) for v in cast(tuple[Any, ...], value)) + "]"  # a list param
    if isinstance(value, dict):
        items = cast(dict[str, Any], value).items()  # a param dict (attribute names to values)
        return "{" + ", ".join(f"{format_key(k)} = {format_value(v)}" for k, v in items) + "}"
    if isinstance(value, TensorType):
        return f"type<{value}>"
    if isinstance(value, DenseTensor):
        return f"dense<{value.type} = {format_tensor_data(value)}>"
    if isinstance(value, Opaque):
        return f"opaque<{format_string(value.kind)}, b64{format_string(b64encode(value.data))}>"
    raise TypeError(f"cannot print attribute value {value!r} of type {type(value).__name__}")


def format_tensor_data(tensor: DenseTensor) -> str:
    """Inline list of values for small tensors, ``b64"..."`` of the raw bytes for large ones."""
    if isinstance(tensor.data, tuple):
        return format_value(tensor.data)
    count = tensor.type.num_elements or 0
    if count <= INLINE_ELEMENTS and tensor.type.dtype in _NUMPY_DTYPES:
        flat = tensor.numpy().reshape(-1)
        if tensor.type.dtype in (DType.C64, DType.C128):
            return f"b64{format_string(b64encode(tensor.data))}"
        if flat.dtype.kind == "f" and np.isnan(flat).any():
            # NaNs go to base64 so their sign and payload bits survive.
            return f"b64{format_string(b64encode(tensor.data))}"
        if flat.dtype.kind == "f":
            # str() of a numpy scalar is the shortest text that reads back to the same value in
            # its own precision (0.02 for float32, not 0.019999999552965164).
            return "[" + ", ".join(_format_numpy_float(x) for x in flat) + "]"
        return "[" + ", ".join(str(int(x)) for x in flat) + "]"
    return f"b64{format_string(b64encode(tensor.data))}"
