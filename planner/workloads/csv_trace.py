"""CSV traces read in chunks: rows and fields found with numpy, never one Python object per row.

A chunk (4 MiB) ends at its last newline outside double quotes; its newlines and commas
are located once, each needed field is trimmed and parsed by ``columns`` in a few
vectorised passes, and the kept rows are appended to compact columns. A row's line
number is only computed when the row is reported. Every bad field of the first bad row
is reported together, in one bounded line.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator

from csa_plan.planner.errors import BadInput
from csa_plan.planner.workloads import columns as col
from csa_plan.planner.workloads.columnar import Columns
from csa_plan.planner.workloads.formats import (FORMATS, Container, TimeUnit, TraceFormat, detect, excerpt, fold,
                                                printable, with_columns)
from csa_plan.planner.workloads.workload import (MAX_FIELD_BYTES, MAX_LINE_BYTES, MAX_TRACE_CLASSES, TraceOptions,
                                                 TraceSummary, Workload)

if TYPE_CHECKING:
    import numpy as np

CHUNK_BYTES = 4 << 20  # rows are parsed this many bytes at a time
MAX_CLOCK_S = 9_223_372_035  # relative whole seconds that still fit int64 nanoseconds with a fraction
MIXED = 255  # an arrival of the other kind (a number among dates, or a date among numbers)


def resolve_format(container: Container, names: list[str], options: TraceOptions, source: str,
                   where: str) -> TraceFormat:
    """The format named by --format, else the one the header/first record shows; --columns and
    --time-unit applied on top. Unknown layouts are bad input naming what was found."""
    unit = TimeUnit(options.time_unit) if options.time_unit else None
    if options.format:
        fmt = FORMATS.get(options.format)
        if fmt is None:
            raise BadInput("options", "--format", f"unknown format {printable(options.format, 40)!r} "
                           f"(known: {', '.join(FORMATS)})")
        if fmt.container is not container:
            raise BadInput("options", "--format", f"{fmt.name} is a {fmt.container.value.upper()} format, "
                           f"but {source} is read as {container.value.upper()}")
    else:
        fmt = detect(container, names)
    if options.columns or unit is not None or fmt is None:
        if fmt is None and not options.columns:
            have = {fold(n) for n in names}
            near = max((f for f in FORMATS.values() if f.container is container),
                       key=lambda f: sum(fold(c) in have for c in f.required))
            if any(fold(c) in have for c in near.required) and container is Container.JSONL:
                return near  # the record reports what it lacks, with every other bad field
            if any(fold(c) in have for c in near.required):
                missing = [c for c in near.required if fold(c) not in have]
                raise BadInput(where, None, f"header lacks {', '.join(missing)} (got {_names(names)}; "
                               f"closest format: {near.name}), or map columns with --columns")
            known = "; ".join(f"{f.name}: {', '.join(f.required)}" for f in FORMATS.values() if f.container is container)
            raise BadInput(where, None, f"unrecognised {container.value.upper()} layout (found {_names(names)}); "
                           f"known formats ({known}), or map columns with --columns arrival=…,prompt=…,output=…")
        fmt = with_columns(fmt, container, options.columns, unit)
    return fmt


def _names(names: list[str]) -> str:
    shown = ", ".join(printable(n, 40) for n in names[:12])
    return shown + (f", … ({len(names)} in all)" if len(names) > 12 else "") if names else "nothing"


@dataclass
class _State:
    line: int = 2  # line number of the chunk's first byte
    rows: int = 0
    base_s: int | None = None  # whole seconds of the first date, the origin of date arrivals
    stamps: bool | None = None  # arrivals are dates (True) or numbers (False)
    last: int | None = None  # the previous kept arrival
    last_line: tuple = ()  # (chunk bytes, row start, chunk line) of the previous kept row
    unsorted: bool = False
    excluded_filter: int = 0
    excluded_failed: int = 0


class _CsvReader:
    def __init__(self, source: str, header: list[str], fmt: TraceFormat, options: TraceOptions, sort: bool,
                 capacity: int) -> None:
        self.source, self.fmt, self.options, self.sort = source, fmt, options, sort
        self.header = header
        folded = [fold(h) for h in header]
        seen: dict[str, int] = {}
        for k, name in enumerate(folded):  # which of two same-named columns holds a role is ambiguous
            if name and name in seen:
                raise BadInput(f"{source}:1", None, f"the header names the column {printable(header[k], 40)!r} twice "
                                                    f"(columns {seen[name] + 1} and {k + 1})")
            seen[name] = k
        missing = [c for c in fmt.required if fold(c) not in folded]
        if missing:
            raise BadInput(f"{source}:1", None, f"header lacks {', '.join(missing)} (got {_names(header)})")
        self.width = len(header)
        self.idx = {role: folded.index(fold(fmt.column(role))) for role in ("arrival", "prompt", "output")}
        self.model_idx = folded.index(fold(fmt.model)) if fmt.model else None
        spaced = [f.replace("_", " ") for f in folded]
        self.where = []
        for key, value in options.where:
            if key not in spaced:
                raise BadInput("options", "--where", f"no column {printable(key, 40)!r} in {source}'s header "
                               f"(columns: {_names(header)})")
            self.where.append((spaced.index(key), value.encode("utf-8")))
        read = set(self.idx.values()) | {j for j, _ in self.where} | ({self.model_idx} - {None})
        self.unread = [j for j in range(self.width) if j not in read]  # checked for length only
        self.cols = Columns(source, capacity)
        self.classes: dict[bytes, int] = {}
        self.st = _State()

    # -- one chunk ---------------------------------------------------------------------------
    def chunk(self, buf: bytes, final: bool) -> int:
        """Parse the complete rows of ``buf``; returns the bytes consumed (the rest is a partial row)."""
        import numpy as np

        b = np.frombuffer(buf, dtype=np.uint8)
        nl = np.flatnonzero(b == 10)
        all_nl = nl
        cm = np.flatnonzero(b == 44)
        q = np.flatnonzero(b == 34) if buf.find(b'"') >= 0 else np.zeros(0, dtype=np.int64)
        self.quoted = bool(q.size)
        if q.size:  # delimiters between an odd and an even quote are inside a quoted field
            nl = nl[(np.searchsorted(q, nl) & 1) == 0]
            cm = cm[(np.searchsorted(q, cm) & 1) == 0]
        consumed = int(nl[-1]) + 1 if nl.size else 0
        starts = np.concatenate([[0], nl[:-1] + 1]).astype(np.int64) if nl.size else np.zeros(0, dtype=np.int64)
        ends = nl.astype(np.int64)
        if final and consumed < len(b):
            starts = np.append(starts, consumed)
            ends = np.append(ends, len(b))
            consumed = len(b)
        elif len(b) - consumed > MAX_LINE_BYTES:
            line = self.st.line + buf.count(b"\n", 0, consumed)
            raise BadInput(f"{self.source}:{line}", None,
                           f"line longer than {MAX_LINE_BYTES:,} bytes (an unterminated quote?)")
        long = np.flatnonzero(ends - starts > MAX_LINE_BYTES)  # a whole row too, not only a partial one
        if long.size:
            r = int(long[0])
            raise BadInput(f"{self.source}:{self._line(b, int(starts[r]))}", None,
                           f"line of {int(ends[r] - starts[r]):,} bytes, longer than {MAX_LINE_BYTES:,} "
                           "(MAX_LINE_BYTES)")
        cm = cm[cm < consumed]  # a partial row's commas wait for the next chunk
        cb = col.Bytes(b, dots=buf.find(b".") >= 0)
        rs, re_ = col.trim(cb, starts, ends, unquote=False)
        keep = re_ > rs
        rs, re_ = rs[keep], re_[keep]
        if rs.size:
            self._rows(cb, rs, re_, cm)
        self.st.line += int(np.searchsorted(all_nl, consumed))
        return consumed

    def _line(self, b: "np.ndarray", pos: int) -> int:
        import numpy as np

        return self.st.line + int(np.count_nonzero(b[:pos] == 10))

    def _rows(self, cb: col.Bytes, rs: "np.ndarray", re_: "np.ndarray", cm: "np.ndarray") -> None:
        import numpy as np

        b = cb.b
        w = self.width
        n = len(rs)
        if cm.size == n * (w - 1) and (w == 1 or (
                (cm[::w - 1] > rs).all() and (cm[w - 2::w - 1] < re_).all())):
            wrong = np.zeros(0, dtype=np.int64)  # each row's w-1 commas lie inside it: every count is right
        else:
            row_of = np.searchsorted(rs, cm, side="right") - 1
            counts = np.bincount(row_of, minlength=n)[:n] if cm.size else np.zeros(n, dtype=np.int64)
            wrong = np.flatnonzero(counts != w - 1)
        m = int(wrong[0]) if wrong.size else len(rs)
        if m:
            self._fields(cb, rs[:m], re_[:m], cm[:m * (w - 1)].reshape(m, w - 1) if w > 1 else None)
        if wrong.size:
            r = m
            text = b[rs[r]:re_[r]].tobytes()
            raise BadInput(f"{self.source}:{self._line(b, int(rs[r]))}", None,
                           f"expected {w} comma-separated fields, got {int(counts[r]) + 1}: {excerpt(text, 60)}")

    def _field(self, cb, rs, re_, commas, j):
        """Field ``j`` of each row, trimmed, with its end cut at MAX_FIELD_BYTES for parsing
        (a longer field is reported with its length, unless what was parsed is bad already)."""
        import numpy as np

        start = rs if j == 0 else commas[:, j - 1] + 1
        end = re_ if j == self.width - 1 else commas[:, j]
        s, e = col.trim(cb, start.astype(np.int64), end.astype(np.int64), unquote=self.quoted)
        return s, e, np.minimum(e, s + MAX_FIELD_BYTES)

    def _fields(self, cb: col.Bytes, rs: "np.ndarray", re_: "np.ndarray", commas: "np.ndarray | None") -> None:
        import numpy as np

        st, fmt = self.st, self.fmt
        b = cb.b
        n = len(rs)
        if commas is not None and self.unread:  # the fields not parsed, within MAX_FIELD_BYTES (and two quotes)
            widths = (np.diff(np.column_stack([rs - 1, commas, re_]), axis=1) - 1)[:, self.unread]
            over = np.flatnonzero((widths > MAX_FIELD_BYTES + 2).any(axis=1))
            if over.size:
                r = int(over[0])
                k = int(np.argmax(widths[r] > MAX_FIELD_BYTES + 2))
                raise BadInput(f"{self.source}:{self._line(b, int(rs[r]))}", printable(self.header[self.unread[k]], 40),
                               f"field is {int(widths[r, k]):,} bytes long (limit {MAX_FIELD_BYTES:,}, "
                               "MAX_FIELD_BYTES)")
        spans = {role: self._field(cb, rs, re_, commas, j) for role, j in self.idx.items()}
        errors: list[tuple[str, "np.ndarray", "np.ndarray", "np.ndarray", "np.ndarray"]] = []
        # arrival: dates (Azure) or numbers in the format's unit
        s, e_full, e = spans["arrival"]
        stamp = col.is_stamp(cb, s, e)
        arrival = np.zeros(n, dtype=np.int64)
        aerr = np.zeros(n, dtype=np.uint8)
        if stamp.any():
            si = np.flatnonzero(stamp)
            secs, frac, err = col.parse_stamp(cb, s[si], e[si])
            good = err == col.OK
            if st.base_s is None and good.any():
                st.base_s = int(secs[np.argmax(good)])
            rel = secs - (st.base_s or 0)
            far = good & (np.abs(rel) > MAX_CLOCK_S)
            err[far] = col.BEYOND_CLOCK
            arrival[si] = np.where(err == col.OK, rel * 1_000_000_000 + frac, 0)
            aerr[si] = err
        if not stamp.all():
            ni = np.flatnonzero(~stamp)
            vals, err = col.parse_decimal(cb, s[ni], e[ni], fmt.unit.digits)
            arrival[ni] = vals
            aerr[ni] = err
        if st.stamps is None and n:
            st.stamps = bool(stamp[0])
        aerr[(stamp != st.stamps) & (aerr == col.OK)] = MIXED
        errors.append(("arrival", s, e_full, aerr, stamp))
        values = {"arrival": arrival}
        for role in ("prompt", "output"):
            s, e_full, e = spans[role]
            v, err = col.parse_count(cb, s, e)
            values[role] = v
            errors.append((role, s, e_full, err, None))
        for role, s, e, err, _ in errors:
            err[((e - s) > MAX_FIELD_BYTES) & (err == col.OK)] = col.TOO_LONG
        bad = np.zeros(n, dtype=bool)
        for _, _, _, err, _ in errors:
            bad |= err != col.OK
        if bad.any():
            self._report(b, rs, int(np.argmax(bad)), errors)
        # filters, failures, classes
        keep = np.ones(n, dtype=bool)
        for j, value in self.where:
            s, _, e = self._field(cb, rs, re_, commas, j)
            keep &= col.equals(cb, s, e, value)
        st.excluded_filter += int(n - keep.sum())
        if fmt.failures_when_output_zero and not self.options.keep_failures:
            failed = keep & (values["output"] == 0)
            st.excluded_failed += int(failed.sum())
            keep &= ~failed
        cls: "np.ndarray | int" = 0
        if self.model_idx is not None:
            s, e_full, e = self._field(cb, rs, re_, commas, self.model_idx)
            long = np.flatnonzero(e_full > e)
            if long.size:
                r = int(long[0])
                raise BadInput(f"{self.source}:{self._line(b, int(rs[r]))}", printable(self.header[self.model_idx], 40),
                               f"field is {int(e_full[r] - s[r]):,} bytes long (limit {MAX_FIELD_BYTES:,})")
            cls = self._classes(cb, s, e)[keep]
        st.rows += n
        kept = np.flatnonzero(keep)
        arr = arrival[kept]
        if arr.size:
            prev = np.concatenate([[st.last], arr[:-1]]) if st.last is not None else arr[:-1]
            cur = arr if st.last is not None else arr[1:]
            earlier = np.flatnonzero(cur < prev)
            if earlier.size and not st.unsorted:
                i = int(earlier[0]) + (0 if st.last is not None else 1)  # index into kept
                if not self.sort:
                    if i > 0:
                        prev_line = self._line(b, int(rs[kept[i - 1]]))
                    else:
                        pb, pos, base = st.last_line
                        prev_line = base + int(np.count_nonzero(pb[:pos] == 10))
                    raise BadInput(f"{self.source}:{self._line(b, int(rs[kept[i]]))}", None,
                                   f"arrival is earlier than line {prev_line}'s; timestamps must be sorted "
                                   "(pass --sort to sort them stably)")
                st.unsorted = True
            st.last = int(arr[-1])
            st.last_line = (b, int(rs[kept[-1]]), st.line)  # its line number is counted only if needed
        self.cols.append(arr, values["prompt"][kept], values["output"][kept], cls)

    def _classes(self, cb: col.Bytes, s: "np.ndarray", e: "np.ndarray") -> "np.ndarray":
        """Each row's class id: known values matched directly, new ones found with ``distinct``."""
        import numpy as np

        ids = np.full(len(s), -1, dtype=np.int32)
        for value, k in self.classes.items():
            ids[col.equals(cb, s, e, value, fold=False)] = k
        new = np.flatnonzero(ids < 0)
        if new.size:
            names, inverse = col.distinct(cb, s[new], e[new])
            local = []
            for name in names:
                if name not in self.classes:
                    if len(self.classes) >= MAX_TRACE_CLASSES:
                        raise BadInput(self.source, printable(self.fmt.model or "", 40),
                                       f"more than {MAX_TRACE_CLASSES} distinct values")
                    self.classes[name] = len(self.classes)
                local.append(self.classes[name])
            ids[new] = np.array(local, dtype=np.int32)[inverse]
        return ids

    def _report(self, b, rs, r: int, errors) -> None:
        problems = []
        for role, s, e, err, stamp in errors:
            code = int(err[r])
            if code == col.OK:
                continue
            raw = b[int(s[r]):int(e[r])].tobytes()
            name = printable(self.header[self.idx[role]], 40)
            problems.append((name, self._problem(role, code, raw, stamp is not None and bool(stamp[r]))))
        where = f"{self.source}:{self._line(b, int(rs[r]))}"
        first, rest = problems[0], problems[1:]
        text = first[1] + "".join(f"; {name}: {p}" for name, p in rest)
        raise BadInput(where, first[0], text)

    def _problem(self, role: str, code: int, raw: bytes, stamp: bool) -> str:
        ex = excerpt(raw)
        if code == col.TOO_LONG:
            return f"field is {len(raw):,} bytes long (limit {MAX_FIELD_BYTES:,})"
        if role == "arrival":
            unit = self.fmt.unit.value
            return {
                col.BAD_DATE: f"not a valid date and time: {ex}",
                col.BAD_ZONE: f"UTC offset out of range (hours under 24, minutes under 60): {ex}",
                col.NEGATIVE: f"must not be negative, got {ex}",
                col.BEYOND_CLOCK: f"{ex} is beyond the int64 nanosecond clock (about 292 years from the first arrival)",
                MIXED: f"mixes dates and numbers ({ex}); one trace uses one kind of timestamp",
            }.get(code, f"expected 'YYYY-MM-DD HH:MM:SS[.fraction][±HH:MM]' or a number of {unit}, got {ex}")
        return {
            col.NEGATIVE: f"token count is negative ({ex})",
            col.TOO_LARGE: f"{ex} is too large (must be below 2^63)",
        }.get(code, f"expected a non-negative integer token count, got {ex}")

    def finish(self) -> Workload:
        st, fmt = self.st, self.fmt
        excluded = []
        if st.excluded_filter:
            excluded.append(("--where", st.excluded_filter))
        if st.excluded_failed:
            excluded.append(("failed", st.excluded_failed))
        notes = []
        if st.excluded_failed:
            notes.append(f"{st.excluded_failed:,} failed requests ({fmt.output} = 0) left out; --keep-failures keeps them")
        if st.excluded_filter:
            shown = " and ".join(f"{printable(self.header[j], 40)} = {printable(v.decode('utf-8', 'replace'), 40)}"
                                 for j, v in self.where)
            notes.append(f"{st.excluded_filter:,} rows left out by --where {shown}")
        if st.unsorted:
            notes.append("rows were not in arrival order; sorted stably by timestamp (--sort)")
        if self.cols.n == 0:
            if st.rows:
                raise BadInput(self.source, None, f"no requests left: all {st.rows:,} rows were left out "
                               f"({'; '.join(notes)})")
            raise BadInput(self.source, None, "empty trace: no requests")
        names: tuple[str, ...] = ("trace",)
        if self.model_idx is not None:  # classes in order of first appearance among the kept rows
            import numpy as np

            cls = self.cols.cls[:self.cols.n]
            if len(self.classes) <= 16:  # a pass per class beats sorting millions of ids
                first = np.array([int(np.argmax(cls == k)) if (cls == k).any() else len(cls)
                                  for k in range(len(self.classes))], dtype=np.int64)
            else:
                first = np.full(len(self.classes), len(cls), dtype=np.int64)
                ids, at = np.unique(cls, return_index=True)
                first[ids] = at
            used = np.flatnonzero(first < len(cls))
            used = used[np.argsort(first[used])]
            remap = np.zeros(len(self.classes), dtype=np.int32)
            remap[used] = np.arange(len(used), dtype=np.int32)
            cls[:] = remap[cls]
            every = list(self.classes)
            names = tuple(printable(every[i].decode("utf-8", "replace"), 40) for i in used.tolist())
        fields = tuple(printable(self.header[self.idx[r]], 40) for r in ("arrival", "prompt", "output"))
        summary = TraceSummary(fmt.name, fmt.title, st.rows, tuple(excluded), fields=fields)
        return self.cols.workload(names, st.unsorted, notes, trace=summary)


