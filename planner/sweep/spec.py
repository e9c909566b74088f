"""Sweep specs: the YAML grid of deployments, parsed strictly into frozen points.

Every key is checked; a value that does not parse is bad input naming its field.
"""


from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import asdict, dataclass, replace
from enum import Enum
from functools import cached_property
from pathlib import Path
from typing import Any

from csa_plan.planner.errors import BadInput
from csa_plan.planner.suggest import unknown_problem
from csa_plan.planner.text import excerpt
from csa_plan.planner.placement import Router
from csa_plan.planner.refusals import RefusalType
from csa_plan.planner.bisection import SCALE_MAX, SCALE_MIN
from csa_plan.planner.steady import RULE as STEADY_RULE
from csa_plan.planner.reserve.scenario import DEFAULT_BUCKET, Policy, Reserve, TimeModel
from csa_plan.planner.units import NS_PER_S, ceil_div
from csa_plan.planner.files import hash_file, path_kind, read_text
from csa_plan.planner.limits import MAX_SPEC_BYTES
from csa_plan.planner.limits import (MAX_DEVICES, MAX_DP, MAX_PP, MAX_PREFILL_TOK_S, MAX_RATE_SCALE, MAX_TP,
                                     MAX_TPOT_MS, MAX_WAIT_S, MIN_RATE_SCALE, MIN_REL_TOL)
from csa_plan.planner.values import check_keys, shown_against, read_bool, read_int, read_mapping, read_number, read_str


MAX_POINTS = 100_000
BUDGET = "budget"  # the reserved axis's default: the device budget (weights from the inventory)

AXES = ("model", "device", "reserved", "tp", "pp", "dp", "router", "reserve", "policy", "layout",
        "rate_scale", "max_seq_len", "engine", "step_time", "settings", "expert_parallel",
        "replicas", "disaggregation")
TOP_KEYS = {"name", "workload", "sort", "seed", "grid", "time", "search", "objective", "constraints"}


class Objective(str, Enum):
    FEWEST_DEVICES = "fewest_devices"  # then the highest sustainable rate per device
    RATE_PER_DEVICE = "rate_per_device"  # then the fewest devices


class SkipReason(str, Enum):
    """Why a point is ruled out before it is simulated."""

    BAD_DEPLOYMENT = "BadDeployment"  # tp does not divide the heads, more stages than layers, ...
    PLAN_REFUSED = "PlanRefused"  # the descriptor gate refuses a layer under this point
    NO_MEMORY_LEFT = "NoMemoryLeft"  # device memory minus the weights and reserves is zero or less
    NEVER_FITS = RefusalType.NEVER_FITS.value  # even the smallest request's bundle exceeds an empty device
    LARGEST_NEVER_FITS = "LargestRequestNeverFits"  # some request can never fit: zero refusals impossible
    EXCEEDS_MAX_SEQ_LEN = RefusalType.REQUEST_EXCEEDS_CAPACITY.value  # some request is longer than max_seq_len: same


