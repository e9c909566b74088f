"""The sweep's ``--resume`` file: a header naming what it belongs to, then one JSON line per
finished point. Only csa-plan creates one, and it only ever appends to it.

Creating: a path that does not exist is created with its header already in it (the
header is written to a temporary file in the same folder, then hard-linked into place,
so the file never exists without it and an existing file is never replaced).

Opening an existing file: the final path component is opened with ``O_NOFOLLOW`` (a
symbolic link is refused, never followed) and ``O_NONBLOCK``; the descriptor is
``fstat``-ed (a FIFO, a device or a directory is refused) and the size capped at
MAX_RESUME_BYTES. The first line must be a ``csa-plan/sweep-resume/v1`` header whose
hashes match this sweep: the spec file's bytes, the workload file's bytes, the settings
the results depend on (``spec_digest``) and the grid after command-line overrides. A
file that is not a resume file — notes, a config, a binary, an empty file, a file from
another sweep — is bad input *before a byte is written to it*.

Every record is validated field by field (types, ranges) and for consistency: it belongs
to a point of this grid with that point's devices; the workload's request count; admitted
plus refused equals requests and the refusal counts (known reasons only) sum to refused;
utilisations within [0, 1] and mean at most peak; a wait only when something was admitted;
the rates equal the rate scale times the workload's base rate (and per device, divided by
its devices); a point whose engine's runtime was replayed (``runtime`` not null, ``peak_bytes``
null: it counts the engine's units) has served equal to admitted, its queue-wait p99 equal to
the record's wait in whole nanoseconds, its peak units within the usable units and equal to the
peak utilization, and preemption counts consistent with one another; and the violations and feasibility are exactly what the constraints give for
these figures (``evaluate.point_violations``). A point recorded twice must be recorded
the same. Anything else is bad input naming the line and field.

Writing: each finished point is appended with one ``write`` on the ``O_APPEND``
descriptor. A torn last line (a run killed mid-write: at most one record's bytes, after a
newline) is cut off before appending so the next record never lands after a fragment. A
write that fails (ENOSPC, EROFS, EFBIG) is undone to the last whole line and reported as
one line; every point written before it is kept.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import stat
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from typing import AbstractSet, Any, Mapping

from csa_plan.planner.errors import I63_LIMIT, U64_LIMIT, BadInput
from csa_plan.planner.files import describe_mode
from csa_plan.planner.limits import MAX_DEVICES, MAX_RATE_SCALE, MAX_RESUME_BYTES, MAX_STRING_CHARS
from csa_plan.planner.schemas import SWEEP_POINT as RESUME_SCHEMA
from csa_plan.planner.schemas import SWEEP_RESUME as HEADER_SCHEMA
from csa_plan.planner.sweep.results import PointResult, RuntimeFigures, point_violations
from csa_plan.planner.sweep.spec import Constraints, Search, SweepPoint
from csa_plan.planner.text import excerpt

MAX_RESUME_RATE_PER_S = 1e18  # far above any trace (1e9 requests/s x 2^20 rate scale)
MAX_RESUME_LIST = 64  # refusal reasons or violations in one record
MAX_RESUME_PROBES = 1 << 20
MAX_RESUME_SECONDS = 1e12  # a replay's wait or latency: far past any trace's span at the slowest rate
MAX_RESUME_BLANK_LINES = 1024  # csa-plan writes none; a flood of them (100 MB took 21 s) is no resume file
MAX_RECORD_BYTES = 64 << 10  # one record line; a torn tail longer than this is no torn record
REL_TOL = 1e-9  # figures derived by one float operation from others agree to this

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_FLAGS = os.O_RDWR | os.O_APPEND | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
NOT_A_RESUME_FILE = "nothing was written to it; name a new file (csa-plan creates it) or one an earlier run wrote"


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)[:200]


@dataclass(frozen=True)
class ResumeIdentity:
    """What a resume file belongs to: the header's fields, compared by hash."""

    spec: str  # the spec path as given (shown, not compared)
    spec_sha256: str
    workload: str
    workload_sha256: str
    spec_digest: str  # workload bytes + every setting the results depend on (SweepSpec.digest)
    grid_sha256: str  # the points, after --tp/--pp/--dp/--weights/--reserved
    requests: int | None = None  # the workload's request count: every record replays all of it
    base_rate_per_s: float | None = None
    constraints: Constraints | None = None
    search: Search | None = None

    @staticmethod
    def of(spec: Any, requests: int | None = None, base_rate_per_s: float | None = None) -> "ResumeIdentity":
        return ResumeIdentity(spec.source, spec.source_sha256, spec.context.workload, spec.workload_sha256,
                              spec.digest, spec.grid_sha256, requests, base_rate_per_s, spec.context.constraints,
                              spec.context.search)

    def header(self) -> dict[str, Any]:
        return {"schema": HEADER_SCHEMA, "spec": self.spec, "spec_sha256": self.spec_sha256,
                "workload": self.workload, "workload_sha256": self.workload_sha256, "spec_digest": self.spec_digest,
                "grid_sha256": self.grid_sha256}

    def header_line(self) -> str:
        import json

        return json.dumps(self.header())


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


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REL_TOL * max(abs(a), abs(b))


