"""Units and integer rounding: every byte and time conversion is defined here, once.

Bytes are Python ints and never rounded; these helpers are the only rounding the
planner does, and they round up (a buffer is never smaller than its content).
"""

from __future__ import annotations

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for ints, exact at any size (no float)."""
    return -(-a // b)


def round_up(n: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` that is at least ``n``."""
    return ceil_div(n, multiple) * multiple


def decimal_ratio(value: float | int) -> tuple[int, int]:
    """``(numerator, denominator)`` of the decimal ``str(value)`` writes (``0.92`` -> 92/100, ``1e-05``
    -> 1/100000): what ``Fraction(str(value))`` holds, without importing fractions (it pulls in
    decimal: start-up). The engines scale a card by the fraction as written, not by its binary float."""
    text = str(value)
    mantissa, _, exponent = text.lower().partition("e")
    whole, _, digits = mantissa.partition(".")
    try:
        numerator, e = int(whole + digits), int(exponent or 0)  # "-0" + "5" -> -5
    except ValueError:
        raise ValueError(f"not a finite decimal: {text!r}") from None
    denominator = 10 ** len(digits)
    if e >= 0:
        numerator *= 10**e
    else:
        denominator *= 10**-e
    return numerator, denominator


def scale_ceil(n: int, value: float | int) -> int:
    """``ceil(n x value)`` exactly, ``value`` read as the decimal it prints as (``decimal_ratio``)."""
    numerator, denominator = decimal_ratio(value)
    return ceil_div(n * numerator, denominator)


def scale_trunc(n: int, value: float | int) -> int:
    """``int(n x value)`` exactly (truncated toward zero), ``value`` read as the decimal it prints as."""
    numerator, denominator = decimal_ratio(value)
    product = n * numerator
    return product // denominator if product >= 0 else -(-product // denominator)
