"""The fast duration formatter prints exactly what the numpy-based one printed, for every float.

``format_duration`` used to try ``np.format_float_positional`` at 1, 2, ... 17 significant digits
and check each candidate through :mod:`decimal`; printed `.gir` bytes must not change, so the old
function is kept here as the reference and compared over random, tie-prone and extreme floats.
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


def _reference_seconds_from(text: str, unit: str) -> float:
    return float(decimal.Decimal(text).scaleb(TIME_UNITS[unit]))


def _reference_format_duration(seconds: float) -> str:
    """The formatter as it was before the scale work (numpy Dragon4 at increasing precision)."""
    if seconds == 0:
        return "0s"
    if not math.isfinite(seconds):
        return f"{seconds!r}s"
    magnitude = abs(seconds)
    if magnitude < 1e-6:
        unit = "ns"
    elif magnitude < 1e-3:
        unit = "us"
    elif magnitude < 1.0:
        unit = "ms"
    else:
        unit = "s"
    scaled = float(decimal.Decimal(seconds).scaleb(-TIME_UNITS[unit]))
    for digits in range(1, 18):
        text = np.format_float_positional(scaled, precision=digits, unique=False, fractional=False, trim="-")
        if _reference_seconds_from(text, unit) == seconds:
            return text + unit
    return f"{seconds!r}s"


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
def test_format_duration_matches_the_numpy_reference(seconds):
    assert format_duration(seconds) == _reference_format_duration(seconds)


@settings(max_examples=2000, deadline=None)
@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_format_duration_matches_on_any_bit_pattern(bits):
    (seconds,) = struct.unpack("<d", struct.pack("<Q", bits))
    assert format_duration(seconds) == _reference_format_duration(seconds)


@settings(max_examples=2000, deadline=None)
@given(st.integers(min_value=1, max_value=10**6), st.integers(min_value=-30, max_value=6))
def test_format_duration_matches_on_short_decimals_and_ties(mantissa, exponent):
    # Short decimals and dyadic fractions (m / 2**k) put the rounding digit on an exact tie.
    for seconds in (mantissa * 10.0**exponent, mantissa / 2.0 ** (-exponent + 10), float(f"{mantissa}e{exponent}")):
        assert format_duration(seconds) == _reference_format_duration(seconds)


def test_format_duration_matches_on_log_normal_costs():
    rng = np.random.default_rng(17)
    for seconds in np.exp(rng.normal(np.log(20e-6), 3.0, 20000)):
        assert format_duration(float(seconds)) == _reference_format_duration(float(seconds))


@settings(max_examples=2000, deadline=None)
@given(
    st.from_regex(r"-?[0-9]{1,20}(\.[0-9]{0,20})?", fullmatch=True),
    st.sampled_from(sorted(TIME_UNITS)),
)
def test_seconds_from_matches_the_decimal_reference(text, unit):
    assert seconds_from(text, unit) == _reference_seconds_from(text, unit)


@pytest.mark.parametrize("text", ["1e5", "1.5E-3", "0." + "1" * 40, "-0", "1."])
def test_seconds_from_matches_on_exponents_and_long_text(text):
    for unit in TIME_UNITS:
        assert math.copysign(1, seconds_from(text, unit)) == math.copysign(1, _reference_seconds_from(text, unit))
        assert seconds_from(text, unit) == _reference_seconds_from(text, unit)


@pytest.mark.parametrize("value", [np.float64(1.5e-5), np.float64("inf"), 3])
def test_format_duration_matches_on_numpy_scalars_and_ints(value):
    assert format_duration(value) == _reference_format_duration(value)
