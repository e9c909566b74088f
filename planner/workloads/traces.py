"""Workloads: a YAML request mix, an Azure-format CSV trace, or JSONL requests.

Every reader returns a ``Workload`` of parallel integer arrays: arrival time in
nanoseconds from the first request (so trace timestamps with 7 fractional digits
stay exact), prompt and output tokens, and a request-class id. Readers are
strict: a malformed row is bad input naming its line, never skipped.
"""

from __future__ import annotations

import calendar
import csv
import json
import re
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from csa_plan.planner.errors import I63_LIMIT, BadInput
from csa_plan.planner.values import read_int

if TYPE_CHECKING:  # numpy is imported lazily so the CLI's --help stays fast
    pass

from csa_plan.planner.units import NS_PER_S
from csa_plan.planner.workloads.workload import MAX_ARRIVAL_S, JSONL_FIELDS, TRACE_COLUMNS, Workload

# -- traces -------------------------------------------------------------------------------

_TOKENS = re.compile(r"^\s*(-?)(\d+)\s*$")
_STAMP = re.compile(r"^\s*(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?"
                    r"(Z|[+-]\d{2}:?\d{2})?\s*$")
_SECONDS = re.compile(r"^\s*\d+(?:\.\d{1,9})?\s*$")


def _tokens(text: str, source: str, column: str) -> int:
    match = _TOKENS.match(text)
    if not match:
        raise BadInput(source, column, f"expected a non-negative integer token count, got {text.strip()!r}")
    if match.group(1):
        raise BadInput(source, column, f"token count is negative ({text.strip()[:40]})")
    if len(match.group(2).lstrip("0")) > 19:
        raise BadInput(source, column, f"{text.strip()[:40]}... is too large (must be below 2^63)")
    value = int(match.group(2))
    if value >= I63_LIMIT:
        raise BadInput(source, column, f"{value} is too large (must be below 2^63)")
    return value


def _seconds_ns(seconds: Decimal, source: str, field: str) -> int:
    """Seconds as integer nanoseconds; refused beyond the int64 clock (checked before converting,
    so an absurd exponent never becomes a giant integer)."""
    if not seconds <= MAX_ARRIVAL_S:
        raise BadInput(source, field, f"{str(seconds)[:40]} s is beyond the int64 nanosecond clock")
    return int(seconds * NS_PER_S)


def _utc_offset_s(zone: str | None) -> int:
    """Seconds east of UTC of a 'Z' / '+05:30' / '-0800' suffix (none: the stamp is UTC)."""
    if not zone or zone == "Z":
        return 0
    digits = zone[1:].replace(":", "")
    offset = int(digits[:2]) * 3600 + int(digits[2:]) * 60
    return offset if zone[0] == "+" else -offset


def _stamp_ns(text: str, source: str, cache: dict[str, int]) -> int:
    """A wall-clock stamp ('2023-11-16 18:15:46.6805900', optionally with 'Z' or a '+00:00'
    offset as the 2024 Azure traces write it; without one it is read as UTC) or plain seconds, in ns."""
    match = _STAMP.match(text)
    if match:
        whole = match.group(1)
        seconds = cache.get(whole)
        if seconds is None:
            try:
                seconds = calendar.timegm(datetime.fromisoformat(whole.replace("T", " ")).timetuple())
            except ValueError:
                raise BadInput(source, "TIMESTAMP", f"not a valid date and time: {text.strip()!r}") from None
            cache[whole] = seconds
        frac = (match.group(2) or "").ljust(9, "0")
        return (seconds - _utc_offset_s(match.group(3))) * NS_PER_S + int(frac)
    if _SECONDS.match(text):
        return _seconds_ns(Decimal(text.strip()), source, "TIMESTAMP")
    raise BadInput(source, "TIMESTAMP", f"expected 'YYYY-MM-DD HH:MM:SS[.fraction]' or seconds, got {text.strip()!r}")


def _cells(line: str) -> list[str]:
    """Comma-separated fields; quoted fields (as spreadsheets export them) go through csv."""
    if '"' not in line:
        return line.split(",")
    return next(csv.reader([line]))


