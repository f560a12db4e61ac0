"""Types, attribute values and their exact text forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from graphir.attributes import (
    BYTE_UNITS,
    DenseTensor,
    Opaque,
    dtype_from_numpy,
    format_bytes,
    format_duration,
    format_float,
    format_value,
    numpy_dtype,
    seconds_from,
)
from graphir.parser import parse_module
from graphir.types import DType, TensorType

# ----------------------------------------------------------------------------- TensorType


def test_static_type_sizes_and_text():
    t = TensorType(DType.F32, (1, 3, 224, 224))
    assert t.is_static
    assert t.rank == 4
    assert t.num_elements == 3 * 224 * 224
    assert t.nbytes == 4 * 3 * 224 * 224
    assert t.nbytes_or(-1) == t.nbytes
    assert str(t) == "f32[1,3,224,224]"


@pytest.mark.parametrize(
    ("dtype", "itemsize"),
    [(DType.F16, 2), (DType.BF16, 2), (DType.F64, 8), (DType.I8, 1), (DType.BOOL, 1), (DType.C128, 16)],
)
def test_nbytes_uses_itemsize(dtype, itemsize):
    assert TensorType(dtype, (3, 5)).nbytes == 15 * itemsize


def test_scalar_and_empty_shapes():
    scalar = TensorType(DType.I64, ())
    assert scalar.is_static and scalar.rank == 0 and scalar.num_elements == 1 and scalar.nbytes == 8
    assert str(scalar) == "i64[]"
    empty = TensorType(DType.F32, (4, 0))
    assert empty.nbytes == 0 and empty.is_static


def test_symbolic_and_unknown_dims():
    t = TensorType(DType.F32, ("batch", None, 3))
    assert not t.is_static
    assert t.rank == 3
    assert t.num_elements is None and t.nbytes is None
    assert t.nbytes_or(7) == 7
    assert str(t) == "f32[batch,?,3]"


def test_unknown_rank():
    t = TensorType(DType.BF16, None)
    assert t.rank is None and not t.is_static and t.nbytes is None
    assert str(t) == "bf16[*]"


def test_shape_is_frozen_tuple_and_types_hash_equal():
    a = TensorType(DType.F32, [2, "n"])
    b = TensorType(DType.F32, (2, "n"))
    assert a.shape == (2, "n")
    assert a == b and hash(a) == hash(b)
    assert a != TensorType(DType.F16, (2, "n"))
    with pytest.raises(AttributeError):
        a.dtype = DType.F16  # type: ignore[misc]


@pytest.mark.parametrize("bad", [(-1,), (True,), (1.5,), ([2],)])
def test_bad_dims_rejected(bad):
    with pytest.raises((TypeError, ValueError)):
        TensorType(DType.F32, bad)


def test_dtype_short_names_are_unique_and_round_trip():
    shorts = [d.short for d in DType]
    assert len(set(shorts)) == len(shorts)
    for dtype in DType:
        assert DType.from_short(dtype.short) is dtype
    with pytest.raises(KeyError):
        DType.from_short("f31")


# ----------------------------------------------------------------------------- durations and bytes


@given(st.floats(min_value=0, max_value=1e4, allow_nan=False, allow_infinity=False))
def test_format_duration_round_trips_exactly(seconds):
    text = format_duration(seconds)
    number, unit = _split_unit(text)
    assert seconds_from(number, unit) == seconds  # the decimal text, scaled exactly (as the parser reads it)
    assert _parse_annotation_seconds(text) == seconds


@given(st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, allow_infinity=False))
def test_format_duration_negative_and_tiny(seconds):
    assert _parse_annotation_seconds(format_duration(seconds)) == seconds


def _split_unit(text: str) -> tuple[str, str]:
    for unit in ("ns", "us", "ms", "s"):
        if text.endswith(unit):
            return text[: -len(unit)], unit
    raise AssertionError(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.0, "0s"), (41.5e-6, "41.5us"), (1e-3, "1ms"), (3e-9, "3ns"), (2.0, "2s"), (1234.5, "1234.5s")],
)
def test_format_duration_examples(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize(("seconds", "text"), [(10.0, "10s"), (150e-6, "150us"), (0.5, "500ms"), (1e-5, "10us")])
def test_format_duration_is_shortest(seconds, text):
    assert format_duration(seconds) == text


@given(st.integers(min_value=0, max_value=1 << 62))
def test_format_bytes_round_trips_exactly(count):
    text = format_bytes(count)
    for unit in ("TiB", "GiB", "MiB", "KiB", "B"):
        if text.endswith(unit):
            number = int(text[: -len(unit)])
            assert number * BYTE_UNITS[unit] == count
            # Largest unit that divides it: the number is not a multiple of 1024 unless TiB.
            assert unit == "TiB" or number % 1024 != 0 or count == 0
            break
    else:
        raise AssertionError(text)


@pytest.mark.parametrize(
    ("count", "text"), [(0, "0B"), (1, "1B"), (1536, "1536B"), (3 << 20, "3MiB"), (5 << 40, "5TiB"), (4096, "4KiB")]
)
def test_format_bytes_examples(count, text):
    assert format_bytes(count) == text


def test_format_float_never_looks_like_int():
    assert format_float(1.0) == "1.0"
    assert format_float(float("inf")) == "inf"
    assert format_float(float("-inf")) == "-inf"
    assert format_float(float("nan")) == "nan"
    assert format_float(1e20) == "1e+20"


# ----------------------------------------------------------------------------- format_value <-> parser


def _same(a: object, b: object) -> bool:
    """Structural equality that also tells 1 from 1.0 from True, -0.0 from 0.0, and nan == nan."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        assert isinstance(b, float)
        if math.isnan(a):
            return math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, tuple):
        assert isinstance(b, tuple)
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.parametrize(
    "value",
    [
        0,
        -7,
        10**30,
        True,
        False,
        1.0,
        -0.0,
        1e-300,
        5e-324,
        1e300,
        float("inf"),
        float("-inf"),
        float("nan"),
        "",
        'quote " and \\ backslash',
        "tab\tnewline\nbell\x07del\x7f",
        "unicode é 😀",
        (),
        (1, 2.5, "x", True),
        ((1, 2), (), ("a",)),
        TensorType(DType.F32, (1, "batch", None)),
        TensorType(DType.I4, None),
        TensorType(DType.STRING, ()),
        Opaque("onnx.GraphProto", b"\x00\x01\xffabc"),
        Opaque('kind "quoted"', b""),
    ],
)
def test_value_round_trip(parse_param, value):
    parsed = parse_param(format_value(value))
    assert _same(parsed, value), (value, format_value(value), parsed)