def _refusals(r: _Record) -> tuple[tuple[str, int], ...]:
    """The refusal counts in the simulator's own order (the file's order is sorted by name)."""
    from csa_plan.planner.reserve.scenario import REASONS

    known = list(REASONS.values())
    raw = r.get("refusals")
    if not isinstance(raw, dict) or len(raw) > MAX_RESUME_LIST:
        raise r.fail("refusals", f"expected a mapping of at most {MAX_RESUME_LIST} reasons")
    for reason, n in raw.items():
        if reason not in known:
            raise r.fail("refusals", f"unknown refusal reason {excerpt(reason)} (known: {', '.join(known)})")
        if isinstance(n, bool) or not isinstance(n, int) or not 0 < n < I63_LIMIT:
            raise r.fail(f"refusals.{reason}", "expected a count from 1 to 2^63 - 1 (reasons without refusals "
                                               "are left out)")
    return tuple((reason, raw[reason]) for reason in known if reason in raw)


@lru_cache(maxsize=1)
def _record_keys() -> frozenset[str]:
    """Exactly the keys ``resume_line`` writes."""
    from dataclasses import fields

    return frozenset({"schema", "spec_digest"} | {f.name for f in fields(PointResult)})


def parse_record(data: Any, where: str, digest: str, points: Mapping[str, SweepPoint] | AbstractSet[str],
                 identity: ResumeIdentity | None = None):
    """One resume record as a PointResult, validated for consistency and for belonging to
    this sweep (``identity``: the workload's request count and base rate, the constraints)."""

    if not isinstance(data, dict) or data.get("schema") != RESUME_SCHEMA:
        raise BadInput(where, "schema", f"expected {RESUME_SCHEMA}")
    if data.get("spec_digest") != digest:
        raise BadInput(where, "spec_digest", "written by a different sweep spec or workload (use another --resume file)")
    r = _Record(data, where)
    unknown = sorted(set(data) - _record_keys())
    if unknown:
        raise r.fail(excerpt(unknown[0]), "unknown key (a record has exactly the keys csa-plan writes)")
    key = r.text(r.get("key"), "key")
    if key not in points:
        raise r.fail("key", f"{excerpt(key)} is no point of this sweep's grid")
    point = points[key] if isinstance(points, Mapping) else None
    devices = r.count("devices", low=1, below=MAX_DEVICES + 1)
    if point is not None and devices != point.devices:
        raise r.fail("devices", f"{devices:,}, but the point {excerpt(key)} has {point.devices:,}")
    requests = r.count("requests")
    if identity is not None and identity.requests is not None and requests != identity.requests:
        raise r.fail("requests", f"{requests:,}, but the workload has {identity.requests:,} requests")
    admitted = r.count("admitted")
    refused = r.count("refused")
    if admitted + refused != requests:
        raise r.fail("refused", f"admitted {admitted:,} + refused {refused:,} is not the {requests:,} requests")
    refusals = _refusals(r)
    if sum(n for _, n in refusals) != refused:
        raise r.fail("refusals", f"the counts sum to {sum(n for _, n in refusals):,}, not the {refused:,} refused")
    wait = r.count("wait_p99_ns", nullable=True)
    mean_util = r.number("mean_utilization", high=1.0)
    peak_util = r.number("peak_utilization", high=1.0)
    if mean_util > peak_util * (1 + REL_TOL):
        raise r.fail("mean_utilization", f"{mean_util!r} is above the peak utilization {peak_util!r}")
    runtime = _runtime(r, point, requests, admitted, wait, peak_util)
    if runtime is None and (wait is None) != (admitted == 0):
        raise r.fail("wait_p99_ns", "null exactly when no request was admitted")
    peak_bytes = r.count("peak_bytes", below=U64_LIMIT, nullable=True)
    if (peak_bytes is None) != (runtime is not None):
        raise r.fail("peak_bytes", "null exactly when the point's runtime was replayed (it counts the engine's units)")
    scale = r.number("sustainable_rate_scale", high=MAX_RATE_SCALE, nullable=True, positive=True)
    at_least = r.flag("at_least")
    probes = r.count("probes", low=1, below=MAX_RESUME_PROBES)
    rate = r.number("sustainable_rate_per_s", high=MAX_RESUME_RATE_PER_S, nullable=True)
    per_device = r.number("rate_per_device_per_s", high=MAX_RESUME_RATE_PER_S, nullable=True)
    _check_rates(r, devices, scale, at_least, rate, per_device, identity, point)
    raw_violations = r.get("violations")
    if not isinstance(raw_violations, list) or len(raw_violations) > MAX_RESUME_LIST:
        raise r.fail("violations", f"expected a list of at most {MAX_RESUME_LIST} strings")
    violations = tuple(r.text(v, "violations") for v in raw_violations)
    steady = "" if r.get("steady") is None else r.text(r.get("steady"), "steady")
    feasible = r.flag("feasible")
    if feasible != (not violations):
        raise r.fail("feasible", f"{str(feasible).lower()}, but the record lists {len(violations)} violation(s)")
    if identity is not None and identity.constraints is not None:
        expected = point_violations(identity.constraints, refusals, wait, mean_util, scale,
                                    None if runtime is None else runtime.ttft_p99_s,
                                    None if runtime is None else runtime.tpot_p99_s,
                                    None if runtime is None or point is None else point.rate_scale, steady)
        if violations != expected:
            raise r.fail("violations", f"not what this sweep's constraints give for the record's figures "
                                       f"({'; '.join(expected) or 'none'})")
    if point is not None and runtime is None:
        _check_ledger_point(r, point, devices, wait, peak_bytes, peak_util)
    return PointResult(
        key=key, devices=devices, requests=requests, admitted=admitted, refused=refused, refusals=refusals,
        wait_p99_ns=wait, peak_bytes=peak_bytes, mean_utilization=mean_util, peak_utilization=peak_util,
        sustainable_rate_scale=scale, at_least=at_least, probes=probes, sustainable_rate_per_s=rate,
        rate_per_device_per_s=per_device, feasible=feasible, violations=violations, runtime=runtime, steady=steady)