# -- the spec -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Reserved:
    """Per-device memory set aside besides the state pool. ``budget`` (the default) and a plain size
    are the device budget's (planner/budget): the model's weights on each device by its tensor
    inventory or checkpoint, plus the start-up reserves: the engine rules' figure, or the size given
    (``runtime_bytes``), which is what ``reserved`` means in a mix and ``--reserved`` on the command
    line. ``{weights, runtime}`` names the weights too (split over the tp x pp devices of a replica)
    and fixes the sum."""

    label: str
    fixed_bytes: int = 0
    weights_bytes: int = 0
    budget: bool = False
    runtime_bytes: int | None = None  # with ``budget``: the start-up reserves per device (None: the rules')

    def per_device_bytes(self, tp: int, pp: int) -> int:
        return self.fixed_bytes + ceil_div(self.weights_bytes, tp * pp)


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
    engine: str | None = None  # an engine model (planner/engines): charge what it charges, limit = its pool
    step_time: str | None = None  # the grid's step_time axis; None: the spec's time.step_time
    settings: tuple[tuple[str, Any], ...] = ()  # the grid's settings axis: engine options by name (max_num_seqs: 256)
    expert_parallel: bool = False  # the experts split over every GPU of the point (EP = tp x dp), else MoE TP
    replicas: int = 1  # independent servers of this tp x dp shape behind a round-robin router (engine points)
    # a prefill pool and a decode pool (serving.disaggregation.Disaggregation), each role its own workers x tp x dp
    # (ep); the point's own tp/pp/dp/replicas/expert_parallel are then 1/False (each role names its shape); None:
    # aggregated
    disaggregation: Any = None

    @property
    def layout_label(self) -> str:
        """``aggregated`` or the roles (``1P tp8 + 2D tp8``): how the deployment serves a request."""
        return "aggregated" if self.disaggregation is None else self.disaggregation.label

    def role_point(self, role: str) -> "SweepPoint":
        """One role of a disaggregated point as the aggregated point of one worker that role runs (its tp, dp and
        expert parallelism over them): the device budget, pool and clock of that worker are that point's, nothing
        recomputed apart."""
        r = getattr(self.disaggregation, role)
        return replace(self, tp=r.tp, pp=1, dp=r.dp, replicas=1, disaggregation=None,
                       expert_parallel=r.ep is not None and r.ep > 1)

    @property
    def ep(self) -> int | None:
        """Expert-parallel ranks (``Placement.ep``): tp x dp with ``expert_parallel``, else the engine's default."""
        return self.tp * self.dp if self.expert_parallel and self.tp * self.dp > 1 else None

    @property
    def engine_settings(self) -> Any:
        """The point's engine options (``EngineSettings``), None when it gives none (the engine's defaults)."""
        if not self.settings:
            return None
        from csa_plan.planner.engines.settings import EngineSettings

        return EngineSettings(**dict(self.settings))

    @property
    def settings_label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.settings)

    @property
    def devices(self) -> int:
        if self.disaggregation is not None:  # both roles together
            return self.disaggregation.gpus
        return self.tp * self.pp * self.dp * self.replicas

    @property
    def reserved_bytes(self) -> int:
        if self.disaggregation is not None:  # the decode worker's (whose pool holds the client's requests)
            return self.role_point("decode").reserved_bytes
        if self.reserved.budget:
            from csa_plan.planner.budget.deployment import budget_reserved_bytes

            return budget_reserved_bytes(self.model, self.memory_bytes, self.tp, self.pp, self.dp, self.max_seq_len,
                                         self.engine, self.reserved.runtime_bytes, self.engine_settings, self.ep)
        return self.reserved.per_device_bytes(self.tp, self.pp)

    @property
    def limit_bytes(self) -> int:
        """May be zero or negative: such a point is skipped (NoMemoryLeft), never run as 'unlimited'. A
        disaggregated point's is its decode worker's."""
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
            f"rate_scale={self.rate_scale:g}", f"max_seq_len={self.max_seq_len or 'model'}")
            + ((f"engine={self.engine}",) if self.engine else ())
            + ((f"step_time={self.step_time}",) if self.step_time else ())
            + ((f"settings={self.settings_label}",) if self.settings else ())
            + (("expert_parallel=true",) if self.expert_parallel else ())
            + ((f"replicas={self.replicas}",) if self.replicas > 1 else ())
            + ((f"disaggregation={self.layout_label}",) if self.disaggregation is not None else ()))

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "device": self.device, "memory_bytes": self.memory_bytes,
                "reserved": self.reserved.label, "reserved_bytes": self.reserved_bytes,
                "limit_bytes": self.limit_bytes, "tp": self.tp, "pp": self.pp, "dp": self.dp,
                "devices": self.devices, "router": self.router.value, "reserve": self.reserve_label,
                "policy": self.policy.value, "layout": self.layout, "rate_scale": self.rate_scale,
                "max_seq_len": self.max_seq_len, "engine": self.engine, "step_time": self.step_time,
                "settings": dict(self.settings) or None, "expert_parallel": self.expert_parallel, "ep": self.ep,
                "replicas": self.replicas,
                "disaggregation": None if self.disaggregation is None else self.layout_label}


