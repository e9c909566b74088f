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
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from .errors import I63_LIMIT, BadInput
from .files import path_kind, read_text
from .values import check_keys, read_int, read_mapping, read_number, read_str

if TYPE_CHECKING:  # numpy is imported lazily so the CLI's --help stays fast
    import numpy as np

NS_PER_S = 1_000_000_000
MAX_TRACE_BYTES = 512 << 20
MAX_GENERATED_REQUESTS = 10_000_000  # bounds memory: the simulator holds a few arrays per request
MAX_RATE_PER_S = 1e9
MIN_RATE_PER_S = 1e-9
MAX_SIGMA = 20.0
MAX_ARRIVAL_S = (I63_LIMIT - 1) / NS_PER_S  # the int64 nanosecond clock
TRACE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
JSONL_FIELDS = ("arrival_s", "prompt_tokens", "output_tokens")


@dataclass(frozen=True)
class MixSettings:
    """What a mix spec may say about the run; ``None`` means 'not said' (the CLI decides)."""

    model: str | None = None
    layout: str | None = None
    max_seq_len: int | None = None
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    router: str | None = None
    device_memory_bytes: int | None = None
    reserved_bytes: int | None = None
    reserve: str | None = None
    bucket: int | None = None
    policy: str | None = None
    prefill_tok_s: float | None = None
    tpot_ms: float | None = None
    rate_scale: float | None = None


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests in arrival order; arrays are numpy int64 (class ids int32)."""

    source: str
    arrival_ns: "np.ndarray"
    prompt_tokens: "np.ndarray"
    output_tokens: "np.ndarray"
    class_ids: "np.ndarray"
    class_names: tuple[str, ...]
    settings: MixSettings = field(default_factory=MixSettings)
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return int(self.arrival_ns.shape[0])


def load_workload(ref: str, *, sort: bool = False) -> Workload:
    """Dispatch on the suffix: .yaml/.yml mix, .csv trace, .jsonl/.ndjson requests."""
    path = Path(ref)
    kind = path_kind(path)
    if kind != "file":
        raise BadInput(ref, None, "no such workload file" if kind is None else "not a regular file")
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        from .safe_yaml import load_yaml

        return generate_mix(load_yaml(read_text(path, MAX_TRACE_BYTES), ref), ref)
    if suffix == ".csv":
        return read_trace_csv(read_text(path, MAX_TRACE_BYTES), ref, sort=sort)
    if suffix in (".jsonl", ".ndjson"):
        return read_jsonl(read_text(path, MAX_TRACE_BYTES), ref, sort=sort)
    raise BadInput(ref, None, "unknown workload type (use .yaml mix, .csv trace or .jsonl requests)")


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


# -- generated mixes ----------------------------------------------------------------------

MIX_KEYS = {"name", "seed", "requests", "duration_s", "classes", "model", "layout", "max_seq_len", "deployment",
            "memory", "reserve", "bucket", "policy", "time", "rate_scale"}
CLASS_KEYS = {"name", "rate", "prompt", "output"}
DISTRIBUTIONS = {
    "fixed": ({"value"}, set()),
    "uniform": ({"low", "high"}, set()),
    "lognormal": ({"median", "sigma"}, {"min", "max"}),
    "empirical": ({"values"}, {"weights"}),
}








def _settings(data: Mapping[str, Any], source: str) -> MixSettings:
    from .memory import parse_size

    out: dict[str, Any] = {}
    if "model" in data:
        out["model"] = read_str(source, "model", data["model"])
    if "layout" in data:
        out["layout"] = read_str(source, "layout", data["layout"])
    if "max_seq_len" in data:
        out["max_seq_len"] = read_int(source, "max_seq_len", data["max_seq_len"])
    if "deployment" in data:
        dep = read_mapping(source, "deployment", data["deployment"])
        check_keys(source, "deployment", dep, {"tp", "pp", "dp", "router"})
        for k in ("tp", "pp", "dp"):
            if k in dep:
                out[k] = read_int(source, f"deployment.{k}", dep[k])
        if "router" in dep:
            out["router"] = read_str(source, "deployment.router", dep["router"])
    if "memory" in data:
        mem = read_mapping(source, "memory", data["memory"])
        check_keys(source, "memory", mem, {"device", "reserved"})
        if "device" in mem:
            out["device_memory_bytes"] = parse_size(str(mem["device"]), source, "memory.device")
        if "reserved" in mem:
            out["reserved_bytes"] = parse_size(str(mem["reserved"]), source, "memory.reserved")
    for k in ("reserve", "policy"):
        if k in data:
            out[k] = read_str(source, k, data[k])
    if "bucket" in data:
        out["bucket"] = read_int(source, "bucket", data["bucket"])
    if "rate_scale" in data:
        out["rate_scale"] = read_number(source, "rate_scale", data["rate_scale"], positive=True)
    if "time" in data:
        tm = read_mapping(source, "time", data["time"])
        check_keys(source, "time", tm, {"prefill_tok_s", "tpot_ms"})
        if "prefill_tok_s" in tm:
            out["prefill_tok_s"] = read_number(source, "time.prefill_tok_s", tm["prefill_tok_s"], positive=True)
        if "tpot_ms" in tm:
            out["tpot_ms"] = read_number(source, "time.tpot_ms", tm["tpot_ms"])
    return MixSettings(**out)


@dataclass(frozen=True)
class Distribution:
    """A token-length distribution; ``params`` are validated by ``parse_distribution``."""

    kind: str
    params: tuple[tuple[str, Any], ...]

    def sample(self, rng: Any, n: int) -> "np.ndarray":
        import numpy as np

        p = dict(self.params)
        if self.kind == "fixed":
            return np.full(n, p["value"], dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(p["low"], p["high"], size=n, endpoint=True, dtype=np.int64)
        if self.kind == "lognormal":
            raw = rng.lognormal(mean=math.log(p["median"]), sigma=p["sigma"], size=n)
            hi = p.get("max")
            out = np.rint(np.minimum(raw, float(hi) if hi is not None else 1e15)).astype(np.int64)
            return np.maximum(out, p.get("min", 1))
        values = np.array(p["values"], dtype=np.int64)
        weights = p.get("weights")
        prob = None
        if weights is not None:
            w = np.array(weights, dtype=float) / max(weights)  # scale first: a sum of huge weights must not overflow
            prob = w / w.sum()
        return values[rng.choice(len(values), size=n, p=prob)]


def parse_distribution(value: Any, source: str, field: str) -> Distribution:
    data = read_mapping(source, field, value)
    kind = data.get("dist")
    if not isinstance(kind, str) or kind not in DISTRIBUTIONS:
        raise BadInput(source, f"{field}.dist",
                       f"unknown distribution {kind!r} (known: {', '.join(DISTRIBUTIONS)})")
    required, optional = DISTRIBUTIONS[kind]
    check_keys(source, field, data, required | optional | {"dist"})
    absent = sorted(required - set(data))
    if absent:
        raise BadInput(source, f"{field}.{absent[0]}", f"required by the {kind} distribution")
    params: dict[str, Any] = {}
    if kind == "fixed":
        params["value"] = read_int(source, f"{field}.value", data["value"])
    elif kind == "uniform":
        low = read_int(source, f"{field}.low", data["low"])
        high = read_int(source, f"{field}.high", data["high"])
        if high < low:
            raise BadInput(source, f"{field}.high", f"must be at least low ({low}), got {high}")
        params.update(low=low, high=high)
    elif kind == "lognormal":
        params["median"] = read_number(source, f"{field}.median", data["median"], positive=True)
        params["sigma"] = read_number(source, f"{field}.sigma", data["sigma"])
        if params["sigma"] > MAX_SIGMA:
            raise BadInput(source, f"{field}.sigma", f"must be at most {MAX_SIGMA:g}, got {params['sigma']:g}")
        for k in ("min", "max"):
            if k in data:
                params[k] = read_int(source, f"{field}.{k}", data[k])
        if params.get("max") is not None and params["max"] < params.get("min", 1):
            raise BadInput(source, f"{field}.max", "must be at least min")
    else:
        values = data["values"]
        if not isinstance(values, list) or not values:
            raise BadInput(source, f"{field}.values", "expected a non-empty list of token counts")
        params["values"] = tuple(read_int(source, f"{field}.values[{i}]", v) for i, v in enumerate(values))
        if "weights" in data:
            weights = data["weights"]
            if not isinstance(weights, list) or len(weights) != len(values):
                raise BadInput(source, f"{field}.weights", "expected one weight per value")
            ws = tuple(read_number(source, f"{field}.weights[{i}]", w) for i, w in enumerate(weights))
            if sum(ws) <= 0:
                raise BadInput(source, f"{field}.weights", "must not all be zero")
            params["weights"] = ws
    return Distribution(kind, tuple(sorted(params.items())))


@dataclass(frozen=True)
class RequestClass:
    name: str
    rate_per_s: float
    prompt: Distribution
    output: Distribution


def parse_mix(data: Any, source: str) -> tuple[tuple[RequestClass, ...], int, int | None, float | None, MixSettings]:
    """(classes, seed, requests, duration_s, settings) from a mix spec mapping."""
    mix = read_mapping(source, "", data)
    check_keys(source, "", mix, MIX_KEYS)
    raw_classes = mix.get("classes")
    if not isinstance(raw_classes, list) or not raw_classes:
        raise BadInput(source, "classes", "expected a non-empty list of request classes")
    classes = []
    for i, raw in enumerate(raw_classes):
        where = f"classes[{i}]"
        c = read_mapping(source, where, raw)
        check_keys(source, where, c, CLASS_KEYS)
        for k in ("rate", "prompt", "output"):
            if k not in c:
                raise BadInput(source, f"{where}.{k}", "missing")
        name = read_str(source, f"{where}.name", c.get("name", f"class{i}"))
        rate = read_number(source, f"{where}.rate", c["rate"], positive=True)
        if not MIN_RATE_PER_S <= rate <= MAX_RATE_PER_S:
            raise BadInput(source, f"{where}.rate",
                           f"must be between {MIN_RATE_PER_S:g} and {MAX_RATE_PER_S:g} requests/s, got {rate:g}")
        classes.append(RequestClass(name, rate, parse_distribution(c["prompt"], source, f"{where}.prompt"),
                                    parse_distribution(c["output"], source, f"{where}.output")))
    seed = read_int(source, "seed", mix.get("seed", 0))
    requests = read_int(source, "requests", mix["requests"]) if "requests" in mix else None
    duration = read_number(source, "duration_s", mix["duration_s"], positive=True) if "duration_s" in mix else None
    if (requests is None) == (duration is None):
        raise BadInput(source, "requests", "give exactly one of requests (a count) or duration_s")
    if requests is not None and not 0 < requests <= MAX_GENERATED_REQUESTS:
        raise BadInput(source, "requests", f"must be 1..{MAX_GENERATED_REQUESTS}, got {requests}")
    return tuple(classes), seed, requests, duration, _settings(mix, source)


def generate_mix(data: Any, source: str) -> Workload:
    """Poisson arrivals at the summed rate, each request's class drawn by rate share.

    With ``requests: N`` exactly N requests are drawn; with ``duration_s`` the count
    is Poisson(rate x duration) over that span. The seed fixes everything.
    """
    import numpy as np

    classes, seed, requests, duration, settings = parse_mix(data, source)
    rng = np.random.default_rng(seed)
    total_rate = sum(c.rate_per_s for c in classes)
    if requests is None:
        assert duration is not None
        expected = total_rate * duration
        if expected > MAX_GENERATED_REQUESTS:
            raise BadInput(source, "duration_s", f"would generate about {expected:.3g} requests "
                           f"(limit {MAX_GENERATED_REQUESTS})")
        requests = int(rng.poisson(expected))
        if requests > MAX_GENERATED_REQUESTS:
            raise BadInput(source, "duration_s", f"would generate {requests} requests (limit {MAX_GENERATED_REQUESTS})")
        if requests == 0:
            raise BadInput(source, "duration_s", "the mix generates no request in that duration")
    gaps = rng.exponential(1.0 / total_rate, size=requests)
    gaps[0] = 0.0
    seconds = np.cumsum(gaps)
    if not seconds[-1] <= MAX_ARRIVAL_S:
        raise BadInput(source, "classes", f"arrivals would span {seconds[-1]:.3g} s, beyond the int64 nanosecond "
                       "clock; raise the rates or generate fewer requests")
    arrival = np.rint(seconds * NS_PER_S).astype(np.int64)
    shares = np.array([c.rate_per_s for c in classes]) / total_rate
    class_ids = rng.choice(len(classes), size=requests, p=shares).astype(np.int32)
    prompt = np.empty(requests, dtype=np.int64)
    output = np.empty(requests, dtype=np.int64)
    for k, c in enumerate(classes):
        mask = class_ids == k
        n = int(mask.sum())
        prompt[mask] = c.prompt.sample(rng, n)
        output[mask] = c.output.sample(rng, n)
    return Workload(source, arrival, prompt, output, class_ids, tuple(c.name for c in classes), settings=settings)
