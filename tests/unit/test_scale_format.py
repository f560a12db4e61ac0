"""Durations print by one rule: the shortest round-trip digits of the seconds, the point moved to the unit.

``format_duration`` writes the digits of ``repr(seconds)`` (Python's shortest decimal that reads
back to the same double) in a unit chosen by magnitude. The reference below computes the same
text through :mod:`decimal` (exact scaling of the repr decimal, then the plain positional form);
the properties checked are: equal to the reference, reads back to exactly the same double, and no
decimal with fewer significant digits reads back (shortest). Before this rule about 4 % of
durations fell back to ``1.96...e-05s`` (the digit search ran on the rounded scaled value).
"""

from __future__ import annotations

import decimal
import math
import struct

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from graphir.attributes import TIME_UNITS, format_duration, seconds_from
from graphir.errors import ParseError
from graphir.parser import parse_module


def _reference_seconds_from(text: str, unit: str) -> float:
    return float(decimal.Decimal(text).scaleb(TIME_UNITS[unit]))


def _unit_of(seconds: float) -> str:
    magnitude = abs(seconds)
    return "ns" if magnitude < 1e-6 else "us" if magnitude < 1e-3 else "ms" if magnitude < 1.0 else "s"


def _reference_format_duration(seconds: float) -> str:
    """The rule, through :mod:`decimal`: repr's decimal scaled exactly into the unit, positional."""
    if seconds == 0:
        return "0s"
    if not math.isfinite(seconds):
        return f"{seconds!r}s"
    seconds = float(seconds)
    unit = _unit_of(seconds)
    scaled = decimal.Decimal(repr(seconds)).scaleb(-TIME_UNITS[unit]).normalize()
    return f"{scaled:f}" + unit


def _split(text: str) -> tuple[str, str]:
    for unit in ("ns", "us", "ms", "s"):
        if text.endswith(unit):
            return text[: -len(unit)], unit
    raise AssertionError(text)


def _check(seconds: float) -> None:
    text = format_duration(seconds)
    assert text == _reference_format_duration(seconds)
    if seconds == 0 or not math.isfinite(seconds):
        return
    number, unit = _split(text)
    assert seconds_from(number, unit) == seconds  # exact
    digits = len(number.lstrip("-").replace(".", "").strip("0"))
    if digits > 1:  # shortest: one significant digit fewer does not read back
        shorter = f"{float(number):.{digits - 2}e}"
        assert _reference_seconds_from(shorter, unit) != seconds or len(repr(seconds)) <= len(shorter)


@settings(max_examples=3000, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True))
@example(0.0)
@example(-0.0)
@example(5e-324)
@example(1.7976931348623157e308)
@example(1e-6)
@example(9.999999999999999e-7)
@example(1e-3)
@example(0.9999999999999999)
@example(0.125)
@example(2.5e-6)
@example(999.9999999999999e-6)
def test_format_duration_follows_the_rule(seconds):
    _check(seconds)


@settings(max_examples=2000, deadline=None)
@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_format_duration_follows_the_rule_on_any_bit_pattern(bits):
    (seconds,) = struct.unpack("<d", struct.pack("<Q", bits))
    _check(seconds)


@settings(max_examples=2000, deadline=None)
@given(st.integers(min_value=1, max_value=10**6), st.integers(min_value=-30, max_value=6))
def test_format_duration_follows_the_rule_on_short_decimals_and_ties(mantissa, exponent):
    # Short decimals and dyadic fractions (m / 2**k) put the rounding digit on an exact tie.
    for seconds in (mantissa * 10.0**exponent, mantissa / 2.0 ** (-exponent + 10), float(f"{mantissa}e{exponent}")):
        _check(seconds)


def test_format_duration_follows_the_rule_on_log_normal_costs():
    rng = np.random.default_rng(17)
    for seconds in np.exp(rng.normal(np.log(20e-6), 3.0, 20000)):
        _check(float(seconds))


@settings(max_examples=300, deadline=None)
@given(
    st.from_regex(r"-?[0-9]{1,20}(\.[0-9]{0,20})?", fullmatch=True),
    st.sampled_from(sorted(TIME_UNITS)),
)
def test_seconds_from_matches_the_decimal_reference(text, unit):
    assert seconds_from(text, unit) == _reference_seconds_from(text, unit)


