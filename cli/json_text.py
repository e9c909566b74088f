"""``--json`` documents as text: exactly ``json.dumps(doc, indent=2)``, in about half the time.

The standard library's C encoder does not indent, so ``indent=2`` runs its pure-Python
generator chain, a few milliseconds per check document (tens of thousands of values).
This writer is one recursive pass over the JSON types a report holds (dict, list, tuple,
str, int, float, bool, None, and their subclasses, as ``json`` treats them); anything
else, or nesting too deep, is handed to ``json.dumps`` itself, so its output and its
errors stay the reference. ``tests/cli/test_json_text.py`` compares the two.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from typing import Any

_INFINITY = float("inf")


class _NotPlain(Exception):
    """A value this writer does not write: ``json.dumps`` decides."""


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value == _INFINITY:
        return "Infinity"
    if value == -_INFINITY:
        return "-Infinity"
    return float.__repr__(value)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return encode_basestring_ascii(key)
    if key is True:
        return '"true"'
    if key is False:
        return '"false"'
    if key is None:
        return '"null"'
    if isinstance(key, int):
        return f'"{int.__repr__(key)}"'
    if isinstance(key, float):
        return f'"{_float(key)}"'
    raise _NotPlain


def dumps_indented(doc: Any) -> str:
    """``json.dumps(doc, indent=2)``, byte for byte."""
    out: list[str] = []
    put = out.append

    def write(value: Any, pad: str) -> None:
        if isinstance(value, str):
            put(encode_basestring_ascii(value))
        elif value is None:
            put("null")
        elif value is True:
            put("true")
        elif value is False:
            put("false")
        elif isinstance(value, int):
            put(int.__repr__(value))
        elif isinstance(value, float):
            put(_float(value))
        elif isinstance(value, dict):
            if not value:
                put("{}")
                return
            inner = pad + "  "
            sep = "{" + inner
            for key, item in value.items():
                put(sep)
                put(_key(key))
                put(": ")
                write(item, inner)
                sep = "," + inner
            put(pad)
            put("}")
        elif isinstance(value, (list, tuple)):
            if not value:
                put("[]")
                return
            inner = pad + "  "
            sep = "[" + inner
            for item in value:
                put(sep)
                write(item, inner)
                sep = "," + inner
            put(pad)
            put("]")
        else:
            raise _NotPlain

    try:
        write(doc, "\n")
    except (_NotPlain, RecursionError):
        return json.dumps(doc, indent=2)
    return "".join(out)