@dataclass(frozen=True)
class Constraints:
    zero_refusals: bool = True
    wait_p99_max_s: float | None = None
    min_mean_utilization: float = 0.0
    ttft_p99_max_s: float | None = None  # engine points: time to first token p99 at most this
    tpot_p99_max_ms: float | None = None  # engine points: time per output token p99 at most this

    @property
    def wait_p99_max_ns(self) -> int | None:
        return None if self.wait_p99_max_s is None else int(round(self.wait_p99_max_s * NS_PER_S))

    @property
    def latency_bounds(self) -> tuple[float | None, float | None]:
        """(TTFT p99 s, TPOT p99 s) bounds: what ``serve.sustains`` reads beside the wait."""
        return self.ttft_p99_max_s, None if self.tpot_p99_max_ms is None else self.tpot_p99_max_ms / 1000


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
    prefill_tok_s: float = TimeModel.prefill_tok_s
    tpot_ms: float = TimeModel.tpot_ms
    step_time: str = "physics"  # an engine point's step-time source (steptime.StepSource)
    search: Search = Search()
    constraints: Constraints = Constraints()
    rate_rule: str = STEADY_RULE  # what "sustainable" means (planner/steady.py): part of the resume digest


@dataclass(frozen=True)
class SweepSpec:
    source: str
    name: str
    context: Context
    points: tuple[SweepPoint, ...]
    objective: Objective = Objective.FEWEST_DEVICES
    source_sha256: str = ""  # the spec file's bytes ("" when parsed from data, not a file)

    @cached_property
    def workload_sha256(self) -> str:
        """SHA-256 of the workload file's bytes (streamed, size-capped), computed once."""
        from csa_plan.planner.workloads.workload import MAX_TRACE_BYTES

        return hash_file(self.context.workload, MAX_TRACE_BYTES, "MAX_TRACE_BYTES").hexdigest()

    @property
    def digest(self) -> str:
        """What a resumed point must have been computed under: the workload's bytes and every
        setting of the context (sort, seed, time model, search, constraints)."""
        ctx = asdict(self.context)
        ctx.pop("workload")
        h = hashlib.sha256(self.workload_sha256.encode())
        h.update(json.dumps(ctx, sort_keys=True, default=str).encode())
        return h.hexdigest()[:16]

    @property
    def grid_sha256(self) -> str:
        """The grid's points (after any command-line override), in order."""
        return hashlib.sha256("\n".join(p.key for p in self.points).encode()).hexdigest()


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]