@pytest.mark.parametrize("text", ["a\u2028b", "a\x85b", "a\u2029b"])
def test_string_with_unicode_line_separators_round_trips(parse_param, text):
    assert parse_param(format_value(text)) == text


_LINE_BREAKS = "\u2028\u2029\x85"  # see test_string_with_unicode_line_separators_round_trips
_scalars = (
    st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.booleans()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(st.characters(exclude_characters=_LINE_BREAKS), max_size=8)
)
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4).map(tuple), max_leaves=12)


@given(_values)
def test_value_round_trip_property(value):
    parsed = _parse_param(format_value(value))
    assert _same(parsed, value)


# ----------------------------------------------------------------------------- dense tensors


def _numpy_kinds() -> list[DType]:
    kinds = []
    for dtype in DType:
        try:
            numpy_dtype(dtype)
        except KeyError:
            continue
        kinds.append(dtype)
    return kinds


_NUMPY_KINDS = _numpy_kinds()


def test_numpy_dtype_mapping():
    assert {d.short for d in _NUMPY_KINDS} == {
        "f16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "i1", "c64", "c128",
    }  # fmt: skip
    for dtype in _NUMPY_KINDS:
        assert dtype_from_numpy(numpy_dtype(dtype)) is dtype
        assert np.dtype(numpy_dtype(dtype)).itemsize == dtype.itemsize
    with pytest.raises(KeyError):
        numpy_dtype(DType.BF16)
    with pytest.raises(KeyError):
        dtype_from_numpy(np.dtype("datetime64[s]"))


def _elements(np_dtype: np.dtype):
    # Signed/payload NaNs are excluded here and tested on their own (reported bug).
    if np_dtype.kind == "f":
        return st.floats(width=8 * np_dtype.itemsize, allow_nan=False)
    if np_dtype.kind == "c":
        return st.complex_numbers(width=8 * np_dtype.itemsize, allow_nan=True)
    return None


