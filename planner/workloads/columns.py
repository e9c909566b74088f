"""Vectorised field parsers: one numpy pass per byte position over a chunk's fields.

Every parser takes the chunk as a ``uint8`` array ``b`` and the fields as parallel
``int64`` arrays ``start`` / ``end`` (``end`` exclusive, already trimmed), and returns
the values with an error code per field (``OK`` = 0). Only ASCII digits count as
digits (a Unicode digit is a byte >= 0x80, never a digit); integers are bounded by
their digit count before any arithmetic, so nothing overflows or wraps. Loops run
over byte positions (at most the longest field of the chunk), never over rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

OK = 0
EMPTY = 1
NOT_INTEGER = 2
NEGATIVE = 3
TOO_LARGE = 4
NOT_NUMBER = 5
NOT_STAMP = 6
BAD_DATE = 7
BAD_ZONE = 8
TOO_LONG = 9
BEYOND_CLOCK = 10

I63_MAX = (1 << 63) - 1
MAX_INT_DIGITS = 19  # 10^19 - 1 < 2^64: a 19-digit value fits uint64 before the 2^63 check
_SPACE = (32, 9, 13)
_ZERO, _NINE, _DOT, _QUOTE = 48, 57, 46, 34


PAD = 64  # zero bytes around a chunk: reads up to 64 bytes outside a field need no bounds check


class Bytes:
    """A chunk's bytes (zero-padded on both sides) with the tables the parsers share, built on demand."""

    def __init__(self, b: "np.ndarray", dots: bool = True) -> None:
        import numpy as np

        self.b = b
        self.p = np.zeros(-(-(len(b) + 2 * PAD) // 8) * 8 + 8, dtype=np.uint8)  # whole words, one spare
        self.p[PAD:PAD + len(b)] = b
        self.words = self.p.view(np.uint64)
        self._tables: dict[str, "np.ndarray"] = {}
        if not dots:  # the caller knows the chunk has no '.': no pass over it to find none
            self._tables["dots"] = np.zeros(0, dtype=np.int64)

    def at(self, pos: "np.ndarray") -> "np.ndarray":
        """Bytes at ``pos`` (within PAD of the chunk); outside the chunk they read as 0, never a digit."""
        return self.p[pos + PAD]

    def table(self, name: str) -> "np.ndarray":
        import numpy as np

        got = self._tables.get(name)
        if got is None:
            b = self.b
            if name == "dots":
                got = np.flatnonzero(b == _DOT)
            elif name == "nonzero":
                got = np.flatnonzero(b != _ZERO)
            elif name == "nondigit":  # prefix counts of bytes that are not ASCII digits
                got = np.zeros(len(b) + 1, dtype=np.int32)
                np.cumsum((b < _ZERO) | (b > _NINE), out=got[1:])
            else:  # "space": runs of spaces, tabs and CRs as (positions, run start, run end)
                sp = np.flatnonzero((b == 32) | (b == 9) | (b == 13))
                brk = np.flatnonzero(np.diff(sp) != 1) + 1 if sp.size else sp
                first = np.concatenate([[0], brk]).astype(np.int64)
                last = np.concatenate([brk - 1, [sp.size - 1]]).astype(np.int64) if sp.size else first
                run = np.zeros(sp.size, dtype=np.int64)
                if sp.size:
                    run[brk] = 1
                    run = np.cumsum(run)
                got = np.stack([sp, sp[first][run] if sp.size else sp, sp[last][run] + 1 if sp.size else sp])
            self._tables[name] = got
        return got

    def next_in(self, name: str, start: "np.ndarray", end: "np.ndarray") -> "np.ndarray":
        """The first position >= start listed in table ``name``, or ``end`` if none before it."""
        import numpy as np

        t = self.table(name)
        if not t.size:
            return end.copy()
        i = np.searchsorted(t, start)
        return np.minimum(np.where(i < t.size, t[np.minimum(i, t.size - 1)], end), end)

    def solid_from(self, start: "np.ndarray", end: "np.ndarray") -> "np.ndarray":
        """Past the run of spaces at ``start`` (never past ``end``)."""
        import numpy as np

        c = self.at(start)
        at_space = (start < end) & ((c == 32) | (c == 9) | (c == 13))
        if not at_space.any():
            return start
        sp, _, run_end = self.table("space")
        i = np.searchsorted(sp, start[at_space])
        out = start.copy()
        out[at_space] = run_end[i]
        return np.minimum(out, end)

    def solid_to(self, start: "np.ndarray", end: "np.ndarray") -> "np.ndarray":
        """Before the run of spaces that ends at ``end`` (never before ``start``)."""
        import numpy as np

        c = self.at(end - 1)
        at_space = (end > start) & ((c == 32) | (c == 9) | (c == 13))
        if not at_space.any():
            return end
        sp, run_start, _ = self.table("space")
        i = np.searchsorted(sp, end[at_space] - 1)
        out = end.copy()
        out[at_space] = run_start[i]
        return np.maximum(out, start)

    def nondigits(self, start: "np.ndarray", end: "np.ndarray") -> "np.ndarray":
        t = self.table("nondigit")
        return t[end] - t[start]


def _at(cb: Bytes, pos: "np.ndarray") -> "np.ndarray":
    return cb.at(pos)


def trim(cb: Bytes, start: "np.ndarray", end: "np.ndarray", unquote: bool = True) -> tuple["np.ndarray", "np.ndarray"]:
    """Strip ASCII spaces, tabs and CRs on both sides, then one pair of enclosing double quotes
    (and the spaces inside them): a binary search per padded field, whatever the padding."""
    s = cb.solid_from(start, end)
    e = cb.solid_to(s, end)
    if unquote:
        quoted = (e - s >= 2) & (_at(cb, s) == _QUOTE) & (_at(cb, e - 1) == _QUOTE)
        if quoted.any():
            s, e = s + quoted, e - quoted
            s = cb.solid_from(s, e)
            e = cb.solid_to(s, e)
    return s, e


def _horner(cb: Bytes, s: "np.ndarray", length: "np.ndarray", digits: int) -> tuple["np.ndarray", "np.ndarray"]:
    """The first ``min(length, digits)`` bytes from ``s`` as a decimal number, and whether any of
    them is not an ASCII digit: one right-aligned window of at most ``digits`` bytes per field,
    read column by column (no loop over rows)."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    n = len(s)
    used = np.clip(length, 0, digits)
    short = used <= 8
    if n and short.all():
        return _swar8(cb, s + used, used)
    if n and short.any():  # the short ones by words, the long ones below
        acc, bad = _swar8(cb, s + used, np.where(short, used, 0))
        long = np.flatnonzero(~short)
        acc[long], bad[long] = _horner(cb, s[long], length[long], digits)
        return acc, bad
    width = int(used.max()) if n else 0
    if width == 0:
        return np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=bool)
    window = sliding_window_view(cb.p, width)[s + used - width + PAD]  # (n, width) bytes ending at the last digit
    d = window - np.uint8(_ZERO)  # wraps below '0': > 9 is not a digit
    valid = np.arange(width) >= (width - used)[:, None]
    bad = ((d > 9) & valid).any(axis=1)
    d = np.where(valid, np.minimum(d, 9), 0)
    acc = d[:, 0].astype(np.uint64)
    for k in range(1, width):
        acc *= np.uint64(10)
        acc += d[:, k]
    return acc, bad


_ONES = 0x0101010101010101


def _swar8(cb: Bytes, end: "np.ndarray", used: "np.ndarray") -> tuple["np.ndarray", "np.ndarray"]:
    """Up to 8 digits ending at ``end`` read as one little-endian word each (two aligned word
    loads and shifts): the bytes before the field are replaced by '0', every byte is checked to
    be a digit, then three multiply-shift steps combine the eight digits (the classic SWAR parse)."""
    import numpy as np

    u = np.uint64
    x = end - 8 + PAD
    q = x >> 3
    r = ((x & 7) * 8).astype(np.uint64)
    w = (cb.words[q] >> r) | ((cb.words[q + 1] << (u(63) - r)) << u(1))
    keep, zeros = _swar_tables()
    w &= keep[used]
    w |= zeros[used]
    high = u(0xF0 * _ONES)
    bad = ((w & high) != u(0x30 * _ONES)) | (((w + u(0x06 * _ONES)) & high) != u(0x30 * _ONES))
    x = w - u(0x30 * _ONES)
    x = (x * u(10) + (x >> u(8))) & u(0x00FF00FF00FF00FF)
    x = (x * u(100) + (x >> u(16))) & u(0x0000FFFF0000FFFF)
    x = (x * u(10000) + (x >> u(32))) & u(0xFFFFFFFF)
    x[bad] = 0
    return x, bad & (used > 0)


_TABLES: list = []


def _swar_tables() -> tuple["np.ndarray", "np.ndarray"]:
    """Per digit count 0..8: the mask keeping the field's bytes, and '0' bytes in place of the rest."""
    import numpy as np

    if not _TABLES:
        low = [((1 << (8 * (8 - k))) - 1) for k in range(9)]
        keep = np.array([(~m) & 0xFFFFFFFFFFFFFFFF for m in low], dtype=np.uint64)
        zeros = np.array([m & (0x30 * _ONES) for m in low], dtype=np.uint64)
        _TABLES.extend([keep, zeros])
    return _TABLES[0], _TABLES[1]


def _tail_bad(cb: Bytes, s: "np.ndarray", length: "np.ndarray", digits: int) -> "np.ndarray":
    """Non-digits past the first ``digits`` bytes (only long fields look at the prefix-count table)."""
    import numpy as np

    out = np.zeros(len(s), dtype=bool)
    long = np.flatnonzero(length > digits)
    if long.size:
        out[long] = cb.nondigits(s[long] + digits, s[long] + length[long]) > 0
    return out


def _skip_zeros(cb: Bytes, s: "np.ndarray", end: "np.ndarray") -> "np.ndarray":
    """Past leading '0's, keeping one zero when only zeros (or a non-digit) follow."""
    import numpy as np

    lead = (end - s > 1) & (_at(cb, s) == _ZERO)
    if not lead.any():
        return s
    nxt = s.copy()
    idx = np.flatnonzero(lead)
    for _ in range(32):  # short runs step by step; longer ones (rare) through the table
        nxt[idx] += 1
        idx = idx[(nxt[idx] < end[idx]) & (_at(cb, nxt[idx]) == _ZERO)]
        if not idx.size:
            break
    if idx.size:
        nxt[idx] = cb.next_in("nonzero", nxt[idx], end[idx])
    c = _at(cb, nxt)
    back = (nxt >= end) | (c < _ZERO) | (c > _NINE)
    return np.where(lead, np.where(back, np.maximum(nxt - 1, s), nxt), s)


def parse_count(cb: Bytes, start: "np.ndarray", end: "np.ndarray") -> tuple["np.ndarray", "np.ndarray"]:
    """Non-negative integers below 2^63 (leading zeros allowed): (int64 values, error codes)."""
    import numpy as np

    n = len(start)
    err = np.zeros(n, dtype=np.uint8)
    neg = (end > start) & (_at(cb, start) == ord("-"))
    s = _skip_zeros(cb, start + neg, end)
    length = end - s
    acc, nondigit = _horner(cb, s, length, MAX_INT_DIGITS)
    nondigit |= _tail_bad(cb, s, length, MAX_INT_DIGITS)
    err[length == 0] = EMPTY
    err[length > MAX_INT_DIGITS] = TOO_LARGE
    err[(length <= MAX_INT_DIGITS) & (acc > np.uint64(I63_MAX))] = TOO_LARGE
    err[nondigit] = NOT_INTEGER
    err[neg & (err != NOT_INTEGER) & (length > 0)] = NEGATIVE
    err[neg & (length == 0)] = NOT_INTEGER
    values = np.where(err == OK, acc, 0).astype(np.int64)
    return values, err


def parse_decimal(cb: Bytes, start: "np.ndarray", end: "np.ndarray", unit_digits: int) -> tuple["np.ndarray", "np.ndarray"]:
    """Non-negative decimals ``123`` / ``123.4567`` in a unit of 10^unit_digits ns, as exact int64 ns.

    Fraction digits beyond a nanosecond are rounded half up; no exponent, sign or bare dot."""
    import numpy as np

    n = len(start)
    err = np.zeros(n, dtype=np.uint8)
    neg = (end > start) & (_at(cb, start) == ord("-"))
    s = _skip_zeros(cb, start, end)
    dot = cb.next_in("dots", s, end)
    has_dot = dot < end
    int_len = dot - s
    frac_len = np.where(has_dot, end - dot - 1, 0)
    ip, bad = _horner(cb, s, int_len, MAX_INT_DIGITS)
    bad |= _tail_bad(cb, s, int_len, MAX_INT_DIGITS)
    frac, bad_frac = _horner(cb, dot + 1, frac_len, unit_digits)
    bad |= bad_frac | _tail_bad(cb, dot + 1, frac_len, unit_digits)
    extra = _at(cb, dot + 1 + unit_digits)
    round_up = (frac_len > unit_digits) & (extra >= _ZERO + 5) & (extra <= _NINE)
    used = np.minimum(frac_len, unit_digits)
    frac = frac * (np.uint64(10) ** (unit_digits - used).astype(np.uint64)) + round_up.astype(np.uint64)
    unit = np.uint64(10 ** unit_digits)
    over = (int_len > MAX_INT_DIGITS) | (ip > np.uint64(I63_MAX // 10 ** unit_digits))
    total = np.where(over, np.uint64(0), ip) * unit + frac  # < 2^64: ip <= (2^63-1)/unit and frac <= unit
    over |= total > np.uint64(I63_MAX)
    err[bad | (int_len <= 0) | (has_dot & (frac_len == 0))] = NOT_NUMBER
    err[(err == OK) & over] = BEYOND_CLOCK
    err[end == start] = EMPTY
    err[neg] = NEGATIVE
    values = np.where(err == OK, total, 0).astype(np.int64)
    return values, err


_DIGIT_POS = (0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18)
_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def is_stamp(cb: Bytes, start: "np.ndarray", end: "np.ndarray") -> "np.ndarray":
    """Fields shaped like a date ('YYYY-' first): parsed by ``parse_stamp``, others as seconds."""
    return (end - start >= 5) & (_at(cb, start + 4) == ord("-"))


def parse_stamp(cb: Bytes, start: "np.ndarray", end: "np.ndarray") -> tuple["np.ndarray", "np.ndarray", "np.ndarray"]:
    """'YYYY-MM-DD HH:MM:SS[.f{1,9}][Z|+HH:MM|+HHMM]' (a 'T' may join date and time; no zone is UTC):
    (whole seconds since 1970 in UTC, fraction ns, error codes). Offsets must be under 24 hours."""
    import numpy as np

    n = len(start)
    err = np.zeros(n, dtype=np.uint8)
    length = end - start
    shape = length >= 19
    for k, ch in ((4, "-"), (7, "-"), (13, ":"), (16, ":")):
        shape &= _at(cb, start + k) == ord(ch)
    sep = _at(cb, start + 10)
    shape &= (sep == ord(" ")) | (sep == ord("T"))
    digits = {}
    for k in _DIGIT_POS:
        d = (_at(cb, start + k) - np.uint8(_ZERO)).astype(np.int64)
        shape &= (d >= 0) & (d <= 9)
        digits[k] = np.clip(d, 0, 9)
    year = digits[0] * 1000 + digits[1] * 100 + digits[2] * 10 + digits[3]
    month = digits[5] * 10 + digits[6]
    day = digits[8] * 10 + digits[9]
    hour = digits[11] * 10 + digits[12]
    minute = digits[14] * 10 + digits[15]
    second = digits[17] * 10 + digits[18]
    # the zone: Z, +HH:MM or +HHMM at the end
    last = _at(cb, end - 1)
    zone_len = np.zeros(n, dtype=np.int64)
    zone_len[last == ord("Z")] = 1
    sign6 = _at(cb, end - 6)
    colon = _at(cb, end - 3) == ord(":")
    six = (length >= 25) & ((sign6 == ord("+")) | (sign6 == ord("-"))) & colon
    sign5 = _at(cb, end - 5)
    five = (length >= 24) & ((sign5 == ord("+")) | (sign5 == ord("-"))) & ~six & (zone_len == 0)
    zone_len[six] = 6
    zone_len[five] = 5
    zsign = np.where(six, sign6, sign5)
    zh = np.zeros(n, dtype=np.int64)
    zm = np.zeros(n, dtype=np.int64)
    zone_ok = np.ones(n, dtype=bool)
    for mask, offs in ((six, (5, 4, 2, 1)), (five, (4, 3, 2, 1))):
        ds = [(_at(cb, end - o) - np.uint8(_ZERO)).astype(np.int64) for o in offs]
        good = np.all([(d >= 0) & (d <= 9) for d in ds], axis=0)
        zone_ok &= ~mask | good
        zh = np.where(mask, ds[0] * 10 + ds[1], zh)
        zm = np.where(mask, ds[2] * 10 + ds[3], zm)
    zone_ok &= (zh < 24) & (zm < 60)
    offset_s = (zh * 3600 + zm * 60) * np.where(zsign == ord("-"), -1, 1)
    offset_s[(zone_len == 0) | (zone_len == 1)] = 0
    # the fraction between the seconds and the zone: empty or '.' and 1..9 digits
    f_start = start + 19
    f_end = end - zone_len
    f_len = f_end - f_start
    has_frac = f_len > 0
    frac_ok = ~has_frac | ((_at(cb, f_start) == _DOT) & (f_len >= 2) & (f_len <= 10))
    frac = np.zeros(n, dtype=np.int64)
    live = np.flatnonzero(has_frac & frac_ok)
    k = 1
    while live.size:
        d = (_at(cb, f_start[live] + k) - np.uint8(_ZERO)).astype(np.int64)
        digit = (d >= 0) & (d <= 9)
        frac_ok[live[~digit]] = False
        frac[live] = frac[live] * 10 + np.clip(d, 0, 9)
        k += 1
        live = live[f_len[live] > k]
    frac = frac * 10 ** np.clip(10 - np.maximum(f_len, 1), 0, 9)
    frac[~has_frac] = 0
    leap = ((year % 4 == 0) & (year % 100 != 0)) | (year % 400 == 0)
    mdays = np.array(_DAYS, dtype=np.int64)[np.clip(month - 1, 0, 11)] + ((month == 2) & leap)
    date_ok = (year >= 1) & (month >= 1) & (month <= 12) & (day >= 1) & (day <= mdays) & (hour < 24) & (minute < 60) & (second < 60)
    # days from the civil date (H. Hinnant's algorithm), exact in int64
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    mp = (month + 9) % 12
    doy = (153 * mp + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    days = era * 146097 + doe - 719468
    seconds = days * 86400 + hour * 3600 + minute * 60 + second - offset_s
    err[~shape | ~frac_ok] = NOT_STAMP
    err[(err == OK) & ~date_ok] = BAD_DATE
    err[(err == OK) & ~zone_ok] = BAD_ZONE
    ok = err == OK
    return np.where(ok, seconds, 0), np.where(ok, frac, 0), err


def equals(cb: Bytes, start: "np.ndarray", end: "np.ndarray", value: bytes, fold: bool = True) -> "np.ndarray":
    """Fields equal to ``value`` (ASCII letters compared case-folded when ``fold``)."""
    import numpy as np

    want = value.lower() if fold else value
    out = (end - start) == len(want)
    idx = np.flatnonzero(out)
    for k, ch in enumerate(want):
        c = _at(cb, start[idx] + k)
        if fold:
            c = np.where((c >= 65) & (c <= 90), c + 32, c)
        same = c == ch
        out[idx[~same]] = False
        idx = idx[same]
    return out


def distinct(cb: Bytes, start: "np.ndarray", end: "np.ndarray") -> tuple[list[bytes], "np.ndarray"]:
    """The distinct field values of a chunk (exact bytes) and each field's index into them."""
    import numpy as np

    n = len(start)
    length = end - start
    h = length.astype(np.uint64)
    live = np.flatnonzero(length > 0)
    k = 0
    with np.errstate(over="ignore"):
        while live.size:
            h[live] = h[live] * np.uint64(1_000_003) + _at(cb, start[live] + k).astype(np.uint64)
            k += 1
            live = live[length[live] > k]
    keys, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    b = cb.b
    values = [b[start[i]:end[i]].tobytes() for i in first.tolist()]
    rep_start = start[first][inverse]
    same = length[first][inverse] == length
    live = np.flatnonzero(same & (length > 0))
    k = 0
    while live.size:
        differ = _at(cb, start[live] + k) != _at(cb, rep_start[live] + k)
        same[live[differ]] = False
        k += 1
        live = live[~differ & (length[live] > k)]
    if not same.all():  # a 64-bit hash collision: settle those fields exactly
        index = {v: i for i, v in enumerate(values)}
        inverse = inverse.copy()
        for i in np.flatnonzero(~same).tolist():
            v = b[start[i]:end[i]].tobytes()
            if v not in index:
                index[v] = len(values)
                values.append(v)
            inverse[i] = index[v]
    return values, inverse.astype(np.int64)