def header_cells(line: bytes, source: str) -> list[str]:
    try:
        text = line.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{source}:1", None, f"header is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        cells = next(csv.reader([text.rstrip("\r")]), [])
    except csv.Error as exc:
        raise BadInput(f"{source}:1", None, f"malformed header ({exc})") from None
    return [c.strip().strip('"').strip() for c in cells]


def read_csv_blocks(blocks: Iterable[bytes], source: str, options: TraceOptions, *, sort: bool = False,
                    capacity: int = 1 << 16) -> Workload:
    """A CSV trace from an iterator of byte blocks (a file read in chunks, or one text)."""
    it: Iterator[bytes] = iter(blocks)
    buf = b""
    for block in it:
        buf += block
        if b"\n" in buf or len(buf) > MAX_LINE_BYTES:
            break
    cut = buf.find(b"\n")
    if cut < 0:
        cut = len(buf)
    if cut > MAX_LINE_BYTES:
        raise BadInput(f"{source}:1", None, f"header line longer than {MAX_LINE_BYTES:,} bytes")
    header = header_cells(buf[:cut], source)
    if not any(header):
        raise BadInput(source, None, "empty trace (expected a header, e.g. TIMESTAMP,ContextTokens,GeneratedTokens)")
    fmt = resolve_format(Container.CSV, header, options, source, f"{source}:1")
    reader = _CsvReader(source, header, fmt, options, sort, capacity)
    rest = buf[cut + 1:]
    for block in it:
        rest += block
        if len(rest) >= CHUNK_BYTES:
            used = reader.chunk(rest, final=False)
            rest = rest[used:]
    reader.chunk(rest, final=True)
    return reader.finish()