def _runtime(r: _Record, point: SweepPoint | None, requests: int, admitted: int, wait: int | None,
             peak_util: float):
    """The ``runtime`` figures of a point whose engine's runtime was replayed (null otherwise),
    each typed and consistent with the record: served is admitted, the wait is the replay's
    queue-wait p99 in whole nanoseconds, the peak utilization its peak units over usable units."""
    from dataclasses import fields


    raw = r.get("runtime")
    if raw is None:
        return None
    names = [f.name for f in fields(RuntimeFigures)]
    if not isinstance(raw, dict) or set(raw) != set(names):
        raise r.fail("runtime", f"expected null or a mapping of exactly {', '.join(names)}")
    if point is not None and point.engine is None:
        raise r.fail("runtime", f"the point {excerpt(point.key)} has no engine to replay")
    rt = _Record(raw, r.where)
    fail = lambda name, problem: BadInput(r.where, f"runtime.{name}", problem)  # noqa: E731
    engine, unit = rt.text(rt.get("engine"), "runtime.engine"), rt.text(rt.get("unit"), "runtime.unit")
    n = {name: rt.count(name, below=I63_LIMIT) for name in ("served", "preemptions", "preempted_requests",
                                                              "most_preemptions_for_one_request", "tokens_recomputed",
                                                              "prefix_hit_tokens", "peak_units", "peak_running",
                                                              "steps")}
    usable = rt.count("usable_units", low=1)
    s = {name: rt.number(name, high=MAX_RESUME_SECONDS, nullable=True)
         for name in ("queue_wait_p99_s", "ttft_p99_s", "e2e_p99_s", "tpot_p99_s")}
    if n["served"] != admitted:
        raise fail("served", f"{n['served']:,}, but the record admitted {admitted:,}")
    if n["preempted_requests"] > min(n["preemptions"], requests):
        raise fail("preempted_requests", "more than the preemptions or the requests")
    if (n["preemptions"] > 0) != (n["preempted_requests"] > 0) or \
            not n["preempted_requests"] <= n["preemptions"] <= n["preempted_requests"] * max(
                n["most_preemptions_for_one_request"], 1) or \
            n["most_preemptions_for_one_request"] > n["preemptions"]:
        raise fail("preemptions", "inconsistent with the requests preempted and the most for one request")
    if n["peak_running"] > requests:
        raise fail("peak_running", f"{n['peak_running']:,} is more than the {requests:,} requests")
    if n["peak_units"] > usable:
        raise fail("peak_units", f"{n['peak_units']:,} is more than the {usable:,} usable units")
    if not _close(peak_util, min(1.0, n["peak_units"] / usable)):
        raise r.fail("peak_utilization", f"{peak_util!r} is not the peak units over the usable units")
    p99 = s["queue_wait_p99_s"]
    if (p99 is None) != (wait is None) or (p99 is not None and wait != int(round(p99 * 1e9))):
        raise r.fail("wait_p99_ns", "not the replay's queue-wait p99 in whole nanoseconds")
    if (s["e2e_p99_s"] is None) != (n["served"] == 0):
        raise fail("e2e_p99_s", "null exactly when nothing was served")
    return RuntimeFigures(engine=engine, unit=unit, queue_wait_p99_s=p99, ttft_p99_s=s["ttft_p99_s"],
                          e2e_p99_s=s["e2e_p99_s"], usable_units=usable, tpot_p99_s=s["tpot_p99_s"],
                          step_time=rt.text(rt.get("step_time"), "runtime.step_time"), **n)


