"""Trace readers: a published CSV or JSONL trace, from a file in chunks or from a text.

Every reader returns a ``Workload`` of parallel integer arrays: arrival time in
nanoseconds from the first request (so trace timestamps with 7 fractional digits
stay exact), prompt and output tokens, and a request-class id. Readers are
strict: a malformed row is bad input naming its line and every bad field, never skipped.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterator

from csa_plan.planner.errors import BadInput
from csa_plan.planner.workloads.csv_trace import read_csv_blocks
from csa_plan.planner.workloads.formats import FORMATS, Container
from csa_plan.planner.workloads.jsonl_trace import read_jsonl_blocks
from csa_plan.planner.workloads.workload import MAX_TRACE_BYTES, MAX_TRACE_REQUESTS, TraceOptions, Workload

BLOCK_BYTES = 4 << 20


def read_trace_csv(text: str, source: str, *, sort: bool = False, options: TraceOptions | None = None) -> Workload:
    """A CSV trace held in memory (any known layout; Azure's TIMESTAMP, ContextTokens, GeneratedTokens first)."""
    return read_csv_blocks([text.encode("utf-8", "surrogatepass")], source, options or TraceOptions(), sort=sort)


def read_jsonl(text: str, source: str, *, sort: bool = False, options: TraceOptions | None = None) -> Workload:
    """JSONL requests held in memory: arrival_s (seconds), prompt_tokens, output_tokens (or a known layout)."""
    return read_jsonl_blocks([text.encode("utf-8", "surrogatepass")], source, options or TraceOptions(), sort=sort)


def _blocks(fd: int, size: int) -> Iterator[bytes]:
    left = size + 1  # one byte more than fstat said: a file that grew is noticed
    while left > 0:
        block = os.read(fd, min(BLOCK_BYTES, left))
        if not block:
            return
        left -= len(block)
        if left <= 0:
            raise BadInput(str(fd), None, "file grew while it was read")
        yield block


def _row_bound(fd: int, source: str) -> int:
    """Lines that may hold a row, counted before parsing (a pass at memchr speed): the columns are
    sized by it, and a file with more non-empty lines than a trace may hold is refused here, in
    bounded time and memory, before anything is parsed."""
    import numpy as np

    newlines = 0
    while block := os.read(fd, BLOCK_BYTES):
        newlines += block.count(b"\n")
    os.lseek(fd, 0, os.SEEK_SET)
    if newlines <= MAX_TRACE_REQUESTS + 1:
        return newlines + 1
    rows, prev = 0, b"\n\n"  # empty lines ('' or a lone CR) do not count
    while block := os.read(fd, BLOCK_BYTES):
        b = np.frombuffer(prev + block, dtype=np.uint8)
        nl = np.flatnonzero(b[2:] == 10) + 2
        empty = (b[nl - 1] == 10) | ((b[nl - 1] == 13) & (b[nl - 2] == 10))
        rows += int(len(nl) - empty.sum())
        prev = (prev + block)[-2:]
        if rows > MAX_TRACE_REQUESTS + 1:  # one line may be a header
            raise BadInput(source, None, f"more than {MAX_TRACE_REQUESTS:,} rows (the limit of one trace; "
                           "blank lines do not count)")
    os.lseek(fd, 0, os.SEEK_SET)
    return rows + 2


def container_of(path: Path, options: TraceOptions) -> Container | None:
    """CSV or JSONL: from the suffix, else from --format; a contradiction is bad input."""
    suffix = path.suffix.lower()
    by_suffix = {".csv": Container.CSV, ".jsonl": Container.JSONL, ".ndjson": Container.JSONL}.get(suffix)
    fmt = FORMATS.get(options.format) if options.format else None
    if fmt is not None and by_suffix is not None and fmt.container is not by_suffix:
        raise BadInput("options", "--format", f"{fmt.name} is a {fmt.container.value.upper()} format, "
                       f"but {path.name!r} is a {suffix} file")
    return by_suffix or (fmt.container if fmt else None)


def read_trace_file(path: Path, source: str, container: Container, options: TraceOptions, *,
                    sort: bool = False) -> Workload:
    """Open once, check the descriptor (a regular file within MAX_TRACE_BYTES), then stream it."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise BadInput(source, None, f"cannot open: {reason}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(source, None, "not a regular file")
        if info.st_size > MAX_TRACE_BYTES:
            raise BadInput(source, None, f"file is larger than {MAX_TRACE_BYTES:,} bytes")
        capacity = _row_bound(fd, source)
        read = read_csv_blocks if container is Container.CSV else read_jsonl_blocks
        try:
            return read(_blocks(fd, info.st_size), source, options, sort=sort, capacity=capacity)
        except BadInput as exc:
            if exc.source == str(fd):
                raise BadInput(source, exc.field, exc.problem) from None
            raise
    except OSError as exc:
        raise BadInput(source, None, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
