"""The sweep's ``--resume`` file: one JSON line per finished point, read like any other input.

Reading: the file is opened once (created if absent) and ``fstat``-ed (a FIFO or a
device is refused), capped at MAX_RESUME_BYTES, and every record is validated field by
field — types, ranges (finite numbers, counts below 2^63, devices matching the point)
and the spec digest — so a hand-edited or hostile file is bad input naming its line,
never a crash or a wrong answer. Lines are split at ``\\n`` only.

Writing: each finished point is appended with one ``write`` on an ``O_APPEND``
descriptor. A torn last line (a run killed mid-write) is cut off when the file is
opened, so the next record never lands after a fragment. A write that fails (ENOSPC,
EROFS, EFBIG) is undone to the last whole line and reported as one line; every point
written before it is kept.
"""

from __future__ import annotations

import math
import os
import stat
from typing import AbstractSet, Any, Mapping

from csa_plan.planner.errors import I63_LIMIT, U64_LIMIT, BadInput
from csa_plan.planner.files import describe_mode
from csa_plan.planner.limits import MAX_DEVICES, MAX_RATE_SCALE, MAX_RESUME_BYTES, MAX_STRING_CHARS
from csa_plan.planner.reports.schemas import SWEEP_POINT as RESUME_SCHEMA
from csa_plan.planner.sweep.spec import SweepPoint

MAX_RESUME_RATE_PER_S = 1e18  # far above any trace (1e9 requests/s x 2^20 rate scale)
MAX_RESUME_LIST = 64  # refusal reasons or violations in one record
MAX_RESUME_PROBES = 1 << 20

_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)[:200]


class _Record:
    """Typed access to one parsed line; every problem is BadInput naming the line and field."""

    def __init__(self, data: Mapping[str, Any], where: str) -> None:
        self.data, self.where = data, where

    def fail(self, name: str, problem: str) -> BadInput:
        return BadInput(self.where, name, problem)

    def get(self, name: str) -> Any:
        if name not in self.data:
            raise self.fail(name, "missing")
        return self.data[name]

    def count(self, name: str, *, below: int = I63_LIMIT, low: int = 0, nullable: bool = False) -> int | None:
        value = self.get(name)
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(name, f"expected an integer, got {type(value).__name__}")
        if not low <= value < below:
            raise self.fail(name, f"{value:,} is outside {low:,}..{below - 1:,}")
        return value

    def number(self, name: str, *, high: float, nullable: bool = False, positive: bool = False) -> float | None:
        value = self.get(name)
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(name, f"expected a number, got {type(value).__name__}")
        number = float(value)
        if not math.isfinite(number) or number < 0 or number > high or (positive and number == 0):
            raise self.fail(name, f"{number!r} is outside {'(0' if positive else '[0'}, {high:g}]")
        return number

    def flag(self, name: str) -> bool:
        value = self.get(name)
        if not isinstance(value, bool):
            raise self.fail(name, f"expected true or false, got {type(value).__name__}")
        return value

    def text(self, value: Any, name: str) -> str:
        if not isinstance(value, str) or len(value) > MAX_STRING_CHARS:
            raise self.fail(name, "expected a string of at most "
                                  f"{MAX_STRING_CHARS:,} characters, got {type(value).__name__}")
        return value


def parse_record(data: Any, where: str, digest: str, points: Mapping[str, SweepPoint] | AbstractSet[str]):
    """One resume record as a PointResult, or None when it belongs to a point not in this grid."""
    from csa_plan.planner.sweep.evaluate import PointResult

    if not isinstance(data, dict) or data.get("schema") != RESUME_SCHEMA:
        raise BadInput(where, "schema", f"expected {RESUME_SCHEMA}")
    if data.get("spec_digest") != digest:
        raise BadInput(where, "spec_digest", "written by a different sweep spec or workload (use another --resume file)")
    r = _Record(data, where)
    key = r.text(r.get("key"), "key")
    if key not in points:
        return None
    point = points[key] if isinstance(points, Mapping) else None
    devices = r.count("devices", low=1, below=MAX_DEVICES + 1)
    if point is not None and devices != point.devices:
        raise r.fail("devices", f"{devices:,}, but the point {key[:80]!r} has {point.devices:,}")
    requests = r.count("requests")
    admitted = r.count("admitted")
    refused = r.count("refused")
    if admitted > requests or refused > requests:
        raise r.fail("admitted" if admitted > requests else "refused", f"more than the {requests:,} requests")
    raw_refusals = r.get("refusals")
    if not isinstance(raw_refusals, dict) or len(raw_refusals) > MAX_RESUME_LIST:
        raise r.fail("refusals", f"expected a mapping of at most {MAX_RESUME_LIST} reasons")
    refusals = []
    for reason, n in raw_refusals.items():
        r.text(reason, "refusals")
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < I63_LIMIT:
            raise r.fail(f"refusals.{reason[:40]}", "expected a count below 2^63")
        refusals.append((reason, n))
    raw_violations = r.get("violations")
    if not isinstance(raw_violations, list) or len(raw_violations) > MAX_RESUME_LIST:
        raise r.fail("violations", f"expected a list of at most {MAX_RESUME_LIST} strings")
    violations = tuple(r.text(v, "violations") for v in raw_violations)
    feasible = r.flag("feasible")
    return PointResult(
        key=key, devices=devices, requests=requests, admitted=admitted, refused=refused, refusals=tuple(refusals),
        wait_p99_ns=r.count("wait_p99_ns", nullable=True), peak_bytes=r.count("peak_bytes", below=U64_LIMIT),
        mean_utilization=r.number("mean_utilization", high=1e12),
        peak_utilization=r.number("peak_utilization", high=1e12),
        sustainable_rate_scale=r.number("sustainable_rate_scale", high=MAX_RATE_SCALE, nullable=True, positive=True),
        at_least=r.flag("at_least"), probes=r.count("probes", below=MAX_RESUME_PROBES),
        sustainable_rate_per_s=r.number("sustainable_rate_per_s", high=MAX_RESUME_RATE_PER_S, nullable=True),
        rate_per_device_per_s=r.number("rate_per_device_per_s", high=MAX_RESUME_RATE_PER_S, nullable=True),
        feasible=feasible, violations=violations)


