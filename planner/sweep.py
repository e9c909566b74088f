"""Capacity-planning sweeps: a grid of deployments, each run through ``simulate``.

A sweep spec (YAML) names a workload, the model(s), the axes to vary, the objective and
the constraints. ``parse_spec`` expands it into frozen ``SweepPoint``s; ``static_skip``
rules out points that cannot work before any simulation (a gate refusal, no memory
left, a request that can never fit); ``evaluate`` runs one point with the existing
``simulate`` and ``find_capacity``; ``rank`` and ``pareto_front`` answer the question.

Evaluation is a pure function of (spec context, point): the workload is the same for
every point (common random numbers: a mix spec is drawn from its seed, or the sweep's
``seed`` when given), so the serial loop, a process pool and a Ray cluster return equal
``PointResult``s, and a resumed sweep can mix results from several runs.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import asdict, dataclass, fields
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from .errors import BadInput
from .placement import Router
from .sim_capacity import SCALE_MAX, SCALE_MIN
from .simulate import NS_PER_S, Outcome, Policy, Reserve

if TYPE_CHECKING:
    from .model import ModelSpec
    from .workloads import Workload

SCHEMA = "csa-plan/sweep/v1"
RESUME_SCHEMA = "csa-plan/sweep-point/v1"
MAX_POINTS = 100_000
DEFAULT_BUCKET = 4096

AXES = ("model", "device", "reserved", "tp", "pp", "dp", "router", "reserve", "policy", "layout",
        "rate_scale", "max_seq_len")
TOP_KEYS = {"name", "workload", "sort", "seed", "grid", "time", "search", "objective", "constraints"}


class Objective(str, Enum):
    FEWEST_DEVICES = "fewest_devices"  # then the highest sustainable rate per device
    RATE_PER_DEVICE = "rate_per_device"  # then the fewest devices


class SkipReason(str, Enum):
    """Why a point is ruled out before it is simulated."""

    BAD_DEPLOYMENT = "BadDeployment"  # tp does not divide the heads, more stages than layers, ...
    PLAN_REFUSED = "PlanRefused"  # the descriptor gate refuses a layer under this point
    NO_MEMORY_LEFT = "NoMemoryLeft"  # device memory minus reserved is zero or less
    NEVER_FITS = "NeverFits"  # even the smallest request's bundle exceeds an empty device
    LARGEST_NEVER_FITS = "LargestRequestNeverFits"  # some request can never fit: zero refusals impossible
    EXCEEDS_MAX_SEQ_LEN = "RequestExceedsCapacity"  # some request is longer than max_seq_len: same


# -- the spec -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Reserved:
    """Per-device memory set aside: a fixed amount plus weights split over the tp x pp devices of a replica."""

    label: str
    fixed_bytes: int = 0
    weights_bytes: int = 0

    def per_device_bytes(self, tp: int, pp: int) -> int:
        return self.fixed_bytes + -(-self.weights_bytes // (tp * pp))


@dataclass(frozen=True)
class SweepPoint:
    model: str
    device: str  # as written: a GPU name or a size
    memory_bytes: int
    reserved: Reserved
    tp: int = 1
    pp: int = 1
    dp: int = 1
    router: Router = Router.ROUND_ROBIN
    reserve: Reserve = Reserve.MAX
    bucket: int = DEFAULT_BUCKET
    policy: Policy = Policy.REFUSE
    layout: str = "exact"
    rate_scale: float = 1.0  # the traffic the constraints are checked at
    max_seq_len: int | None = None

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def reserved_bytes(self) -> int:
        return self.reserved.per_device_bytes(self.tp, self.pp)

    @property
    def limit_bytes(self) -> int:
        """May be zero or negative: such a point is skipped (NoMemoryLeft), never run as 'unlimited'."""
        return self.memory_bytes - self.reserved_bytes

    @property
    def reserve_label(self) -> str:
        return "max" if self.reserve is Reserve.MAX else f"fit/{self.bucket}"

    @property
    def key(self) -> str:
        """Stable identity of the point (resume files, seeds, sorting ties)."""
        return ",".join((
            f"model={self.model}", f"device={self.device}", f"reserved={self.reserved.label}",
            f"tp={self.tp}", f"pp={self.pp}", f"dp={self.dp}", f"router={self.router.value}",
            f"reserve={self.reserve_label}", f"policy={self.policy.value}", f"layout={self.layout}",
            f"rate_scale={self.rate_scale:g}", f"max_seq_len={self.max_seq_len or 'model'}"))

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "device": self.device, "memory_bytes": self.memory_bytes,
                "reserved": self.reserved.label, "reserved_bytes": self.reserved_bytes,
                "limit_bytes": self.limit_bytes, "tp": self.tp, "pp": self.pp, "dp": self.dp,
                "devices": self.devices, "router": self.router.value, "reserve": self.reserve_label,
                "policy": self.policy.value, "layout": self.layout, "rate_scale": self.rate_scale,
                "max_seq_len": self.max_seq_len}


@dataclass(frozen=True)
class Constraints:
    zero_refusals: bool = True
    wait_p99_max_s: float | None = None
    min_mean_utilization: float = 0.0

    @property
    def wait_p99_max_ns(self) -> int | None:
        return None if self.wait_p99_max_s is None else int(round(self.wait_p99_max_s * NS_PER_S))


@dataclass(frozen=True)
class Search:
    """The capacity bisection: relative precision and the bounds of the rate scale searched."""

    rel_tol: float = 0.01
    min_scale: float = SCALE_MIN
    max_scale: float = SCALE_MAX


@dataclass(frozen=True)
class Context:
    """Everything a worker needs besides the point; small, picklable, the same for every point."""

    workload: str  # absolute path
    sort: bool = False
    seed: int | None = None  # overrides a mix spec's seed
    prefill_tok_s: float = 10_000.0
    tpot_ms: float = 20.0
    search: Search = Search()
    constraints: Constraints = Constraints()


@dataclass(frozen=True)
class SweepSpec:
    source: str
    name: str
    context: Context
    points: tuple[SweepPoint, ...]
    objective: Objective = Objective.FEWEST_DEVICES

    @property
    def digest(self) -> str:
        """What a resumed point must have been computed under (the workload file's bytes included)."""
        h = hashlib.sha256()
        h.update(Path(self.context.workload).read_bytes())
        ctx = asdict(self.context)
        ctx.pop("workload")
        h.update(json.dumps(ctx, sort_keys=True, default=str).encode())
        return h.hexdigest()[:16]


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _mapping(value: Any, source: str, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise BadInput(source, where or None, f"expected a mapping, got {type(value).__name__}")
    return value


def _keys(data: Mapping[str, Any], allowed: set[str], source: str, where: str) -> None:
    unknown = sorted(str(k) for k in data if k not in allowed)
    if unknown:
        raise BadInput(source, f"{where}.{unknown[0]}" if where else unknown[0],
                       f"unknown key (known: {', '.join(sorted(allowed))})")


def _number(source: str, where: str, value: Any, *, positive: bool = False, at_most: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadInput(source, where, f"expected a number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise BadInput(source, where, f"must be {'positive' if positive else 'non-negative'}, got {value}")
    if at_most is not None and value > at_most:
        raise BadInput(source, where, f"must be at most {at_most:g}, got {value}")
    return float(value)


def _enum(enum: type[Enum], value: Any, source: str, where: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        known = ", ".join(str(m.value) for m in enum)
        raise BadInput(source, where, f"unknown value {value!r} (known: {known})") from None


def _size(value: Any, source: str, where: str) -> int:
    from .memory import parse_size

    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise BadInput(source, where, f"expected a size (bytes, GB, GiB or a GPU name), got {value!r}")
    return parse_size(str(value), source, where)


def _reserved(value: Any, source: str, where: str) -> Reserved:
    if isinstance(value, dict):
        _keys(value, {"weights", "runtime"}, source, where)
        fixed = _size(value.get("runtime", 0), source, f"{where}.runtime")
        weights = _size(value.get("weights", 0), source, f"{where}.weights")
        return Reserved(f"weights {value.get('weights', 0)}/(tp*pp) + {value.get('runtime', 0)}", fixed, weights)
    return Reserved(str(value), _size(value, source, where))


def _reserve(value: Any, source: str, where: str) -> tuple[Reserve, int]:
    """``max``, ``fit`` (bucket 4096), ``fit/16384`` or ``{fit: 16384}``."""
    from .values import read_int

    if isinstance(value, dict):
        _keys(value, {"fit"}, source, where)
        bucket = read_int(source, f"{where}.fit", value.get("fit"))
    elif isinstance(value, str) and value.startswith("fit/"):
        try:
            bucket = int(value[4:], 10)
        except ValueError:
            raise BadInput(source, where, f"cannot read the bucket in {value!r} (use fit/4096)") from None
    elif value in ("max", "fit"):
        return (Reserve.MAX, DEFAULT_BUCKET) if value == "max" else (Reserve.FIT, DEFAULT_BUCKET)
    else:
        raise BadInput(source, where, f"unknown reservation {value!r} (use max, fit, fit/BUCKET or {{fit: BUCKET}})")
    if bucket < 1:
        raise BadInput(source, where, f"bucket must be at least 1, got {bucket}")
    return Reserve.FIT, bucket


def _model_ref(value: Any, base: Path, source: str, where: str) -> str:
    from .loaders import PRESETS
    from .values import read_str

    ref = read_str(source, where, value)
    if ref in PRESETS:
        return ref
    path = Path(ref)
    if not path.is_absolute():
        path = base / path
    if not path.exists():
        raise BadInput(source, where, f"no such model file or preset {ref!r} (presets: {', '.join(PRESETS)})")
    return str(path.resolve())


def parse_spec(data: Any, source: str) -> SweepSpec:
    """Validate every key (unknown ones are bad input) and expand the grid in axis order."""
    from .profiles import PROFILES
    from .values import read_bool, read_int, read_str

    spec = _mapping(data, source, "")
    _keys(spec, TOP_KEYS, source, "")
    base = Path(source).resolve().parent
    if "workload" not in spec:
        raise BadInput(source, "workload", "missing (a mix spec, a CSV trace or JSONL requests, relative to this file)")
    wl_path = base / read_str(source, "workload", spec["workload"])
    if not wl_path.is_file():
        raise BadInput(source, "workload", f"no such file: {wl_path}")
    name = read_str(source, "name", spec.get("name", Path(source).stem))
    sort = read_bool(source, "sort", spec.get("sort", False))
    seed = read_int(source, "seed", spec["seed"]) if "seed" in spec else None

    time = _mapping(spec.get("time", {}), source, "time")
    _keys(time, {"prefill_tok_s", "tpot_ms"}, source, "time")
    prefill = _number(source, "time.prefill_tok_s", time.get("prefill_tok_s", 10_000.0), positive=True)
    tpot = _number(source, "time.tpot_ms", time.get("tpot_ms", 20.0))

    search_raw = _mapping(spec.get("search", {}), source, "search")
    _keys(search_raw, {"rel_tol", "min_scale", "max_scale"}, source, "search")
    rel_tol = _number(source, "search.rel_tol", search_raw.get("rel_tol", Search.rel_tol), positive=True, at_most=1.0)
    min_scale = _number(source, "search.min_scale", search_raw.get("min_scale", Search.min_scale), positive=True)
    max_scale = _number(source, "search.max_scale", search_raw.get("max_scale", Search.max_scale), positive=True)
    if min_scale >= max_scale:
        raise BadInput(source, "search.max_scale", f"must be above min_scale ({min_scale:g}), got {max_scale:g}")

    cons_raw = _mapping(spec.get("constraints", {}), source, "constraints")
    _keys(cons_raw, {"zero_refusals", "wait_p99_max_s", "min_mean_utilization"}, source, "constraints")
    wait = cons_raw.get("wait_p99_max_s")
    constraints = Constraints(
        zero_refusals=read_bool(source, "constraints.zero_refusals", cons_raw.get("zero_refusals", True)),
        wait_p99_max_s=None if wait is None else _number(source, "constraints.wait_p99_max_s", wait),
        min_mean_utilization=_number(source, "constraints.min_mean_utilization",
                                     cons_raw.get("min_mean_utilization", 0.0), at_most=1.0))
    objective = _enum(Objective, spec.get("objective", Objective.FEWEST_DEVICES.value), source, "objective")

    grid = _mapping(spec.get("grid", {}), source, "grid")
    _keys(grid, set(AXES), source, "grid")
    if "model" not in grid or "device" not in grid:
        raise BadInput(source, "grid.model" if "model" not in grid else "grid.device",
                       "missing: a sweep needs at least one model and one device memory")
    axes: dict[str, list[Any]] = {}
    for axis in AXES:
        raw = _as_list(grid.get(axis, _AXIS_DEFAULTS[axis]))
        if not raw:
            raise BadInput(source, f"grid.{axis}", "expected at least one value")
        values = []
        for i, v in enumerate(raw):
            where = f"grid.{axis}[{i}]" if isinstance(grid.get(axis), list) else f"grid.{axis}"
            if axis == "model":
                values.append(_model_ref(v, base, source, where))
            elif axis == "device":
                values.append((str(v), _size(v, source, where)))
            elif axis == "reserved":
                values.append(_reserved(v, source, where))
            elif axis in ("tp", "pp", "dp"):
                n = read_int(source, where, v)
                if n < 1:
                    raise BadInput(source, where, f"must be at least 1, got {n}")
                values.append(n)
            elif axis == "router":
                values.append(_enum(Router, v, source, where))
            elif axis == "reserve":
                values.append(_reserve(v, source, where))
            elif axis == "policy":
                values.append(_enum(Policy, v, source, where))
            elif axis == "layout":
                layout = read_str(source, where, v)
                if layout not in PROFILES:
                    raise BadInput(source, where, f"unknown layout {layout!r} (known: {', '.join(PROFILES)})")
                values.append(layout)
            elif axis == "rate_scale":
                values.append(_number(source, where, v, positive=True))
            else:
                values.append(None if v is None else read_int(source, where, v))
        if len(set(map(repr, values))) != len(values):
            raise BadInput(source, f"grid.{axis}", "lists a value twice")
        axes[axis] = values
    if Policy.QUEUE in axes["policy"] and constraints.wait_p99_max_s is None:
        raise BadInput(source, "constraints.wait_p99_max_s",
                       "required when the grid has policy queue (a queue never refuses; waits are the limit)")
    count = math.prod(len(v) for v in axes.values())
    if count > MAX_POINTS:
        raise BadInput(source, "grid", f"expands to {count:,} points (at most {MAX_POINTS:,})")
    points = []
    for combo in itertools.product(*(axes[a] for a in AXES)):
        v = dict(zip(AXES, combo))
        (device, memory), (reserve, bucket) = v["device"], v["reserve"]
        points.append(SweepPoint(
            model=v["model"], device=device, memory_bytes=memory, reserved=v["reserved"], tp=v["tp"], pp=v["pp"],
            dp=v["dp"], router=v["router"], reserve=reserve, bucket=bucket, policy=v["policy"],
            layout=v["layout"], rate_scale=v["rate_scale"], max_seq_len=v["max_seq_len"]))
    context = Context(workload=str(wl_path.resolve()), sort=sort, seed=seed, prefill_tok_s=prefill, tpot_ms=tpot,
                      search=Search(rel_tol, min_scale, max_scale), constraints=constraints)
    return SweepSpec(source, name, context, tuple(points), objective)


_AXIS_DEFAULTS: dict[str, Any] = {
    "model": [], "device": [], "reserved": ["0"], "tp": [1], "pp": [1], "dp": [1], "router": ["round-robin"],
    "reserve": ["max"], "policy": ["refuse"], "layout": ["exact"], "rate_scale": [1.0], "max_seq_len": [None],
}


def load_spec(path: str) -> SweepSpec:
    from .safe_yaml import load_yaml

    p = Path(path)
    if not p.is_file():
        raise BadInput(path, None, "no such sweep spec")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(path, None, f"cannot read: {exc}") from None
    return parse_spec(load_yaml(text, path), path)


# -- loading, cached per process (workers load once, then reuse) ---------------------------


@lru_cache(maxsize=4)
def load_context_workload(path: str, sort: bool, seed: int | None) -> "Workload":
    from .workloads import generate_mix, load_workload

    if seed is not None and Path(path).suffix.lower() in (".yaml", ".yml"):
        from .safe_yaml import load_yaml

        data = load_yaml(Path(path).read_text(encoding="utf-8"), path)
        if isinstance(data, dict):
            return generate_mix({**data, "seed": seed}, path)
    return load_workload(path, sort=sort)


@lru_cache(maxsize=16)
def load_point_model(ref: str, max_seq_len: int | None) -> "ModelSpec":
    from .loaders import load_model

    return load_model(ref, max_seq_len=max_seq_len)


# -- static skipping ----------------------------------------------------------------------


@dataclass(frozen=True)
class Skip:
    key: str
    reason: SkipReason
    detail: str


@dataclass(frozen=True)
class WorkloadBounds:
    """The shortest and longest request (prompt + output): all a static bound needs."""

    requests: int
    min_tokens: int
    max_tokens: int
    base_rate_per_s: float  # requests per second at rate scale 1 (0 when all arrive at once)

    @staticmethod
    def of(wl: "Workload") -> "WorkloadBounds":
        total = wl.prompt_tokens + wl.output_tokens
        n = len(wl)
        span = int(wl.arrival_ns[-1] - wl.arrival_ns[0]) if n else 0
        return WorkloadBounds(n, int(total.min()), int(total.max()), n * NS_PER_S / span if span else 0.0)


def _largest_bundle(spec: "ModelSpec", point: SweepPoint, tokens: int) -> int:
    """Bytes one request of ``tokens`` reserved tokens keeps on the fullest device."""
    from .placement import split_stages, stage_bundles
    from .plan import PlanOptions, plan_model

    split = split_stages(spec.num_main_layers, spec.num_mtp_layers, point.pp)
    plan = plan_model(spec, PlanOptions(max_seq_len=tokens, tp=point.tp, layout=point.layout))
    return max(b.total_bytes for b in stage_bundles(plan, split))


def static_skip(point: SweepPoint, bounds: WorkloadBounds, constraints: Constraints) -> Skip | None:
    """A reason this point cannot work, found without simulating it; None if it must be run."""
    from .placement import split_stages
    from .plan import PlanOptions, plan_model
    from .simulate import reserved_tokens

    if point.limit_bytes <= 0:
        return Skip(point.key, SkipReason.NO_MEMORY_LEFT,
                    f"reserved {point.reserved_bytes:,} bytes >= device memory {point.memory_bytes:,} bytes")
    spec = load_point_model(point.model, point.max_seq_len)
    try:
        split_stages(spec.num_main_layers, spec.num_mtp_layers, point.pp)
        plan = plan_model(spec, PlanOptions(max_seq_len=point.max_seq_len, tp=point.tp, layout=point.layout))
    except BadInput as exc:
        return Skip(point.key, SkipReason.BAD_DEPLOYMENT, f"{exc.field}: {exc.problem}")
    if plan.refusals:
        r = plan.refusals[0]
        more = f" (and {len(plan.refusals) - 1} more)" if len(plan.refusals) > 1 else ""
        return Skip(point.key, SkipReason.PLAN_REFUSED, f"{r.type.value}: {r.message}{more}")
    max_seq_len = point.max_seq_len or max(d.max_seq_len for d in spec.layers)
    window = max(d.window for d in spec.layers)
    if bounds.min_tokens > max_seq_len:
        return Skip(point.key, SkipReason.EXCEEDS_MAX_SEQ_LEN,
                    f"every request is longer than max_seq_len {max_seq_len:,} (shortest {bounds.min_tokens:,} tokens)")
    smallest = reserved_tokens(bounds.min_tokens, point.reserve, point.bucket, window, max_seq_len)
    need = _largest_bundle(spec, point, smallest)
    if need > point.limit_bytes:
        return Skip(point.key, SkipReason.NEVER_FITS,
                    f"the smallest request reserves {need:,} bytes on a device; the limit is {point.limit_bytes:,}")
    if constraints.zero_refusals:
        if bounds.max_tokens > max_seq_len:
            return Skip(point.key, SkipReason.EXCEEDS_MAX_SEQ_LEN,
                        f"a request of {bounds.max_tokens:,} tokens exceeds max_seq_len {max_seq_len:,}")
        largest = reserved_tokens(bounds.max_tokens, point.reserve, point.bucket, window, max_seq_len)
        need = _largest_bundle(spec, point, largest)
        if need > point.limit_bytes:
            return Skip(point.key, SkipReason.LARGEST_NEVER_FITS,
                        f"the largest request reserves {need:,} bytes on a device; the limit is {point.limit_bytes:,}")
    return None


# -- evaluating one point -----------------------------------------------------------------


@dataclass(frozen=True)
class PointResult:
    """One simulated point: the run at its target rate and its sustainable rate. JSON round-trips exactly."""

    key: str
    devices: int
    requests: int
    admitted: int
    refused: int
    refusals: tuple[tuple[str, int], ...]
    wait_p99_ns: int | None
    peak_bytes: int  # all devices together, at the target rate
    mean_utilization: float  # resident / limit, averaged over time and devices
    peak_utilization: float  # the fullest device's peak / limit
    sustainable_rate_scale: float | None  # the largest rate scale meeting the rate criterion
    at_least: bool  # the search hit its upper bound
    probes: int
    sustainable_rate_per_s: float | None  # requests per second at that scale
    rate_per_device_per_s: float | None
    feasible: bool  # every constraint holds at the target rate
    violations: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["refusals"] = dict(self.refusals)
        d["violations"] = list(self.violations)
        return d

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "PointResult":
        values = {f.name: d[f.name] for f in fields(PointResult)}
        values["refusals"] = tuple((str(k), int(v)) for k, v in dict(d["refusals"]).items())
        values["violations"] = tuple(d["violations"])
        return PointResult(**values)


@dataclass(frozen=True)
class Task:
    """What a worker receives: the point and the shared context (no arrays: workers load and cache them)."""

    context: Context
    point: SweepPoint


def evaluate(task: Task) -> PointResult:
    """Run one point: ``simulate`` at its target rate, ``find_capacity`` from there."""
    from .placement import Placement
    from .sim_capacity import find_capacity
    from .simulate import SimConfig, TimeModel, prepare, simulate

    ctx, p = task.context, task.point
    wl = load_context_workload(ctx.workload, ctx.sort, ctx.seed)
    spec = load_point_model(p.model, p.max_seq_len)
    config = SimConfig(placement=Placement(tp=p.tp, pp=p.pp, dp=p.dp, router=p.router), limit_bytes=p.limit_bytes,
                       reserve=p.reserve, bucket=p.bucket, policy=p.policy,
                       time=TimeModel(prefill_tok_s=ctx.prefill_tok_s, tpot_ms=ctx.tpot_ms, rate_scale=p.rate_scale),
                       layout=p.layout, max_seq_len=p.max_seq_len)
    scn = prepare(spec, wl, config)
    result = simulate(scn)
    cons = ctx.constraints
    wait_bound = cons.wait_p99_max_ns if p.policy is Policy.QUEUE else None
    cap = find_capacity(scn, wait_bound, rel_tol=ctx.search.rel_tol, scale_min=ctx.search.min_scale,
                        scale_max=ctx.search.max_scale)
    byte_ns = sum(d.byte_ns for d in result.devices)
    mean_util = byte_ns / (p.limit_bytes * result.span_ns * len(result.devices)) if result.span_ns else 0.0
    peak_util = max(d.peak_bytes for d in result.devices) / p.limit_bytes
    violations = []
    if cons.zero_refusals and result.refused:
        detail = ", ".join(f"{reason} {n:,}" for reason, n in result.refusals)
        violations.append(f"{result.refused:,} refused ({detail})")
    if cons.wait_p99_max_ns is not None:
        if result.wait_p99_ns is None:
            violations.append("no request admitted")
        elif result.wait_p99_ns > cons.wait_p99_max_ns:
            violations.append(f"wait p99 {result.wait_p99_ns / NS_PER_S:.3f} s > {cons.wait_p99_max_s:g} s")
    if mean_util < cons.min_mean_utilization:
        violations.append(f"mean utilization {mean_util:.1%} < {cons.min_mean_utilization:.1%}")
    if result.refusal_count(Outcome.OUT_OF_MEMORY) == 0 and cap.rate_scale is None:
        violations.append("no sustainable rate")  # cannot happen when the target run is clean; kept honest
    bounds = WorkloadBounds.of(wl)
    rate = None if cap.rate_scale is None else cap.rate_scale * bounds.base_rate_per_s
    return PointResult(
        key=p.key, devices=p.devices, requests=result.requests, admitted=result.admitted, refused=result.refused,
        refusals=result.refusals, wait_p99_ns=result.wait_p99_ns, peak_bytes=result.peak_bytes,
        mean_utilization=mean_util, peak_utilization=peak_util, sustainable_rate_scale=cap.rate_scale,
        at_least=cap.capped, probes=len(cap.probes), sustainable_rate_per_s=rate,
        rate_per_device_per_s=None if rate is None else rate / p.devices,
        feasible=not violations, violations=tuple(violations))


# -- the answer ---------------------------------------------------------------------------


def rank(results: list[PointResult], objective: Objective, order: Mapping[str, int]) -> list[PointResult]:
    """Feasible points, best first; ties fall back to the other objective, then grid order."""

    def rate(r: PointResult) -> float:
        return r.rate_per_device_per_s or 0.0

    feasible = [r for r in results if r.feasible]
    if objective is Objective.FEWEST_DEVICES:
        return sorted(feasible, key=lambda r: (r.devices, -rate(r), order[r.key]))
    return sorted(feasible, key=lambda r: (-rate(r), r.devices, order[r.key]))


def pareto_front(results: list[PointResult], order: Mapping[str, int]) -> list[PointResult]:
    """Feasible points no other feasible point beats on both devices (fewer) and sustainable rate (higher)."""
    best: dict[int, PointResult] = {}
    for r in sorted((r for r in results if r.feasible and r.sustainable_rate_per_s is not None),
                    key=lambda r: (r.devices, -(r.sustainable_rate_per_s or 0.0), order[r.key])):
        best.setdefault(r.devices, r)
    front, top = [], -1.0
    for devices in sorted(best):
        r = best[devices]
        if (r.sustainable_rate_per_s or 0.0) > top:
            front.append(r)
            top = r.sustainable_rate_per_s or 0.0
    return front


# -- resume files -------------------------------------------------------------------------


def resume_line(digest: str, result: PointResult) -> str:
    return json.dumps({"schema": RESUME_SCHEMA, "spec_digest": digest, **result.as_dict()}, sort_keys=True)


def read_resume(text: str, source: str, digest: str, keys: set[str]) -> dict[str, PointResult]:
    """Finished points of an earlier run of the same spec; a torn last line (interrupted write) is dropped."""
    done: dict[str, PointResult] = {}
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines):
                break
            raise BadInput(f"{source}:{n}", None, "not a JSON line") from None
        if not isinstance(data, dict) or data.get("schema") != RESUME_SCHEMA:
            raise BadInput(f"{source}:{n}", "schema", f"expected {RESUME_SCHEMA}")
        if data.get("spec_digest") != digest:
            raise BadInput(f"{source}:{n}", "spec_digest",
                           "written by a different sweep spec or workload (use another --resume file)")
        try:
            result = PointResult.from_dict(data)
        except (KeyError, TypeError, ValueError):
            raise BadInput(f"{source}:{n}", None, "not a sweep point record") from None
        if result.key in keys:
            done[result.key] = result
    return done


# -- the whole sweep ----------------------------------------------------------------------


@dataclass(frozen=True)
class Triage:
    """The grid split before anything runs: skipped (with reasons), already done (resumed), to run."""

    bounds: WorkloadBounds
    skipped: tuple[Skip, ...]
    resumed: tuple[PointResult, ...]
    to_run: tuple[SweepPoint, ...]

    def skip_counts(self) -> tuple[tuple[str, int], ...]:
        counts: dict[str, int] = {}
        for s in self.skipped:
            counts[s.reason.value] = counts.get(s.reason.value, 0) + 1
        return tuple(counts.items())


def triage(spec: SweepSpec, done: Mapping[str, PointResult] | None = None) -> Triage:
    """Statically skip what cannot work; take finished points from a resume file."""
    wl = load_context_workload(spec.context.workload, spec.context.sort, spec.context.seed)
    bounds = WorkloadBounds.of(wl)
    skipped, resumed, to_run = [], [], []
    for point in spec.points:
        skip = static_skip(point, bounds, spec.context.constraints)
        if skip is not None:
            skipped.append(skip)
        elif done and point.key in done:
            resumed.append(done[point.key])
        else:
            to_run.append(point)
    return Triage(bounds, tuple(skipped), tuple(resumed), tuple(to_run))


@dataclass(frozen=True)
class SweepAnswer:
    results: tuple[PointResult, ...]  # every evaluated point, in grid order
    ranked: tuple[PointResult, ...]  # feasible points, best first
    front: tuple[PointResult, ...]  # Pareto front: devices vs sustainable rate

    @property
    def best(self) -> PointResult | None:
        return self.ranked[0] if self.ranked else None


def answer(spec: SweepSpec, results: list[PointResult]) -> SweepAnswer:
    order = {p.key: i for i, p in enumerate(spec.points)}
    in_order = sorted(results, key=lambda r: order[r.key])
    return SweepAnswer(tuple(in_order), tuple(rank(in_order, spec.objective, order)),
                       tuple(pareto_front(in_order, order)))