def _check_rates(r: _Record, devices: int, scale: float | None, at_least: bool, rate: float | None,
                 per_device: float | None, identity: ResumeIdentity | None, point: SweepPoint | None) -> None:
    if scale is None:
        if at_least or rate is not None or per_device is not None:
            raise r.fail("sustainable_rate_scale", "null, but the record has a rate or says at_least")
        return
    if rate is None or per_device is None:
        raise r.fail("sustainable_rate_per_s", "null, but the record has a sustainable rate scale")
    if not _close(per_device * devices, rate):
        raise r.fail("rate_per_device_per_s", f"{per_device!r} x {devices:,} devices is not the rate {rate!r}")
    if identity is None:
        return
    if identity.base_rate_per_s is not None and not _close(scale * identity.base_rate_per_s, rate):
        raise r.fail("sustainable_rate_per_s", f"{rate!r} is not the rate scale {scale!r} x the workload's "
                                               f"{identity.base_rate_per_s!r} requests/s")
    if identity.search is not None and point is not None:  # the search starts at the point's own rate scale
        low = min(identity.search.min_scale, point.rate_scale)
        high = max(identity.search.max_scale, point.rate_scale)
        if not low <= scale <= high:
            raise r.fail("sustainable_rate_scale", f"{scale!r} is outside the search's {low!r}..{high!r}")
        top = identity.search.max_scale  # capped (bisect_rate): doubled until twice it passes the ceiling
        if at_least and not (top / 2 < scale <= top):
            raise r.fail("at_least", f"true, but the rate scale {scale!r} is not within a doubling of the search's "
                                     f"ceiling {top!r} (a capped search stops there)")


