"""Text from inputs made safe to show: escaped control characters, bounded excerpts.

Everything a file or an option says can reach a terminal (a message, a refusal, a
table cell). ``printable`` escapes what a terminal would act on instead of print —
C0 controls, DEL, C1 controls (CSI and OSC included, so no escape sequence survives),
line and paragraph separators and the bidirectional overrides that reorder a line —
and what a reader cannot see (zero-width and format characters, tags, fillers,
undecodable bytes) as ``\\x1b``/``\\u200b``/``\\U000e0041``-style escapes. ``excerpt``
quotes a bounded, escaped prefix and says how long the whole value was: ``'aaaa…' (104,857,600 characters)``.

Both are linear in the part of the text they keep, never in the whole input.
"""

from __future__ import annotations

import re
from typing import Any

EXCERPT_CHARS = 40
"""How many characters of an input value a message quotes at most."""

# What a terminal would act on, or what a reader cannot see, is shown as an escape:
# - every code point Python does not call printable: C0, DEL and C1 controls (0x9B CSI, 0x9D OSC),
#   format characters (zero-width space U+200B, soft hyphen U+00AD, the bidirectional controls
#   U+202A-U+202E and U+2066-U+2069, tag characters U+E0000-U+E007F, U+180E, a BOM), line and
#   paragraph separators, surrogates (undecodable bytes of a file name), private-use and
#   unassigned code points, and every space but U+0020;
# - the default-ignorable code points Python does call printable (U+034F combining grapheme
#   joiner, variation selectors, Hangul fillers) and the blank braille pattern U+2800: each renders
#   as nothing or as a space, so a name could hide a difference in them.
_HIDDEN_PRINTABLE_SET = ("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180d\u180f\u2800\u3164\ufe00-\ufe0f\uffa0"
                         "\U000e0100-\U000e01ef]")
_hidden_printable: list[re.Pattern[str]] = []  # compiled on the first non-ASCII character (start-up)
_TABLE_CACHE_MAX = 4096  # distinct code points remembered per table (bounded memory on any input)


def _escape(code: int) -> str:
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def is_hidden(char: str) -> bool:
    """Whether one character is shown escaped (see above)."""
    if not char.isprintable():
        return True
    if char.isascii():  # every code point of the set is beyond ASCII
        return False
    return _hidden().match(char) is not None


def _hidden() -> re.Pattern[str]:
    if not _hidden_printable:
        _hidden_printable.append(re.compile(_HIDDEN_PRINTABLE_SET))
    return _hidden_printable[0]


class _Escapes(dict):
    """A ``str.translate`` table filled on first sight of each code point (the whole range is
    never enumerated: start-up stays fast); misses beyond the cache bound are computed each time."""

    def __init__(self, keep: str) -> None:
        super().__init__()
        self.keep = keep

    def __missing__(self, code: int) -> str:
        char = chr(code)
        value = char if char in self.keep or not is_hidden(char) else _escape(code)
        if len(self) < _TABLE_CACHE_MAX:
            self[code] = value
        return value


_TABLE = _Escapes("")
_TABLE_KEEP_LINES = _Escapes("\n\t")


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every control, format, invisible and escape-sequence character escaped.

    ``keep_newlines`` leaves ``\\n`` and ``\\t`` alone (for multi-line rendered output);
    by default they are escaped too, so the result is always one line.
    """
    if not isinstance(text, str):
        text = str(text)
    if text.isprintable() and (text.isascii() or _hidden().search(text) is None):  # the common case, in C
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