def parse_resume(text: str, source: str, digest: str,
                 points: Mapping[str, SweepPoint] | AbstractSet[str]) -> tuple[dict, int]:
    """Finished points by key, and how many characters of ``text`` are whole lines (a torn tail is not)."""
    from csa_plan.planner.loaders.safe_json import load_json

    done: dict = {}
    whole = text.rfind("\n") + 1  # everything after the last newline is a torn write
    start, n = 0, 0
    while start < whole:
        end = text.index("\n", start)
        n += 1
        line = text[start:end]
        start = end + 1
        if not line.strip():
            continue
        where = f"{source}:{n}"
        try:
            data = load_json(line, where)
        except BadInput as exc:
            if exc.problem.startswith("malformed JSON"):
                raise BadInput(where, None, f"not a JSON line ({exc.problem})") from None
            raise
        result = parse_record(data, where, digest, points)
        if result is not None:
            done[result.key] = result
    return done, whole


class ResumeFile:
    """An open resume file: ``done`` holds the finished points read from it; ``append`` adds one."""

    def __init__(self, path: str, digest: str, points: Mapping[str, SweepPoint]) -> None:
        self.path = path
        self.digest = digest
        self.written = 0
        try:
            self.fd = os.open(path, _FLAGS, 0o644)
        except (OSError, ValueError) as exc:
            raise BadInput("options", "--resume", f"cannot open {path}: {_reason(exc) if isinstance(exc, OSError) else exc}") \
                from None
        try:
            info = os.fstat(self.fd)
            if not stat.S_ISREG(info.st_mode):
                raise BadInput(path, None, f"{describe_mode(info.st_mode)}, not a regular file (--resume needs a file)")
            if info.st_size > MAX_RESUME_BYTES:
                raise BadInput(path, None, f"file is {info.st_size:,} bytes, more than the {MAX_RESUME_BYTES:,}-byte "
                                           "limit (MAX_RESUME_BYTES)")
            data = os.pread(self.fd, info.st_size, 0) if info.st_size else b""
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                # a torn write can only cut the last line; anything else is a damaged file
                cut = data.rfind(b"\n") + 1
                if exc.start < cut:
                    raise BadInput(path, None, f"not UTF-8 text (at byte {exc.start:,})") from None
                text = data[:cut].decode("utf-8")
            self.done, whole = parse_resume(text, path, digest, points)
            whole_bytes = len(text[:whole].encode("utf-8"))
            if whole_bytes < len(data):
                os.ftruncate(self.fd, whole_bytes)  # repair: drop the torn fragment before appending
        except OSError as exc:
            self.close()
            raise BadInput(path, None, f"cannot read or repair: {_reason(exc)}") from None
        except BaseException:
            self.close()
            raise

    def append(self, line: str) -> None:
        """One record, written whole or not at all."""
        payload = (line + "\n").encode("utf-8")
        before = os.fstat(self.fd).st_size
        try:
            view = memoryview(payload)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
        except OSError as exc:
            try:
                os.ftruncate(self.fd, before)
            except OSError:
                pass
            kept = len(self.done) + self.written
            raise BadInput(self.path, None, f"cannot append a finished point ({_reason(exc)}); the {kept:,} point(s) "
                                            "already in the file are kept") from None
        self.written += 1

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "ResumeFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