def _enum(enum: type[Enum], value: Any, source: str, where: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        raise BadInput(source, where, unknown_problem("value", value, [str(m.value) for m in enum])) from None


def _same_key(axis: str, value: Any) -> str:
    """What makes two grid values one point: a GPU name in any case is that GPU (h200, H200)."""
    if axis == "device":
        name, memory = value
        from csa_plan.planner.cards import find_card

        card = find_card(name)
        return repr((card.name if card is not None else None, int(memory)))
    return repr(value)


def _size(value: Any, source: str, where: str) -> int:
    from csa_plan.planner.memory import parse_size

    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise BadInput(source, where, f"expected a size (bytes, GB, GiB or a GPU name), got {value!r}")
    return parse_size(str(value), source, where)


def _reserved(value: Any, source: str, where: str) -> Reserved:
    if value == BUDGET:
        return Reserved(BUDGET, budget=True)
    if isinstance(value, dict):
        check_keys(source, where, value, {"weights", "runtime"})
        fixed = _size(value.get("runtime", 0), source, f"{where}.runtime")
        weights = _size(value.get("weights", 0), source, f"{where}.weights")
        return Reserved(f"weights {value.get('weights', 0)}/(tp*pp) + {value.get('runtime', 0)}", fixed, weights)
    return Reserved(str(value), budget=True, runtime_bytes=_size(value, source, where))  # as --reserved means


def _reserve(value: Any, source: str, where: str) -> tuple[Reserve, int]:
    """``max``, ``fit`` (bucket 4096), ``fit/16384`` or ``{fit: 16384}``."""

    if isinstance(value, dict):
        check_keys(source, where, value, {"fit"})
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
    from csa_plan.planner.loaders.model_files import PRESETS

    ref = read_str(source, where, value)
    if ref in PRESETS:
        return ref
    path = Path(ref)
    if not path.is_absolute():
        path = base / path
    if path_kind(path) is None:
        raise BadInput(source, where, f"no such model file or preset {ref[:80]!r} (presets: {', '.join(PRESETS)})")
    return str(path.resolve())


def parse_spec(data: Any, source: str) -> SweepSpec:
    """Validate every key (unknown ones are bad input) and expand the grid in axis order."""
    from csa_plan.planner.profiles import get_profile

    spec = read_mapping(source, "", data)
    check_keys(source, "", spec, TOP_KEYS)
    base = Path(source).resolve().parent
    if "workload" not in spec:
        raise BadInput(source, "workload", "missing (a mix spec, a CSV trace or JSONL requests, relative to this file)")
    wl_path = base / read_str(source, "workload", spec["workload"])
    kind = path_kind(wl_path)
    if kind != "file":
        what = "no such file" if kind is None else _what_is(wl_path)  # a directory, /dev/null: said as it is
        raise BadInput(source, "workload", f"{what}: {str(wl_path)[:200]}")
    name = read_str(source, "name", spec.get("name", Path(source).stem))
    sort = read_bool(source, "sort", spec.get("sort", False))
    seed = read_int(source, "seed", spec["seed"]) if "seed" in spec else None

    time = read_mapping(source, "time", spec.get("time", {}))
    check_keys(source, "time", time, {"prefill_tok_s", "tpot_ms", "step_time"})
    fixed = "prefill_tok_s" in time or "tpot_ms" in time
    step_time = read_str(source, "time.step_time", time.get("step_time", "fixed" if fixed else "physics"))
    if step_time not in ("physics", "measured", "fixed"):
        raise BadInput(source, "time.step_time", f"must be physics, measured or fixed, got {step_time[:40]!r}")
    if fixed and step_time != "fixed":
        raise BadInput(source, "time.step_time", f"prefill_tok_s and tpot_ms are the constants of fixed, not of "
                                                 f"{step_time}")
    prefill = read_number(source, "time.prefill_tok_s", time.get("prefill_tok_s", TimeModel.prefill_tok_s),
                          positive=True, at_most=MAX_PREFILL_TOK_S)
    tpot = read_number(source, "time.tpot_ms", time.get("tpot_ms", TimeModel.tpot_ms), at_most=MAX_TPOT_MS)

    search_raw = read_mapping(source, "search", spec.get("search", {}))
    check_keys(source, "search", search_raw, {"rel_tol", "min_scale", "max_scale"})
    rel_tol = read_number(source, "search.rel_tol", search_raw.get("rel_tol", Search.rel_tol), positive=True,
                          at_least=MIN_REL_TOL, at_most=1.0)
    min_scale = read_number(source, "search.min_scale", search_raw.get("min_scale", Search.min_scale), positive=True,
                            at_least=MIN_RATE_SCALE, at_most=MAX_RATE_SCALE)
    max_scale = read_number(source, "search.max_scale", search_raw.get("max_scale", Search.max_scale), positive=True,
                            at_least=MIN_RATE_SCALE, at_most=MAX_RATE_SCALE)
    if min_scale >= max_scale:
        raise BadInput(source, "search.max_scale", f"must be above min_scale ({min_scale:g}), got {shown_against(max_scale, min_scale)}")

    cons_raw = read_mapping(source, "constraints", spec.get("constraints", {}))
    check_keys(source, "constraints", cons_raw, {"zero_refusals", "wait_p99_max_s", "min_mean_utilization",
                                                 "ttft_p99_max_s", "tpot_p99_max_ms"})
    wait = cons_raw.get("wait_p99_max_s")
    latency = {k: None if cons_raw.get(k) is None else read_number(source, f"constraints.{k}", cons_raw[k],
                                                                  positive=True, at_most=MAX_WAIT_S * 1000)
               for k in ("ttft_p99_max_s", "tpot_p99_max_ms")}
    constraints = Constraints(
        zero_refusals=read_bool(source, "constraints.zero_refusals", cons_raw.get("zero_refusals", True)),
        wait_p99_max_s=None if wait is None else read_number(source, "constraints.wait_p99_max_s", wait,
                                                             at_most=MAX_WAIT_S),
        min_mean_utilization=read_number(source, "constraints.min_mean_utilization",
                                     cons_raw.get("min_mean_utilization", 0.0), at_most=1.0), **latency)
    objective = _enum(Objective, spec.get("objective", Objective.FEWEST_DEVICES.value), source, "objective")

    grid = read_mapping(source, "grid", spec.get("grid", {}))
    check_keys(source, "grid", grid, set(AXES))
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
                cap = {"tp": MAX_TP, "pp": MAX_PP, "dp": MAX_DP}[axis]
                if n > cap:
                    raise BadInput(source, where, f"{n:,} is more than {cap:,} (MAX_{axis.upper()})")
                values.append(n)
            elif axis == "router":
                values.append(_enum(Router, v, source, where))
            elif axis == "reserve":
                values.append(_reserve(v, source, where))
            elif axis == "policy":
                values.append(_enum(Policy, v, source, where))
            elif axis == "layout":
                layout = read_str(source, where, v)
                get_profile(layout, source, where)  # unknown or retired (vllm, sglang): bad input naming the fix
                values.append(layout)
            elif axis == "engine":
                if v is None:
                    values.append(None)
                else:
                    from csa_plan.planner.engines.registry import get_engine

                    values.append(get_engine(read_str(source, where, v), source, where).name)
            elif axis == "step_time":
                if v is not None and v not in ("physics", "measured", "fixed"):
                    raise BadInput(source, where, f"must be physics, measured or fixed, got {str(v)[:40]!r}")
                values.append(v)
            elif axis == "settings":
                values.append(_settings(v, source, where))
            elif axis == "expert_parallel":
                values.append(read_bool(source, where, v))
            elif axis == "disaggregation":
                values.append(_disaggregation(v, source, where))
            elif axis == "replicas":
                n = read_int(source, where, v)
                if not 1 <= n <= MAX_DP:
                    raise BadInput(source, where, f"{n:,} is outside its range 1..{MAX_DP:,} (MAX_DP)")
                values.append(n)
            elif axis == "rate_scale":
                values.append(read_number(source, where, v, positive=True, at_least=MIN_RATE_SCALE,
                                          at_most=MAX_RATE_SCALE))
            else:
                values.append(None if v is None else read_int(source, where, v))
        keys = [_same_key(axis, v) for v in values]
        if len(set(keys)) != len(keys):
            first = next(i for i, k in enumerate(keys) if keys.index(k) != i)
            shown = raw[first] if isinstance(grid.get(axis), list) else values[first]
            raise BadInput(source, f"grid.{axis}", f"lists {excerpt(str(shown))} twice (as "
                           f"{excerpt(str(raw[keys.index(keys[first])]))} too): each point would run twice")
        axes[axis] = values
    if Policy.QUEUE in axes["policy"] and constraints.wait_p99_max_s is None:
        raise BadInput(source, "constraints.wait_p99_max_s",
                       "required when the grid has policy queue (a queue never refuses; waits are the limit)")
    if constraints.wait_p99_max_s is not None and Policy.QUEUE not in axes["policy"] \
            and all(e is None for e in axes["engine"]):
        raise BadInput(source, "constraints.wait_p99_max_s",
                       "bounds a queue wait, but under policy refuse nothing waits (a request is refused): drop "
                       "it, or add policy queue or an engine (the engines queue) to the grid")
    if all(e is None for e in axes["engine"]):  # the ledger path reads none of these: refused, never dropped
        no_engine = "the grid has no engine point (only an engine's replay has a TTFT, a TPOT and a step clock): "
        for key in ("ttft_p99_max_s", "tpot_p99_max_ms"):
            if cons_raw.get(key) is not None:
                raise BadInput(source, f"constraints.{key}", no_engine + "drop it or add an engine to the grid")
        if "step_time" in grid and any(v not in (None, "fixed") for v in axes["step_time"]):
            raise BadInput(source, "grid.step_time", no_engine + "drop it or add an engine to the grid")
        if "step_time" in time and step_time != "fixed":
            raise BadInput(source, "time.step_time", no_engine + "drop it or add an engine to the grid")
    count = math.prod(len(v) for v in axes.values())
    if count > MAX_POINTS:
        raise BadInput(source, "grid", f"expands to {count:,} points (at most {MAX_POINTS:,})")
    most = max(axes["tp"]) * max(axes["pp"]) * max(axes["dp"]) * max(axes["replicas"])
    if most > MAX_DEVICES:
        raise BadInput(source, "grid.dp", f"a point would use {most:,} devices (tp x pp x dp), more than "
                                          f"{MAX_DEVICES:,} (MAX_DEVICES)")
    if any(d is not None and d.gpus > MAX_DEVICES for d in axes["disaggregation"]):
        raise BadInput(source, "grid.disaggregation", f"a layout would use more than {MAX_DEVICES:,} devices "
                                                      "(MAX_DEVICES)")
    points, seen = [], set()
    for combo in itertools.product(*(axes[a] for a in AXES)):
        v = dict(zip(AXES, combo))
        (device, memory), (reserve, bucket) = v["device"], v["reserve"]
        if v["disaggregation"] is not None:  # each role names its shape: one point per layout, not per tp x dp
            if v["expert_parallel"]:  # the grid's EP over every GPU of the point: over every GPU of each worker
                v["disaggregation"] = _with_expert_parallel(v["disaggregation"])
            v.update(tp=1, pp=1, dp=1, replicas=1, expert_parallel=False)
            same = repr(sorted((k, repr(x)) for k, x in v.items()))
            if same in seen:
                continue
            seen.add(same)
        points.append(SweepPoint(
            model=v["model"], device=device, memory_bytes=memory, reserved=v["reserved"], tp=v["tp"], pp=v["pp"],
            dp=v["dp"], router=v["router"], reserve=reserve, bucket=bucket, policy=v["policy"],
            layout=v["layout"], rate_scale=v["rate_scale"], max_seq_len=v["max_seq_len"], engine=v["engine"],
            step_time=v["step_time"], settings=v["settings"], expert_parallel=v["expert_parallel"],
            replicas=v["replicas"], disaggregation=v["disaggregation"]))
    context = Context(workload=str(wl_path.resolve()), sort=sort, seed=seed, prefill_tok_s=prefill, tpot_ms=tpot,
                      step_time=step_time, search=Search(rel_tol, min_scale, max_scale), constraints=constraints)
    return SweepSpec(source, name, context, tuple(points), objective)


_AXIS_DEFAULTS: dict[str, Any] = {
    "model": [], "device": [], "reserved": [BUDGET], "tp": [1], "pp": [1], "dp": [1], "router": ["round-robin"],
    "reserve": ["max"], "policy": ["refuse"], "layout": ["exact"], "rate_scale": [1.0], "max_seq_len": [None],
    "engine": [None], "step_time": [None], "settings": [None], "expert_parallel": [False],
    "replicas": [1], "disaggregation": [None],
}


DISAGGREGATION_KEYS = {"prefill_workers", "prefill_tp", "prefill_dp", "prefill_ep", "decode_workers", "decode_tp",
                       "decode_dp", "decode_ep", "transfer_link"}


def _with_expert_parallel(d: Any) -> Any:
    """The layout with expert parallelism over every GPU of each role's worker (ep = tp x dp, where above 1)."""
    from dataclasses import replace

    def on(r: Any) -> Any:
        return replace(r, ep=r.tp * r.dp) if r.tp * r.dp > 1 else r

    return replace(d, prefill=on(d.prefill), decode=on(d.decode))


def _disaggregation(value: Any, source: str, where: str) -> Any:
    """One value of the ``disaggregation`` axis: null (aggregated) or the roles, as ``simulate``'s
    ``--prefill-workers/--prefill-tp/--decode-workers/--decode-tp/--transfer-link`` read them
    (``serving.disaggregation.disaggregation_from``: a role without the other is bad input)."""
    from csa_plan.planner.cards import LINKS
    from csa_plan.planner.serving.disaggregation import disaggregation_from

    if value is None:
        return None
    m = read_mapping(source, where, value)
    check_keys(source, where, m, DISAGGREGATION_KEYS)
    counts = {}
    for key in ("prefill_workers", "prefill_tp", "prefill_dp", "prefill_ep", "decode_workers", "decode_tp",
                "decode_dp", "decode_ep"):
        n = None if m.get(key) is None else read_int(source, f"{where}.{key}", m[key])
        if n is not None and n > MAX_DEVICES:
            raise BadInput(source, f"{where}.{key}", f"{n:,} is more than {MAX_DEVICES:,} (MAX_DEVICES)")
        counts[key] = n
    link = None if m.get("transfer_link") is None else read_str(source, f"{where}.transfer_link", m["transfer_link"])
    if link is not None and link.strip().lower() not in LINKS:
        raise BadInput(source, f"{where}.transfer_link", f"unknown link {link[:40]!r} (known: {', '.join(LINKS)})")
    try:
        d = disaggregation_from(counts["prefill_workers"], counts["prefill_tp"], counts["decode_workers"],
                                counts["decode_tp"], None if link is None else link.strip().lower(), source,
                                prefill_dp=counts["prefill_dp"], decode_dp=counts["decode_dp"],
                                prefill_ep=counts["prefill_ep"], decode_ep=counts["decode_ep"])
    except BadInput as exc:  # the options' words (--decode-tp) as the spec's keys (decode_tp)
        import re

        def key(text: str) -> str:
            return re.sub(r"--([a-z-]+)", lambda m: m.group(1).replace("-", "_"), text)

        raise BadInput(source, where, f"{key(exc.field or '')}: {key(exc.problem)}") from None
    if d is None:
        raise BadInput(source, where, "names no role: give prefill_workers/prefill_tp and decode_workers/decode_tp, "
                                      "or null for an aggregated deployment")
    for role in ("prefill", "decode"):  # a grid point's EP is over every GPU of its shape (SweepPoint.ep)
        r = getattr(d, role)
        if r.ep is not None and r.ep != 1 and r.ep != r.tp * r.dp:
            raise BadInput(source, f"{where}.{role}_ep", f"{r.ep}: a sweep point's expert parallelism spans every GPU "
                                                         f"of the worker, tp x dp = {r.tp * r.dp} (or give 1, none)")
    return d


def _settings(value: Any, source: str, where: str) -> tuple[tuple[str, Any], ...]:
    """One value of the ``settings`` axis: null (the engine's defaults) or a mapping of engine options by
    their names (``max_num_seqs: 256``, ``num_speculative_tokens: 1``), checked as the command line's."""
    from csa_plan.planner.engines.settings import DERIVED, EngineSettings

    if value is None:
        return ()
    mapping = read_mapping(source, where, value)
    names = [f for f in EngineSettings.__dataclass_fields__ if f not in DERIVED]
    check_keys(source, where, mapping, set(names))
    try:
        EngineSettings(**mapping)  # the ranges and names, as --max-num-seqs etc. are checked
    except BadInput as exc:
        raise BadInput(source, where, f"{exc.field}: {exc.problem}") from None
    except TypeError as exc:
        raise BadInput(source, where, str(exc)) from None
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in mapping.items()))


def load_spec(path: str) -> SweepSpec:
    from csa_plan.planner.loaders.safe_yaml import load_yaml

    p = Path(path)
    if path_kind(p) is None:
        raise BadInput(path, None, "no such sweep spec")
    text = read_text(p, MAX_SPEC_BYTES, "MAX_SPEC_BYTES")
    spec = parse_spec(load_yaml(text, path), path)
    return replace(spec, source_sha256=hashlib.sha256(text.encode("utf-8")).hexdigest())




def _what_is(path: Path) -> str:
    """What a workload path that exists but is no regular file is (a directory, a character device ...)."""
    import os

    from csa_plan.planner.files import describe_mode

    try:
        return f"{describe_mode(os.stat(path).st_mode)}, not a workload file"
    except OSError:
        return "not a regular file"
