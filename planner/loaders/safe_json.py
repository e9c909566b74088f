"""JSON loading with the same bounds as YAML: strict, bounded, plain data.

The standard library parser with hooks: a duplicate key in an object is bad input
(it would silently take the last value); ``NaN``, ``Infinity`` and numbers that
overflow to infinity are refused; an integer longer than MAX_INT_DIGITS digits or a
number longer than MAX_NUMBER_CHARS characters is refused before it is converted.
The parsed value is then checked by ``check_tree`` (depth, string lengths,
collection sizes), the bounds every structured input shares.
"""

from __future__ import annotations

import json
import math
from typing import Any

from csa_plan.planner.errors import BadInput
from csa_plan.planner.limits import (MAX_COLLECTION_ITEMS, MAX_DEPTH, MAX_INT_DIGITS, MAX_NUMBER_CHARS,
                                     MAX_STRING_CHARS)
from csa_plan.planner.text import excerpt


class _Problem(Exception):
    def __init__(self, field: str | None, problem: str) -> None:
        super().__init__(problem)
        self.field, self.problem = field, problem


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Problem(key, "duplicate key (an object names it twice)")
        out[key] = value
    return out


class Oversized:
    """An integer literal with more than MAX_INT_DIGITS digits, kept unconverted until
    ``check_tree`` reports it with the field it belongs to."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _int(text: str) -> int | Oversized:
    digits = text.lstrip("-").lstrip("0") or "0"
    if len(digits) > MAX_INT_DIGITS:
        return Oversized(len(digits))
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise _Problem(None, f"a number of {len(text):,} characters (limit MAX_NUMBER_CHARS = {MAX_NUMBER_CHARS})")
    value = float(text)
    if not math.isfinite(value):
        raise _Problem(None, f"the number {excerpt(text)} overflows to infinity")
    return value


def _constant(name: str) -> float:
    raise _Problem(None, f"{name} is not a number JSON allows (a finite number is needed)")


def load_json(text: str, source: str) -> Any:
    """Parse ``text`` strictly; every problem is one BadInput naming ``source``."""
    try:
        data = json.loads(text, object_pairs_hook=_pairs, parse_int=_int, parse_float=_float,
                          parse_constant=_constant)
    except _Problem as exc:
        raise BadInput(source, exc.field, exc.problem) from None
    except json.JSONDecodeError as exc:
        raise BadInput(source, None, f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise BadInput(source, None, f"malformed JSON: nesting too deep (limit MAX_DEPTH = {MAX_DEPTH})") from None
    except ValueError as exc:
        raise BadInput(source, None, f"malformed JSON: {str(exc).split(';')[0][:200]}") from None
    check_tree(data, source)
    return data


def check_tree(data: Any, source: str, *, max_depth: int = MAX_DEPTH, max_string: int = MAX_STRING_CHARS,
               max_items: int = MAX_COLLECTION_ITEMS) -> None:
    """Depth, string length and collection size of parsed plain data, without recursion.

    Shared containers (YAML aliases) are walked once; a container that contains itself
    is bad input.
    """
    stack: list[tuple[Any, int, str]] = [(data, 1, "")]
    seen: set[int] = set()
    while stack:
        value, depth, where = stack.pop()
        if isinstance(value, str):
            if len(value) > max_string:
                raise BadInput(source, where or None, f"a string of {len(value):,} characters "
                                                      f"(limit MAX_STRING_CHARS = {max_string:,})")
            continue
        if isinstance(value, Oversized):
            raise BadInput(source, where or None, f"an integer of {value.digits:,} digits is too large "
                                                  f"(limit MAX_INT_DIGITS = {MAX_INT_DIGITS})")
        if not isinstance(value, (dict, list)):
            continue
        if id(value) in seen:
            continue
        seen.add(id(value))
        if depth > max_depth:
            raise BadInput(source, where or None, f"nesting deeper than {max_depth} levels (limit MAX_DEPTH)")
        if len(value) > max_items:
            raise BadInput(source, where or None, f"{len(value):,} entries (limit MAX_COLLECTION_ITEMS = {max_items:,})")
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and len(key) > max_string:
                    raise BadInput(source, where or None, f"a key of {len(key):,} characters "
                                                          f"(limit MAX_STRING_CHARS = {max_string:,})")
                stack.append((item, depth + 1, f"{where}.{key}" if where else str(key)))
        else:
            for i, item in enumerate(value):
                stack.append((item, depth + 1, f"{where}[{i}]"))
