"""Strict readers for integers and strings coming from files and options."""

from __future__ import annotations

import math
from typing import Any, Mapping

from csa_plan.planner.errors import I63_LIMIT, BadInput


def read_int(source: str, field: str, value: Any) -> int:
    """A non-negative integer below 2^63; bools, floats and strings are bad input."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(source, field, f"expected a non-negative integer, got {_show(value)}")
    if value < 0:
        raise BadInput(source, field, f"expected a non-negative integer, got {value}")
    if value >= I63_LIMIT:
        raise BadInput(source, field, f"{value} is too large (must be below 2^63)")
    return value


def read_number(source: str, field: str, value: Any, *, positive: bool = False,
                at_most: float | None = None) -> float:
    """A finite, non-negative number (int or float); bools, strings and infinities are bad input."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInput(source, field, f"expected a number, got {_show(value)}")
    try:
        number = float(value)  # an integer beyond the float range overflows here
    except OverflowError:
        raise BadInput(source, field, f"number {str(value)[:40]}... is out of range") from None
    if not math.isfinite(number):
        raise BadInput(source, field, f"expected a finite number, got {value!r}")
    if number < 0 or (positive and number == 0):
        raise BadInput(source, field, f"must be {'positive' if positive else 'non-negative'}, got {value}")
    if at_most is not None and number > at_most:
        raise BadInput(source, field, f"must be at most {at_most:g}, got {value}")
    return number


def read_mapping(source: str, field: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise BadInput(source, field or None, f"expected a mapping, got {type(value).__name__}")
    return value


def check_keys(source: str, field: str, data: Mapping[str, Any], allowed: set[str]) -> None:
    """Unknown keys are bad input: a typo never silently becomes a default."""
    unknown = sorted(str(k) for k in data if k not in allowed)
    if unknown:
        raise BadInput(source, f"{field}.{unknown[0]}" if field else unknown[0],
                       f"unknown key (known: {', '.join(sorted(allowed))})")


def read_str(source: str, field: str, value: Any) -> str:
    if not isinstance(value, str):
        raise BadInput(source, field, f"expected a string, got {_show(value)}")
    return value


def read_bool(source: str, field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise BadInput(source, field, f"expected true or false, got {_show(value)}")
    return value


def _show(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"