@pytest.mark.parametrize("dtype", _NUMPY_KINDS, ids=lambda d: d.short)
@given(data=st.data())
def test_dense_tensor_round_trip_every_dtype(dtype, data):
    np_dtype = np.dtype(numpy_dtype(dtype))
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6))
    array = data.draw(hnp.arrays(np_dtype, shape, elements=_elements(np_dtype)))
    tensor = DenseTensor.from_numpy(array)
    assert tensor.type == TensorType(dtype, shape)
    text = format_value(tensor)
    parsed = _parse_param(text)
    assert isinstance(parsed, DenseTensor)
    assert parsed == tensor, text
    np.testing.assert_array_equal(parsed.numpy(), array)
    # Printing is a fixed point.
    assert format_value(parsed) == text


def test_dense_inline_up_to_16_elements_then_base64():
    small = DenseTensor.from_numpy(np.arange(16, dtype=np.int32))
    large = DenseTensor.from_numpy(np.arange(17, dtype=np.int32))
    assert format_value(small).startswith("dense<i32[16] = [0, 1, 2")
    assert 'b64"' in format_value(large)
    assert format_value(DenseTensor.from_numpy(np.array([1.5, -0.0], np.float32))) == "dense<f32[2] = [1.5, -0.0]>"


def test_dense_special_floats_round_trip():
    array = np.array([np.inf, -np.inf, np.nan, -0.0], dtype=np.float32)
    parsed = _parse_param(format_value(DenseTensor.from_numpy(array)))
    assert isinstance(parsed, DenseTensor)
    np.testing.assert_array_equal(parsed.numpy(), array)
    assert np.signbit(parsed.numpy()[3])


def test_dense_negative_nan_keeps_its_bits():
    tensor = DenseTensor.from_numpy(np.array([-np.nan], dtype=np.float32))
    assert _parse_param(format_value(tensor)) == tensor


def test_dense_strings_scalar_and_empty():
    strings = DenseTensor.from_numpy(np.array([["a", 'b"'], ["", "é"]]))
    assert strings.type == TensorType(DType.STRING, (2, 2))
    assert _parse_param(format_value(strings)) == strings
    scalar = DenseTensor.from_numpy(np.array(7, dtype=np.int8))
    assert format_value(scalar) == "dense<i8[] = [7]>"
    assert _parse_param(format_value(scalar)) == scalar
    empty = DenseTensor.from_numpy(np.zeros((2, 0), np.float64))
    assert _parse_param(format_value(empty)) == empty


@pytest.mark.parametrize("dtype", [DType.BF16, DType.F8E4M3, DType.I4], ids=lambda d: d.short)
def test_dense_without_numpy_dtype_uses_base64(dtype):
    tensor = DenseTensor(TensorType(dtype, (3,)), bytes(range(3 * dtype.itemsize)))
    text = format_value(tensor)
    assert 'b64"' in text
    assert _parse_param(text) == tensor


def test_dense_errors(parse_param):
    from graphir.errors import ParseError

    with pytest.raises(ParseError, match="must list 3 values"):
        parse_param("dense<i32[3] = [1, 2]>")
    with pytest.raises(ParseError, match="static shape"):
        parse_param("dense<i32[n] = [1]>")
    with pytest.raises(ParseError, match="needs 8"):
        parse_param('dense<i32[2] = b64"AAAA">')
    with pytest.raises(ParseError, match="malformed base64"):
        parse_param('dense<i32[1] = b64"!!">')


# ----------------------------------------------------------------------------- helpers


def _parse_param(text: str) -> object:
    body = f"    %y = test.Op(%x) {{v = {text}}} : (f32[4]) -> f32[4]\n    return %y"
    module = parse_module(f"module @m {{\n  graph @main(%x : f32[4]) {{\n{body}\n  }}\n}}\n")
    return module.graph.node("y").params["v"]


def _parse_annotation_seconds(text: str) -> float:
    """Read a duration back through the real parser (as a ``start`` annotation)."""
    body = f"    %y = onnx.Relu(%x) : (f32[4]) -> f32[4] [start = {text}]\n    return %y"
    module = parse_module(f"module @m {{\n  graph @main(%x : f32[4]) {{\n{body}\n  }}\n}}\n")
    value = module.graph.node("y").start
    assert value is not None
    return value


@pytest.mark.parametrize("symbol", ["a b", "1", "", "?", "x]", "n.m"])
def test_symbolic_dims_are_validated_or_round_trip(symbol):
    try:
        tensor_type = TensorType(DType.F32, (symbol, 2))
    except (TypeError, ValueError):
        return
    assert _parse_param(format_value(tensor_type)) == tensor_type