def _check_ledger_point(r: _Record, point: SweepPoint, devices: int, wait: int | None, peak_bytes: int | None,
                        peak_util: float) -> None:
    """A point the ledger ran: no wait under policy refuse (a request is refused, never queued), and the
    peak bytes of all devices between the fullest device's peak (peak utilization x limit) and devices times it."""
    from csa_plan.planner.reserve.scenario import Policy

    if point.policy is Policy.REFUSE and wait not in (None, 0):
        raise r.fail("wait_p99_ns", f"{wait:,} ns, but under policy refuse nothing waits (the point "
                                    f"{excerpt(point.key)})")
    limit = point.limit_bytes
    if peak_bytes is None or limit <= 0:
        return
    fullest = peak_util * limit
    if not fullest * (1 - REL_TOL) - 1 <= peak_bytes <= devices * fullest * (1 + REL_TOL) + devices:
        raise r.fail("peak_bytes", f"{peak_bytes:,} does not agree with the peak utilization {peak_util!r} of "
                                   f"the {limit:,}-byte limit on {devices:,} device(s)")


def parse_resume(text: str, source: str, digest: str, points: Mapping[str, SweepPoint] | AbstractSet[str],
                 identity: ResumeIdentity | None = None, first_line: int = 1) -> tuple[dict, int]:
    """Finished points by key, and how many characters of ``text`` are whole lines (a torn tail is not)."""
    from csa_plan.planner.loaders.safe_json import load_json

    done: dict = {}
    whole = text.rfind("\n") + 1  # everything after the last newline is a torn write
    start, n, blank = 0, first_line - 1, 0
    while start < whole:
        end = text.index("\n", start)
        n += 1
        line = text[start:end]
        start = end + 1
        if not line.strip():
            blank += 1
            if blank > MAX_RESUME_BLANK_LINES:
                raise BadInput(f"{source}:{n}", None, f"more than {MAX_RESUME_BLANK_LINES:,} blank lines "
                                                      "(MAX_RESUME_BLANK_LINES; csa-plan writes none)")
            continue
        where = f"{source}:{n}"
        result = parse_record(_json_line(line, where, load_json), where, digest, points, identity)
        if done.get(result.key, result) != result:
            raise BadInput(where, "key", f"a second record for {excerpt(result.key)} that differs from the first")
        done[result.key] = result
    return done, whole


def _json_line(line: str, where: str, load_json: Any) -> Any:
    try:
        return load_json(line, where)
    except BadInput as exc:
        if exc.problem.startswith("malformed JSON"):
            raise BadInput(where, None, f"not a JSON line ({exc.problem})") from None
        raise


def check_header(line: str, source: str, identity: ResumeIdentity) -> None:
    """The first line names this sweep, or the file is not this sweep's resume file."""
    from csa_plan.planner.loaders.safe_json import load_json

    where = f"{source}:1"
    try:
        data = load_json(line, where)
    except BadInput:
        data = None
    if not isinstance(data, dict) or data.get("schema") != HEADER_SCHEMA:
        raise BadInput(source, None, f"not a csa-plan resume file (its first line is no {HEADER_SCHEMA} header): "
                                     f"{NOT_A_RESUME_FILE}")
    expected = identity.header()
    for name, what in (("spec_sha256", "sweep spec"), ("workload_sha256", "workload"),
                       ("spec_digest", "sweep settings (sort, seed, time, search, constraints)"),
                       ("grid_sha256", "grid (other --tp/--pp/--dp/--weights/--reserved?)")):
        value = data.get(name)
        if value != expected[name]:
            shown = excerpt(value) if isinstance(value, str) else "missing"
            raise BadInput(where, name, f"written for another {what} ({shown}, this sweep's is "
                                        f"{expected[name][:16]}…): use another --resume file")


def _create(path: str, identity: ResumeIdentity) -> None:
    """The file, created with its header in it: never empty, never replacing anything."""
    folder = os.path.dirname(path) or "."
    payload = (identity.header_line() + "\n").encode("utf-8")
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".csa-plan-resume.", dir=folder)
        try:
            umask = os.umask(0o022)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)
            os.write(fd, payload)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # fails if anything (a file, a dangling link) is there
        except FileExistsError:
            return  # created meanwhile by another run: opened and checked like any existing file
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
                raise
            _create_exclusive(path, payload)  # a file system without hard links
    except OSError as exc:
        raise BadInput("options", "--resume", f"cannot create {excerpt(path)}: {_reason(exc)}") from None
    finally:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _create_exclusive(path: str, payload: bytes) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o666)
    except FileExistsError:
        return
    try:
        os.write(fd, payload)
    finally:
        os.close(fd)


