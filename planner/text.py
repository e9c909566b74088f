"""Text from inputs made safe to show: escaped control characters, bounded excerpts.

Everything a file or an option says can reach a terminal (a message, a refusal, a
table cell). ``printable`` escapes what a terminal would act on instead of print —
C0 controls, DEL, C1 controls (CSI and OSC included, so no escape sequence survives),
line and paragraph separators and the bidirectional overrides that reorder a line —
as ``\\x1b``/``\\u2028``-style escapes. ``excerpt`` quotes a bounded, escaped prefix and
says how long the whole value was: ``'aaaa…' (104,857,600 characters)``.

Both are linear in the part of the text they keep, never in the whole input.
"""

from __future__ import annotations

from typing import Any

EXCERPT_CHARS = 40
"""How many characters of an input value a message quotes at most."""

# Code points a terminal interprets or that change how the line around them reads.
_UNSAFE = (
    set(range(0x00, 0x20)) | {0x7F} | set(range(0x80, 0xA0))  # C0, DEL, C1 (0x9B CSI, 0x9D OSC)
    | {0x2028, 0x2029, 0x85}  # line / paragraph separators (NEL is C1 too)
    | set(range(0x202A, 0x202F)) | set(range(0x2066, 0x206A)) | {0x200E, 0x200F, 0x061C}  # bidi controls
    | {0xFEFF}  # a BOM in the middle of a line is invisible
)


def _escape(code: int) -> str:
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


_TABLE: dict[int, str] = {c: _escape(c) for c in _UNSAFE}
_TABLE_KEEP_LINES: dict[int, str] = {c: e for c, e in _TABLE.items() if c not in (0x0A, 0x09)}


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every control character and escape-sequence introducer escaped.

    ``keep_newlines`` leaves ``\\n`` and ``\\t`` alone (for multi-line rendered output);
    by default they are escaped too, so the result is always one line.
    """
    if not isinstance(text, str):
        text = str(text)
    if text.isprintable():  # the common case, in C: nothing below is printable
        return text
    return text.translate(_TABLE_KEEP_LINES if keep_newlines else _TABLE)


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """A quoted, escaped, bounded rendering of an input value for a message.

    Strings: ``'abc'`` when short, ``'abcd…' (104,857,600 characters)`` when not.
    Containers are described, never expanded: ``a list of 3 items``. Integers with
    many digits are cut the same way (``123456…' (5,000 digits)``).
    """
    if isinstance(value, str):
        if len(value) <= limit:
            return "'" + printable(value) + "'"
        return "'" + printable(value[:limit]) + f"…' ({len(value):,} characters)"
    if isinstance(value, (bytes, bytearray)):
        head = bytes(value[:limit]).decode("utf-8", "replace")
        shown = "'" + printable(head) + ("…'" if len(value) > limit else "'")
        return shown + (f" ({len(value):,} bytes)" if len(value) > limit else "")
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        if value.bit_length() <= 128:
            return str(value)
        digits = value.bit_length() * 30103 // 100000  # about log10(2) per bit: no 4,300-digit conversion
        return f"an integer of about {digits:,} digits"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return f"a mapping of {len(value):,} keys" if len(value) != 1 else "a mapping of 1 key"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value):,} items" if len(value) != 1 else "a list of 1 item"
    return f"a {type(value).__name__}"


def bounded(value: str, limit: int = EXCERPT_CHARS) -> str:
    """A value for a record field: as is (escaped) when short, an ``excerpt`` when long."""
    return printable(value) if len(value) <= limit else excerpt(value, limit)


def clip(text: str, limit: int) -> str:
    """``printable(text)`` cut to at most ``limit`` characters, the middle elided (a file name
    keeps its start and its end)."""
    if len(text) > 4 * limit:  # never escape more than a bounded part
        text = text[:2 * limit] + text[-2 * limit:]
    text = printable(text)
    if len(text) <= limit:
        return text
    half = (limit - 1) // 2
    return f"{text[:half]}…{text[len(text) - half:]}"


def kind_of(value: Any) -> str:
    """A value's type and a bounded excerpt, for "expected X, got ..." messages."""
    if isinstance(value, (dict, list, tuple)):
        return excerpt(value)
    return f"{type(value).__name__} {excerpt(value)}"
