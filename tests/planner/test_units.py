"""Exact decimal scaling (planner/units.py): what ``Fraction(str(value))`` gives, without fractions."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from csa_plan.planner.units import decimal_ratio, scale_ceil, scale_trunc

FINITE = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-10**6, 10**6) \
    | st.floats(0, 1).map(lambda f: round(f, 3))
CARDS = st.sampled_from([1, 7, 85_899_345_920, 150_754_820_096, 191_537_135_616]) | st.integers(0, 1 << 45)


@settings(max_examples=500, deadline=None)
@given(FINITE, CARDS)
def test_as_fraction_reads_the_printed_decimal(value, card):
    numerator, denominator = decimal_ratio(value)
    assert Fraction(numerator, denominator) == Fraction(str(value))
    assert scale_ceil(card, value) == math.ceil(card * Fraction(str(value)))
    assert scale_trunc(card, value) == int(Fraction(card) * Fraction(str(value)))


def test_engine_fractions_as_written():
    assert decimal_ratio(0.92) == (92, 100) and decimal_ratio(1e-05) == (1, 100000)
    assert scale_ceil(150_754_820_096, 0.92) == math.ceil(150_754_820_096 * Fraction("0.92"))
    assert scale_trunc(-7, 0.5) == -3  # toward zero, as int() of a Fraction


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_is_refused(value):
    with pytest.raises(ValueError):
        decimal_ratio(value)
