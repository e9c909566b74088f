"""Strict readers for integers and strings coming from files and options.

Numbers written as text (options, ONNX metadata, names, resume records) go through
``parse_int_text`` / ``parse_float_text``: ASCII digits only (no Unicode digits, no
underscores), the length bounded *before* any conversion, the value bounded after.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from csa_plan.planner.errors import I63_LIMIT, BadInput
from csa_plan.planner.text import excerpt, kind_of

MAX_INT_DIGITS = 19
"""Decimal digits an integer may have (2^63 - 1 has 19); longer is refused unread."""

MAX_NUMBER_CHARS = 64
"""Characters a number written as text may have (sign, digits, point, exponent)."""

_INT_TEXT = re.compile(r"\+?0*([0-9]+)", re.ASCII)
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)



def shown_against(value: float, *bounds: float | None) -> str:
    """``value`` written as briefly as ``:g`` writes it, with as many more digits as it takes not to read as
    any of ``bounds`` (1000000.5 against an upper bound of 1e6 was "must be at most 1e+06, got 1e+06")."""
    try:
        text = f"{value:g}"
        others = {float(b) for b in bounds if b is not None}
        if value in others:
            return text
        shown = {f"{b:g}" for b in others}  # the bounds as the message writes them
        same = lambda t: float(t) in others or t in shown  # noqa: E731
        digits = 6
        while same(text) and digits < 17:
            digits += 3
            text = f"{value:.{digits}g}"
        return repr(value) if same(text) else text
    except (TypeError, ValueError):
        return str(value)


def shown_bound(bound: float) -> str:
    """A bound as ``:g`` writes it where that is exact, else every digit (2^20 is 1048576, not 1.04858e+06)."""
    text = f"{bound:g}"
    if float(text) == bound:
        return text
    return f"{int(bound):,}" if float(bound).is_integer() else repr(float(bound))

def parse_int_text(source: str, field: str, text: str, *, below: int = I63_LIMIT) -> int:
    """A non-negative decimal integer written with ASCII digits (leading zeros and a ``+`` allowed)."""
    if not isinstance(text, str):
        raise BadInput(source, field, f"expected an integer, got {kind_of(text)}")
    stripped = text.strip(" \t")
    if len(stripped) > MAX_NUMBER_CHARS:  # decide on a long text without converting or matching all of it
        body = stripped.lstrip("+").lstrip("0")
        if not (body.isascii() and body.isdigit()) and len(body) > MAX_NUMBER_CHARS:
            raise BadInput(source, field, f"expected a non-negative integer (ASCII digits), got {excerpt(text)}")
        if len(body) > MAX_INT_DIGITS and body.isascii() and body.isdigit():
            raise BadInput(source, field, f"{excerpt(body)} is too large ({len(body):,} digits; must be below {below:,})")
    match = _INT_TEXT.fullmatch(stripped)
    if match is None:
        if stripped.startswith("-") and _INT_TEXT.fullmatch(stripped[1:]):
            raise BadInput(source, field, f"must be non-negative, got {excerpt(text)}")
        raise BadInput(source, field, f"expected a non-negative integer (ASCII digits), got {excerpt(text)}")
    digits = match.group(1)
    if len(digits) > MAX_INT_DIGITS:
        shown = digits if len(digits) <= 40 else excerpt(digits)
        raise BadInput(source, field, f"{shown} is too large ({len(digits):,} digits; must be below {below:,})")
    value = int(digits)
    if value >= below:
        raise BadInput(source, field, f"{value} is too large (must be below {below:,})")
    return value


def parse_float_text(source: str, field: str, text: str, *, low: float, high: float,
                     low_open: bool = False) -> float:
    """A finite decimal number in [low, high] (or (low, high]); ``nan``, ``inf`` and hex floats are refused."""
    if not isinstance(text, str):
        raise BadInput(source, field, f"expected a number, got {kind_of(text)}")
    stripped = text.strip(" \t")
    if len(stripped) > MAX_NUMBER_CHARS or not _FLOAT_TEXT.fullmatch(stripped):
        raise BadInput(source, field, f"expected a finite decimal number, got {excerpt(text)}")
    return check_range(source, field, float(stripped), low=low, high=high, low_open=low_open)


def check_range(source: str, field: str, value: float, *, low: float, high: float, low_open: bool = False) -> float:
    """``value`` finite and within the documented range of its field."""
    if not math.isfinite(value):
        raise BadInput(source, field, f"expected a finite number, got {value!r}")
    if value > high and low == -high:  # only an upper bound is this check's to name
        raise BadInput(source, field, f"must be at most {shown_bound(high)}, got {shown_against(value, high)}")
    if value < low or (low_open and value == low) or value > high:
        lower = f"above {shown_bound(low)}" if low_open else f"at least {shown_bound(low)}"
        raise BadInput(source, field, f"must be {lower} and at most {shown_bound(high)}, got {shown_against(value, low, high)}")
    return value
from csa_plan.planner.suggest import did_you_mean


def read_int(source: str, field: str, value: Any) -> int:
    """A non-negative integer below 2^63; bools, floats and strings are bad input."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(source, field, f"expected a non-negative integer, got {_show(value)}")
    if value < 0:
        raise BadInput(source, field, f"expected a non-negative integer, got {excerpt(value)}")
    if value >= I63_LIMIT:
        raise BadInput(source, field, f"{excerpt(value)} is too large (must be below 2^63)")
    return value


def read_number(source: str, field: str, value: Any, *, positive: bool = False,
                at_least: float | None = None, at_most: float | None = None) -> float:
    """A finite, non-negative number (int or float); bools, strings and infinities are bad input."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInput(source, field, f"expected a number, got {_show(value)}")
    try:
        number = float(value)  # an integer beyond the float range overflows here
    except OverflowError:
        raise BadInput(source, field, f"number {excerpt(value)} is out of range") from None
    if not math.isfinite(number):
        raise BadInput(source, field, f"expected a finite number, got {value!r}")
    if number < 0 or (positive and number == 0):
        raise BadInput(source, field, f"must be {'positive' if positive else 'non-negative'}, got {shown_against(number, 0)}")
    if at_least is not None and number < at_least:
        raise BadInput(source, field, f"must be at least {shown_bound(at_least)}, got {shown_against(number, at_least)}")
    if at_most is not None and number > at_most:
        raise BadInput(source, field, f"must be at most {shown_bound(at_most)}, got {shown_against(number, at_most)}")
    return number


def read_mapping(source: str, field: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise BadInput(source, field or None, f"expected a mapping, got {kind_of(value)}")
    return value


def check_keys(source: str, field: str, data: Mapping[str, Any], allowed: set[str]) -> None:
    """Unknown keys are bad input: a typo never silently becomes a default."""
    unknown = sorted(str(k)[:200] for k in data if k not in allowed)
    if unknown:
        raise BadInput(source, f"{field}.{unknown[0]}" if field else unknown[0],
                       f"unknown key (known: {', '.join(sorted(allowed))}){did_you_mean(unknown[0], sorted(allowed))}")


def read_str(source: str, field: str, value: Any) -> str:
    if not isinstance(value, str):
        raise BadInput(source, field, f"expected a string, got {_show(value)}")
    return value


def read_bool(source: str, field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise BadInput(source, field, f"expected true or false, got {_show(value)}")
    return value


def _show(value: Any) -> str:
    return kind_of(value)