class ResumeFile:
    """An open resume file: ``done`` holds the finished points read from it; ``append`` adds one."""

    def __init__(self, path: str, identity: ResumeIdentity, points: Mapping[str, SweepPoint]) -> None:
        self.path = path
        self.digest = identity.spec_digest
        self.written = 0
        self.fd = -1
        if not path:
            raise BadInput("options", "--resume", "the path is empty")
        if "\0" in path:
            raise BadInput("options", "--resume", f"the path {excerpt(path)} contains a NUL character")
        if os.path.basename(path) in ("", ".", ".."):
            raise BadInput("options", "--resume", f"{excerpt(path)} names a folder, not a file")
        self.fd = self._open(path, identity)
        try:
            self._read(identity, points)
        except OSError as exc:
            self.close()
            raise BadInput(path, None, f"cannot read or repair: {_reason(exc)}") from None
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _open(path: str, identity: ResumeIdentity) -> int:
        for _ in range(2):
            try:
                return os.open(path, _FLAGS)
            except FileNotFoundError:
                _create(path, identity)
            except OSError as exc:
                if exc.errno == errno.ELOOP or (exc.errno == errno.EMLINK and os.path.islink(path)):
                    raise BadInput("options", "--resume", f"{excerpt(path)} is a symbolic link: --resume never "
                                                          "follows one (name the file itself)") from None
                raise BadInput("options", "--resume", f"cannot open {excerpt(path)}: {_reason(exc)}") from None
            except ValueError as exc:
                raise BadInput("options", "--resume", f"cannot open {excerpt(path)}: {exc}") from None
        raise BadInput("options", "--resume", f"cannot open {excerpt(path)}: it keeps disappearing")

    def _read(self, identity: ResumeIdentity, points: Mapping[str, SweepPoint]) -> None:
        path = self.path
        info = os.fstat(self.fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(path, None, f"{describe_mode(info.st_mode)}, not a regular file (--resume needs a file)")
        if info.st_size > MAX_RESUME_BYTES:
            raise BadInput(path, None, f"file is {info.st_size:,} bytes, more than the {MAX_RESUME_BYTES:,}-byte "
                                       "limit (MAX_RESUME_BYTES)")
        data = os.pread(self.fd, info.st_size, 0) if info.st_size else b""
        first = data.find(b"\n")
        if first < 0 or first > MAX_RECORD_BYTES:
            raise BadInput(path, None, f"not a csa-plan resume file ({'empty' if not data else 'no header line'}): "
                                       f"{NOT_A_RESUME_FILE}")
        try:
            header = data[:first].decode("utf-8")
        except UnicodeDecodeError:
            raise BadInput(path, None, f"not a csa-plan resume file (its first line is not UTF-8 text): "
                                       f"{NOT_A_RESUME_FILE}") from None
        check_header(header, path, identity)
        body = data[first + 1:]
        cut = body.rfind(b"\n") + 1  # whole lines; anything after is a torn write
        tail = body[cut:]
        if tail and (len(tail) > MAX_RECORD_BYTES or not tail.startswith(b"{")):
            raise BadInput(path, None, f"ends in {len(tail):,} bytes that are no torn record (no final newline): "
                                       "not a file this csa-plan wrote alone; nothing was written to it")
        try:
            text = body[:cut].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadInput(path, None, f"not UTF-8 text (at byte {first + 1 + exc.start:,})") from None
        self.done, _ = parse_resume(text, path, identity.spec_digest, points, identity, first_line=2)
        if tail:
            os.ftruncate(self.fd, first + 1 + cut)  # repair: drop the torn record before appending

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


# -- the lines a sweep writes and reads back -------------------------------------------------------------------------


def resume_line(digest: str, result: PointResult) -> str:
    return json.dumps({"schema": RESUME_SCHEMA, "spec_digest": digest, **result.as_dict()}, sort_keys=True)


def read_resume(text: str, source: str, digest: str, keys: "AbstractSet[str] | Mapping[str, SweepPoint]") \
        -> dict[str, PointResult]:
    """Finished points of an earlier run of the same spec, validated record by record
    (``planner/sweep/resume.py``); a torn last line (interrupted write) is dropped."""
    return parse_resume(text, source, digest, keys)[0]
