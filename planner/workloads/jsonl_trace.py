"""JSONL traces (ours, Mooncake / FAST'25, Qwen Bailian) read in bounded chunks.

Each record is one JSON object on a line (at most ``MAX_LINE_BYTES``); numbers keep
their exact decimal value (``Decimal``), NaN/Infinity and duplicate keys are bad input,
nesting too deep for the parser is bad input. Records are decoded a chunk at a time and
their values land in numpy columns, so memory grows with the kept requests only.
Mooncake ``hash_ids`` (ids of 512-token prefix blocks) are kept, concatenated, and
summarised as the fraction of blocks an unbounded prefix cache would reuse.
"""

from __future__ import annotations

import json
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, Iterable

from csa_plan.planner.errors import I63_LIMIT, BadInput
from csa_plan.planner.workloads.columnar import Columns
from csa_plan.planner.workloads.csv_trace import resolve_format
from csa_plan.planner.workloads.formats import Container, TraceFormat, excerpt, fold, printable
from csa_plan.planner.workloads.workload import (MAX_HASH_IDS, MAX_LINE_BYTES, MAX_REPLAY_HASH_IDS, MAX_TRACE_HASH_IDS, PrefixSummary, TraceOptions,
                                                 TraceSummary, Workload)

if TYPE_CHECKING:
    import numpy as np

CHUNK_RECORDS = 8192


class _Duplicate(ValueError):
    pass