def test_seconds_from_matches_the_decimal_reference_on_seeded_texts():
    """The property above on 5,000 seeded texts of the same pattern (hypothesis explores its edges in 300
    examples; a plain generator covers the bulk at a hundredth of hypothesis's cost per example)."""
    rng = np.random.default_rng(23)
    units = sorted(TIME_UNITS)
    for _ in range(5000):
        digits = "".join(map(str, rng.integers(0, 10, rng.integers(1, 21))))
        if rng.random() < 0.7:
            digits += "." + "".join(map(str, rng.integers(0, 10, rng.integers(0, 21))))
        text = ("-" if rng.random() < 0.3 else "") + digits
        unit = units[rng.integers(len(units))]
        assert seconds_from(text, unit) == _reference_seconds_from(text, unit), (text, unit)


@pytest.mark.parametrize("text", ["1e5", "1.5E-3", "0." + "1" * 40, "-0", "1."])
def test_seconds_from_matches_on_exponents_and_long_text(text):
    for unit in TIME_UNITS:
        assert math.copysign(1, seconds_from(text, unit)) == math.copysign(1, _reference_seconds_from(text, unit))
        assert seconds_from(text, unit) == _reference_seconds_from(text, unit)


def test_an_exponent_beyond_decimal_reads_as_an_infinity_and_is_reported(tmp_path):
    # decimal's context stops at exponent 999999: past it scaleb overflowed (an internal error,
    # exit 2, before); the reader now gets an infinity and reports a duration that is not finite.
    assert seconds_from("17.13297e8055797723", "us") == math.inf
    assert seconds_from("-17.13297e8055797723", "us") == -math.inf
    assert seconds_from("1e-8055797723", "us") == 0.0  # underflow is not trapped: zero
    path = tmp_path / "big.gir"
    path.write_text(
        "module @m {\n  graph @main(%x : f32[2]) {\n"
        "    %y = onnx.Relu(%x) : (f32[2]) -> f32[2] [cost = 17.13297e8055797723us]\n"
        "    return %y\n  }\n}\n"
    )
    with pytest.raises(ParseError) as caught:
        parse_module(path.read_text(), str(path))
    first = caught.value.render().splitlines()[0]
    assert first == f"{path}:3:53: error: duration '17.13297e8055797723us' is not finite"


@pytest.mark.parametrize("value", [np.float64(1.5e-5), np.float64("inf"), 3])
def test_format_duration_of_numpy_scalars_and_ints(value):
    assert format_duration(value) == _reference_format_duration(value)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (1.9617886871104135e-05, "19.617886871104135us"),
        (8.972930726971609e-07, "897.2930726971609ns"),
        (1.112e-6, "1.112us"),
        (4.663999999999999e-06, "4.663999999999999us"),
        (-3.2e-7, "-320ns"),
    ],
)
def test_format_duration_never_falls_back_to_seconds_with_an_exponent(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    "seconds",
    [
        # The edges of format_duration's string-slicing fast path (1e-6 <= s < 1e16) and of its
        # cases: repr switches to an exponent below 1e-4 and at 1e16; a mantissa without a point
        # (5e-05); fractions of one to three digits in ms (0.5, 0.25, 0.125) and of up to six in
        # us above 1e-4 (0.00015); whole seconds ending in ".0".
        1e-6,
        9.999999999999999e-7,
        1.0000000000000002e-6,
        5e-06,
        1e-05,
        5e-05,
        9.999999999999999e-05,
        1e-4,
        0.00015,
        0.000123456,
        0.0009999999999999998,
        1e-3,
        0.0010005,
        0.0015,
        0.01,
        0.1,
        0.125,
        0.25,
        0.5,
        0.9999999999999999,
        1.0,
        2.0,
        10.0,
        123.0,
        100.5,
        17.131462508063702,
        9999999999999998.0,
        1e16,
        1.5e16,
    ],
)
def test_format_duration_fast_path_edges_follow_the_rule(seconds):
    _check(seconds)
    _check(-seconds)
