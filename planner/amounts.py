"""Whole numbers as people type them: ``128k``, ``1M``, ``1e6``, ``1,000,000``, ``25.6k``.

The suffix convention is vLLM's (``--max-model-len``, ``--kv-cache-memory-bytes``):
lowercase ``k m g t`` are powers of ten, uppercase ``K M G T`` powers of two
(``128K`` = 131,072, ``1M`` = 1,048,576, ``25.6k`` = 25,600); a fraction with a
binary suffix is refused, as vLLM refuses it. The value must come out a whole
number exactly (no float, no truncation), non-negative and below 2^63; anything
else is bad input naming the field.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Union

from csa_plan.planner.errors import I63_LIMIT, BadInput

if TYPE_CHECKING:
    from fractions import Fraction

# An exact value: a whole numeral is an int (a Rational with denominator 1), others a Fraction
# (fractions pulls in decimal: imported only for a fraction or a negative exponent, start-up).
Exact = Union[int, "Fraction"]

DECIMAL_SUFFIXES = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
BINARY_SUFFIXES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
SUFFIXES = {**DECIMAL_SUFFIXES, **BINARY_SUFFIXES}

SUFFIX_HELP = "k/m = 10^3/10^6, K/M = 2^10/2^20 (128k = 128,000, 128K = 131,072), 1e6 and 1,000,000 work too"

MAX_TEXT = 64
_NUMBER = re.compile(r"^([+-]?)((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:[eE]([+-]?[0-9]{1,4}))?\Z", re.ASCII)
_GROUPED = re.compile(r"^[+-]?[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]*)?\Z", re.ASCII)


def split_number(text: str) -> tuple[str, str] | None:
    """``'128k'`` -> ``('128', 'k')``; ``'80 GiB'`` -> ``('80', 'GiB')``; None when no number leads."""
    match = re.match(r"^[ \t]*([+-]?[0-9][0-9,_]*(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|[+-]?\.[0-9]+)[ \t]*([A-Za-z]*)[ \t]*\Z",
                     text, re.ASCII)
    return (match.group(1), match.group(2)) if match else None


def exact_number(text: str, source: str, field: str | None, what: str = "number") -> Exact:
    """The exact rational a numeral stands for: digits, ``_`` or grouped ``,`` separators,
    a fraction and a decimal exponent."""
    raw = text.strip()
    shown = raw if len(raw) <= 40 else raw[:37] + "..."
    if len(raw) > MAX_TEXT:
        digits = raw.lstrip("+").replace(",", "").replace("_", "")
        if digits.isascii() and digits.isdigit():
            raise BadInput(source, field, f"{shown} is too large (must be below 2^63)")
        raise BadInput(source, field, f"{shown!r} is too long to be a {what}")
    if "," in raw:
        if not _GROUPED.match(raw):
            raise BadInput(source, field, f"cannot read {what} {shown!r} (commas must group thousands: 1,000,000)")
        raw = raw.replace(",", "")
    raw = raw.replace("_", "")
    match = _NUMBER.match(raw)
    if not match:
        raise BadInput(source, field, f"{shown!r} is not a {what}")
    sign, digits, exponent = match.groups()
    e = int(exponent) if exponent else 0
    value: Exact
    if "." not in digits and e >= 0:  # a whole numeral: exact as an int
        value = int(digits)
        if value and e > 40:
            raise BadInput(source, field, f"{shown} is too large (must be below 2^63)")
        value *= 10**e
        return -value if sign == "-" else value
    from fractions import Fraction

    value = Fraction(digits) if "." not in digits else Fraction(digits.rstrip(".") or "0")
    if exponent:
        if value and e > 40:
            raise BadInput(source, field, f"{shown} is too large (must be below 2^63)")
        value = value * Fraction(10) ** e if e >= -40 else (Fraction(0) if not value else Fraction(1, 10**41))
    return -value if sign == "-" else value


def parse_count(text: str, source: str, field: str | None, what: str = "count") -> int:
    """A non-negative whole number below 2^63, with an optional k/m/g/t or K/M/G/T suffix."""
    raw = str(text).strip()
    shown = raw if len(raw) <= 40 else raw[:37] + "..."
    parts = split_number(raw)
    if parts is None or (parts[1] and parts[1] not in SUFFIXES):
        suffix = parts[1] if parts else ""
        hint = f" ({SUFFIX_HELP})"
        if suffix:
            from csa_plan.planner.suggest import did_you_mean

            unit = count_suffix_of_unit(suffix)  # 1MiB -> 1M: a byte unit where a count is asked for
            tail = f"; did you mean {parts[0] + unit!r}?" if unit else did_you_mean(suffix, SUFFIXES)
            hint = f" (suffixes: {SUFFIX_HELP}){tail}"
        raise BadInput(source, field, f"{shown!r} is not an integer{hint}")
    number, suffix = parts
    value = exact_number(number, source, field, what)
    if suffix in BINARY_SUFFIXES and value.denominator != 1:
        raise BadInput(source, field, f"{shown!r}: a fraction with a binary suffix is ambiguous; "
                       f"did you mean {number}{suffix.lower()}?")
    value *= SUFFIXES.get(suffix, 1)
    return checked_whole(value, shown, source, field, what)


def count_suffix_of_unit(unit: str) -> str | None:
    """The count suffix a byte unit stands for: ``MiB`` -> ``M`` (2^20), ``MB`` -> ``m`` (10^6); else None."""
    u = unit.casefold()
    if len(u) == 3 and u.endswith("ib") and u[0] in "kmgt":
        return u[0].upper()
    if len(u) == 2 and u.endswith("b") and u[0] in "kmgt":
        return u[0]
    return None


def checked_whole(value: Exact, shown: str, source: str, field: str | None, what: str) -> int:
    if value.denominator != 1:
        raise BadInput(source, field, f"{shown} is not a whole {what}")
    if value < 0:
        raise BadInput(source, field, f"{shown} is negative")
    if value >= I63_LIMIT:
        raise BadInput(source, field, f"{shown} is too large (must be below 2^63)")
    return int(value)
