"""Strict readers for integers and strings coming from files and options."""

from __future__ import annotations

from typing import Any

from .errors import I63_LIMIT, BadInput


def read_int(source: str, field: str, value: Any) -> int:
    """A non-negative integer below 2^63; bools, floats and strings are bad input."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadInput(source, field, f"expected a non-negative integer, got {_show(value)}")
    if value < 0:
        raise BadInput(source, field, f"expected a non-negative integer, got {value}")
    if value >= I63_LIMIT:
        raise BadInput(source, field, f"{value} is too large (must be below 2^63)")
    return value


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