def _object(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _Duplicate(k)
            seen.add(k)
    return out


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number here")


def _decode_many(lines: list[tuple[int, bytes]], source: str) -> list[tuple[int, dict]]:
    """Records of a chunk with one ``json.loads``; any doubt (a parse error, a record that is
    not a flat object, a possible duplicate key) sends the chunk through ``_decode`` line by line."""
    try:
        rows = json.loads(b"[" + b",".join(part for _, part in lines) + b"]", parse_float=Decimal,
                          parse_constant=_constant)
    except (ValueError, ArithmeticError, RecursionError):
        rows = None
    if rows is not None and len(rows) == len(lines):
        for (_, part), row in zip(lines, rows):
            # every '":' a key, and every key once: otherwise let the strict path decide
            if type(row) is not dict or part.count(b'":') != len(row):
                rows = None
                break
    if rows is None or len(rows) != len(lines):
        return [(number, _decode(part, f"{source}:{number}")) for number, part in lines]
    return [(number, row) for (number, _), row in zip(lines, rows)]


def _decode(line: bytes, where: str) -> dict:
    try:
        row = json.loads(line, parse_float=Decimal, parse_constant=_constant, object_pairs_hook=_object)
    except _Duplicate as exc:
        raise BadInput(where, printable(str(exc), 40), "duplicate key") from None
    except json.JSONDecodeError as exc:
        raise BadInput(where, None, f"malformed JSON: {exc.msg}") from None
    except RecursionError:
        raise BadInput(where, None, "malformed JSON: nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise BadInput(where, None, f"not UTF-8 text ({exc.reason})") from None
    except (ValueError, ArithmeticError) as exc:  # NaN, or a number Python or Decimal cannot hold
        reason = str(exc) if "not a number" in str(exc) else f"number out of range ({type(exc).__name__})"
        raise BadInput(where, None, f"malformed JSON: {reason}") from None
    if not isinstance(row, dict):
        raise BadInput(where, None, "expected a JSON object")
    return row


def _get(row: dict, key: str) -> tuple[bool, Any]:
    if key in row:
        return True, row[key]
    want = fold(key)
    for k, v in row.items():
        if fold(k) == want:
            return True, v
    return False, None


def _show(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    return excerpt(str(value)) if isinstance(value, str) else excerpt(json.dumps(value, default=str))


_INT_ONLY = {int}


class _JsonlReader:
    def __init__(self, source: str, fmt: TraceFormat, sort: bool, capacity: int) -> None:
        self.source, self.fmt, self.sort = source, fmt, sort
        self.unit = Decimal(10) ** fmt.unit.digits
        self.scale = 10 ** fmt.unit.digits
        self.cols = Columns(source, capacity)
        self.rows = 0
        self.last: int | None = None
        self.last_line = 0
        self.unsorted = False
        self.hash_parts: list["np.ndarray"] = []
        self.hash_count = 0
        self.hash_buf: "np.ndarray | None" = None  # past MAX_REPLAY_HASH_IDS: one buffer, committed as written
        self.hash_at = 0
        self.hash_lengths: list["np.ndarray"] = []

    def _arrival(self, value: Any) -> tuple[int | None, str | None]:
        if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
            return None, f"expected a number of {self.fmt.unit.value}, got {_show(value)}"
        if value < 0:
            return None, f"must not be negative, got {excerpt(str(value))}"
        if isinstance(value, int):
            ns = value * self.scale if value < I63_LIMIT else I63_LIMIT
        else:
            if not value.is_finite() or value.adjusted() > 20:
                return None, f"{excerpt(str(value))} is beyond the int64 nanosecond clock"
            try:
                ns = int((value * self.unit).to_integral_value(rounding=ROUND_HALF_UP))
            except (InvalidOperation, OverflowError):
                return None, f"{excerpt(str(value))} is beyond the int64 nanosecond clock"
        if ns >= I63_LIMIT:
            return None, f"{excerpt(str(value))} is beyond the int64 nanosecond clock"
        return ns, None

    @staticmethod
    def _count(value: Any) -> tuple[int | None, str | None]:
        if isinstance(value, bool) or not isinstance(value, int):
            return None, f"expected a non-negative integer, got {_show(value)}"
        if value < 0:
            return None, f"expected a non-negative integer, got {value}"
        if value >= I63_LIMIT:
            return None, f"{excerpt(str(value))} is too large (must be below 2^63)"
        return value, None

    def _hashes(self, value: Any) -> tuple[list[int] | None, str | None]:
        if not isinstance(value, list):
            return None, f"expected a list of block ids, got {_show(value)}"
        if len(value) > MAX_HASH_IDS:
            return None, f"{len(value):,} block ids (limit {MAX_HASH_IDS:,})"
        for v in value:
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < I63_LIMIT:
                return None, f"expected non-negative integer block ids below 2^63, got {_show(v)}"
        return value, None

    def records(self, records: list[tuple[int, dict]]) -> None:
        import numpy as np

        fmt = self.fmt
        arr, pro, out, hashes, lens = [], [], [], [], []
        keys = (fmt.arrival, fmt.prompt, fmt.output)
        hk = fmt.hash_ids
        scale = self.scale
        for line, row in records:
            try:  # the common record: exact keys, plain non-negative integers (or a Decimal arrival)
                a, p, o = row[keys[0]], row[keys[1]], row[keys[2]]
                if type(p) is int and type(o) is int and 0 <= p < I63_LIMIT and 0 <= o < I63_LIMIT:
                    if type(a) is int and 0 <= a and a * scale < I63_LIMIT:
                        a = a * scale
                    else:
                        a, problem = self._arrival(a)
                        if problem:
                            raise KeyError
                    ids = row.get(hk, ()) if hk else ()
                    if type(ids) is not list:  # present and not a list (null, 0, false, "", {}): the slow path says so
                        if hk and hk in row:
                            raise KeyError
                        ids = ()
                    elif ids and (len(ids) > MAX_HASH_IDS or set(map(type, ids)) != _INT_ONLY or min(ids) < 0
                                  or max(ids) >= I63_LIMIT):  # C-level passes: a generator took half the read
                        raise KeyError
                    if self.last is not None and a < self.last and not self.unsorted:
                        raise KeyError
                    self.last, self.last_line = a, line
                    arr.append(a)
                    pro.append(p)
                    out.append(o)
                    if hk:
                        hashes.extend(ids)
                        lens.append(len(ids))
                    continue
            except KeyError:
                pass
            problems = []
            got = []
            for role, check in (("arrival", self._arrival), ("prompt", self._count), ("output", self._count)):
                key = fmt.column(role)
                present, value = _get(row, key)
                if not present:
                    problems.append((key, "missing"))
                    continue
                v, problem = check(value)
                if problem:
                    problems.append((key, problem))
                got.append(v)
            ids: list[int] = []
            if fmt.hash_ids:
                present, value = _get(row, fmt.hash_ids)
                if present:
                    checked, problem = self._hashes(value)
                    if problem:
                        problems.append((fmt.hash_ids, problem))
                    ids = checked or []
            if problems:
                first = problems[0]
                raise BadInput(f"{self.source}:{line}", printable(first[0], 40),
                               first[1] + "".join(f"; {printable(k, 40)}: {p}" for k, p in problems[1:]))
            a = got[0]
            if self.last is not None and a < self.last and not self.unsorted:
                if not self.sort:
                    raise BadInput(f"{self.source}:{line}", None,
                                   f"arrival is earlier than line {self.last_line}'s; timestamps must be sorted "
                                   "(pass --sort to sort them stably)")
                self.unsorted = True
            self.last, self.last_line = a, line
            arr.append(a)
            pro.append(got[1])
            out.append(got[2])
            if fmt.hash_ids:
                hashes.extend(ids)
                lens.append(len(ids))
        self.rows += len(records)
        self.cols.append(np.array(arr, dtype=np.int64), np.array(pro, dtype=np.int64), np.array(out, dtype=np.int64), 0)
        if fmt.hash_ids:
            self.hash_count += len(hashes)
            if self.hash_count > MAX_TRACE_HASH_IDS:  # before they are kept: the ids are the trace's memory
                raise BadInput(f"{self.source}:{records[-1][0]}", fmt.hash_ids,
                               f"more than {MAX_TRACE_HASH_IDS:,} block ids in the trace by this line "
                               "(MAX_TRACE_HASH_IDS)")
            part = np.array(hashes, dtype=np.int64)
            if self.hash_buf is None and self.hash_count > MAX_REPLAY_HASH_IDS:
                # One array of MAX_TRACE_HASH_IDS ids: its pages are committed only as they are written, so
                # the ids are held once (small parts freed into the heap kept a second copy at the end).
                self.hash_buf = np.empty(MAX_TRACE_HASH_IDS, dtype=np.int64)
                for earlier in self.hash_parts:
                    self.hash_buf[self.hash_at:self.hash_at + len(earlier)] = earlier
                    self.hash_at += len(earlier)
                self.hash_parts = []
            if self.hash_buf is not None:
                self.hash_buf[self.hash_at:self.hash_at + len(part)] = part
                self.hash_at += len(part)
            else:
                self.hash_parts.append(part)
            self.hash_lengths.append(np.array(lens, dtype=np.int64))

    def finish(self) -> Workload:
        import numpy as np

        if self.cols.n == 0:
            raise BadInput(self.source, None, "empty trace: no requests")
        notes = ["rows were not in arrival order; sorted stably by timestamp (--sort)"] if self.unsorted else []
        extra: dict[str, Any] = {}
        prefix = None
        if self.fmt.hash_ids:
            if self.hash_buf is not None:  # a view: the written part of the one buffer, no copy
                ids, self.hash_buf = self.hash_buf[:self.hash_at], None
            else:
                ids = np.concatenate(self.hash_parts) if self.hash_parts else np.zeros(0, dtype=np.int64)
                self.hash_parts = []
            lengths = np.concatenate(self.hash_lengths)
            self.hash_lengths = []
            extra = dict(hash_ids=ids, hash_offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
            del ids
        fields = tuple(printable(self.fmt.column(r), 40) for r in ("arrival", "prompt", "output"))
        summary = TraceSummary(self.fmt.name, self.fmt.title, self.rows, fields=fields)
        wl = self.cols.workload(("trace",), self.unsorted, notes, trace=summary, **extra)
        if wl.hash_ids is not None:
            from dataclasses import replace

            blocks = int(len(wl.hash_ids))
            kept = blocks <= MAX_REPLAY_HASH_IDS
            if kept:
                ordered = np.sort(wl.hash_ids)  # a sort, not np.unique's hash table: 32.8M ids took 30 s that way
            else:  # only the summary is kept: sorted in place, no copy (32.8M ids: 262 MB, not 2.5 GB)
                ordered = wl.hash_ids
                wl = replace(wl, hash_ids=None, hash_offsets=None)
                ordered.sort()
            shared = blocks - (int(np.count_nonzero(ordered[1:] != ordered[:-1])) + 1 if blocks else 0)
            del ordered
            prefix = PrefixSummary(self.fmt.block_tokens or 0, blocks, shared, kept)
            note = (f"{blocks:,} prefix blocks of {prefix.block_tokens} tokens ({self.fmt.hash_ids}); "
                    f"{prefix.shared_fraction:.1%} repeat an earlier block (an unbounded prefix cache's reuse)")
            if not kept:
                note += (f"; more than {MAX_REPLAY_HASH_IDS:,} (MAX_REPLAY_HASH_IDS): summarised, not kept for an "
                         "engine replay")
            wl = replace(wl, notes=wl.notes + (note,), trace=replace(summary, prefix=prefix))
        return wl


def read_jsonl_blocks(blocks: Iterable[bytes], source: str, options: TraceOptions, *, sort: bool = False,
                      capacity: int = 1 << 16) -> Workload:
    """A JSONL trace from an iterator of byte blocks."""
    reader: _JsonlReader | None = None
    line = 0
    rest = b""

    def lines(final: bool):
        nonlocal rest, line
        parts = rest.split(b"\n")
        rest = b"" if final else parts.pop()
        if len(rest) > MAX_LINE_BYTES:
            raise BadInput(f"{source}:{line + len(parts) + 1}", None, f"line longer than {MAX_LINE_BYTES:,} bytes")
        for part in parts:
            line += 1
            if len(part) > MAX_LINE_BYTES:
                raise BadInput(f"{source}:{line}", None, f"line longer than {MAX_LINE_BYTES:,} bytes")
            if part.strip():
                yield line, part

    def feed(final: bool) -> None:
        nonlocal reader
        batch: list[tuple[int, bytes]] = []
        for number, part in lines(final):
            if reader is None:
                where = f"{source}:{number}"
                row = _decode(part, where)
                fmt = resolve_format(Container.JSONL, [str(k) for k in row], options, source, where)
                reader = _JsonlReader(source, fmt, sort, capacity)
                reader.records([(number, row)])
                continue
            batch.append((number, part))
            if len(batch) >= CHUNK_RECORDS:
                reader.records(_decode_many(batch, source))
                batch.clear()
        if batch:
            assert reader is not None
            reader.records(_decode_many(batch, source))

    for block in blocks:
        rest += block
        if len(rest) >= 1 << 20:
            feed(False)
    feed(True)
    if reader is None:
        raise BadInput(source, None, "empty trace: no requests")
    return reader.finish()