def read_trace_csv(text: str, source: str, *, sort: bool = False) -> Workload:
    """The Azure LLM inference format: TIMESTAMP, ContextTokens, GeneratedTokens."""
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise BadInput(source, None, "empty trace (expected a header: " + ",".join(TRACE_COLUMNS) + ")")
    header = [h.strip().strip('"') for h in _cells(lines[0].lstrip("\ufeff"))]
    missing = [c for c in TRACE_COLUMNS if c not in header]
    if missing:
        raise BadInput(f"{source}:1", None, f"header lacks {', '.join(missing)} (got {', '.join(header)})")
    col = [header.index(c) for c in TRACE_COLUMNS]
    width = len(header)
    stamps: list[int] = []
    prompts: list[int] = []
    outputs: list[int] = []
    cache: dict[str, int] = {}
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        cells = _cells(line)
        if len(cells) != width:
            raise BadInput(where, None, f"expected {width} comma-separated fields, got {len(cells)}: {line.strip()[:60]!r}")
        stamps.append(_stamp_ns(cells[col[0]], where, cache))
        prompts.append(_tokens(cells[col[1]], where, "ContextTokens"))
        outputs.append(_tokens(cells[col[2]], where, "GeneratedTokens"))
    row_lines = [n for n, line in enumerate(lines[1:], start=2) if line.strip()]
    return _from_rows(source, stamps, prompts, outputs, row_lines, sort, "trace")


def read_jsonl(text: str, source: str, *, sort: bool = False) -> Workload:
    """One JSON object per line: arrival_s (seconds), prompt_tokens, output_tokens."""
    stamps: list[int] = []
    prompts: list[int] = []
    outputs: list[int] = []
    row_lines: list[int] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            row = json.loads(line, parse_float=Decimal)
        except json.JSONDecodeError as exc:
            raise BadInput(where, None, f"malformed JSON: {exc.msg}") from None
        except (ValueError, ArithmeticError) as exc:  # a number Python or Decimal cannot hold
            raise BadInput(where, None, f"malformed JSON: number out of range ({type(exc).__name__})") from None
        if not isinstance(row, dict):
            raise BadInput(where, None, "expected a JSON object")
        absent = [k for k in JSONL_FIELDS if k not in row]
        if absent:
            raise BadInput(where, absent[0], "missing")
        arrival = row["arrival_s"]
        if isinstance(arrival, bool) or not isinstance(arrival, (int, Decimal)):
            raise BadInput(where, "arrival_s", f"expected seconds as a number, got {arrival!r}")
        if arrival < 0 or not Decimal(arrival).is_finite():
            raise BadInput(where, "arrival_s", f"must be a non-negative number, got {arrival}")
        stamps.append(_seconds_ns(Decimal(arrival), where, "arrival_s"))
        prompts.append(read_int(where, "prompt_tokens", row["prompt_tokens"]))
        outputs.append(read_int(where, "output_tokens", row["output_tokens"]))
        row_lines.append(number)
    return _from_rows(source, stamps, prompts, outputs, row_lines, sort, "jsonl")


def _from_rows(source: str, stamps: list[int], prompts: list[int], outputs: list[int], row_lines: list[int],
               sort: bool, kind: str) -> Workload:
    import numpy as np

    if not stamps:
        raise BadInput(source, None, "empty trace: no requests")
    notes = []
    for i in range(1, len(stamps)):
        if stamps[i] < stamps[i - 1]:
            if not sort:
                raise BadInput(f"{source}:{row_lines[i]}", None,
                               f"arrival is earlier than line {row_lines[i - 1]}'s; timestamps must be sorted "
                               "(pass --sort to sort them stably)")
            notes.append("rows were not in arrival order; sorted stably by timestamp (--sort)")
            break
    base = min(stamps)
    span = max(stamps) - base
    if span >= I63_LIMIT:  # relative nanoseconds must fit int64 (about 292 years)
        raise BadInput(source, None, f"arrivals span {span} ns, more than an int64 nanosecond clock holds")
    arrival = np.array([s - base for s in stamps], dtype=np.int64)
    prompt = np.array(prompts, dtype=np.int64)
    output = np.array(outputs, dtype=np.int64)
    if notes:
        order = np.argsort(arrival, kind="stable")
        arrival, prompt, output = arrival[order], prompt[order], output[order]
    return Workload(source, arrival, prompt, output, np.zeros(len(arrival), dtype=np.int32), (kind,),
                    notes=tuple(notes))


