"""``plan`` as a use case: the procurement question in one command, on the sweep's machinery.

``csa-plan plan MODEL --rate 20 --isl 8192 --osl 1024 --ttft-p99 2s --tpot-p99 50ms`` asks: on which
card, and in which shape, does the fewest GPUs serve this traffic within these bounds? The
traffic is a Poisson stream at ``--rate`` of fixed-length requests (a mix drawn from its seed);
the grid is every card x engine x tp x dp (dp 1, 2, 4 ... up to ``--max-dp``), expanded and
skipped exactly as a sweep spec would be (``sweep/spec.py``, ``sweep/evaluate.py`` ``triage``);
each point is judged at the target rate alone, by the one steady-state rule (``planner/steady.py``
through ``evaluate``: its rate search bounded to the target, one probe). A card's points are run
in order of their GPU count, and the first count with a feasible point ends that card's search:
more GPUs can only cost more. Before a shape is replayed its busy-time bound (``sweep/bounds.py``: the
step clock's work the rate needs at the least) is checked; a shape it proves cannot serve the rate is
not replayed and says so. A replay stops as soon as a bound is decided, and a shape of the found count
stops once its TPOT p99 is decided above the found shape's (``sweep/evaluate.py`` ``early_exit``,
``replay/early_exit.py``): it could not be preferred. The answer per card is the fewest GPUs, the shape
and its launch command; the shapes run before it say why they lose.

With ``--disaggregated`` the grid also holds prefill/decode layouts (``sweep``'s ``disaggregation`` axis: every
prefill tp x decode tp from ``--tp``, each role 1, 2, 3 ... up to ``--max-dp`` workers, or one worker of dp 2, 4 ...
up to ``--max-dp``, expert-parallel over it where ``expert_parallel`` is searched; the aggregated dp then
takes every count up to ``--max-dp`` too, so a layout's GPU count has its aggregated peers), counted by both roles'
GPUs together and judged by the same steady rule at the same rate and bounds; the answer then carries each
role's launch command.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Callable

from csa_plan.planner.errors import BadInput, ExitCode

Tick = Callable[[int, "int | None", "str | None"], None]
DEFAULT_DEVICES = ("h200", "b200")
DEFAULT_TPS = (1, 2, 4, 8)
WINDOW_S = 300  # the drawn trace spans about this long (the steady rule repeats it when a window needs more)
MIN_REQUESTS = 1000
MAX_PLAN_REQUESTS = 50_000


def parse_duration_s(text: str, option: str, unit: str = "s") -> float:
    """``2s``, ``2000ms``, ``1.5`` (in ``unit``) as seconds: a positive, finite duration."""
    t = text.strip().lower()
    scale = {"s": 1.0, "ms": 1e-3}[unit]
    for suffix, factor in (("ms", 1e-3), ("us", 1e-6), ("s", 1.0)):
        if t.endswith(suffix):
            t, scale = t[: -len(suffix)], factor
            break
    try:
        value = float(t) * scale
    except ValueError:
        raise BadInput("options", option, f"expected a duration (2s, 50ms), got {text[:40]!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise BadInput("options", option, f"must be a positive duration, got {text[:40]!r}")
    return value


@dataclass(frozen=True)
class PlanRequest:
    model: str
    rate_per_s: float
    isl: int
    osl: int
    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None
    wait_p99_s: float | None = None
    devices: tuple[str, ...] = DEFAULT_DEVICES
    engines: tuple[str, ...] = ("vllm-0.33",)
    tps: tuple[int, ...] = DEFAULT_TPS
    max_dp: int = 8
    max_seq_len: int | None = None
    requests: int | None = None
    step_time: str = "physics"
    seed: int = 1
    settings: tuple[tuple[str, Any], ...] = ()  # engine options every shape runs with (--setting NAME=VALUE)
    search: tuple[tuple[str, tuple[Any, ...]], ...] = ()  # engine options searched (--search NAME=V1,V2,...)
    disaggregated: bool = False  # --disaggregated: prefill/decode layouts (xPyD) searched beside the aggregated shapes


# What a searched engine option changes in the replay (issue 45 item 3: no silent no-op axis). The step
# clock (planner/steptime/physics.py) reads the batch a step holds and the deployment's shard groups, never
# a dtype or a kernel choice: an option it does not read still changes the start-up memory (the pool, so
# the concurrency the replay admits), and says so. An option neither reads is refused, not searched.
SCHEDULER = "the scheduler's batch (what each step holds, so the step clock) and the start-up memory"
MEMORY_ONLY = ("the start-up memory only (the KV pool, so how many requests the replay holds at once); "
               "the step clock does not distinguish it")
AXIS_EFFECT: dict[str, str] = {
    "max_num_seqs": SCHEDULER, "max_running_requests": SCHEDULER,
    "max_num_batched_tokens": SCHEDULER, "chunked_prefill_size": SCHEDULER,
    "num_speculative_tokens": SCHEDULER + "; drafts timed as decoded tokens, each accepted at the replay's "
                              "acceptance rate (planner/replay/draft_acceptance.py DEFAULT_RATE)",
    "speculative_num_steps": SCHEDULER + "; drafts timed as decoded tokens",
    "gpu_memory_utilization": MEMORY_ONLY, "mem_fraction_static": MEMORY_ONLY,
    "kv_cache_dtype": MEMORY_ONLY, "indexer_kv_dtype": MEMORY_ONLY, "block_size": MEMORY_ONLY,
    "page_size": MEMORY_ONLY, "moe_backend": MEMORY_ONLY, "moe_runner_backend": MEMORY_ONLY,
    "moe_a2a_backend": MEMORY_ONLY, "max_cudagraph_capture_size": MEMORY_ONLY, "cuda_graph_max_bs": MEMORY_ONLY,
    "enforce_eager": MEMORY_ONLY, "disable_cuda_graph": MEMORY_ONLY, "async_scheduling": MEMORY_ONLY,
    "all2all_backend": MEMORY_ONLY, "enable_encoder_swa_bounded_replay": MEMORY_ONLY,
    "load_balance_method": "which data-parallel rank each request is sent to (the replay's dispatch, "
                           "planner/serving/balancer.py); neither the memory nor a step's clock",
}


GRID_AXES = {"replicas": "independent servers of the shape behind a round-robin router: each its own pool and clock "
                          "(the shape's), the trace split round-robin over them; the launch is the shape's command "
                          "that many times",
             "expert_parallel": "the MoE split (the experts over every GPU, MoE TP 1): the engine's shard rules, the "
                                 "weights a GPU holds (so the pool) and the step clock's expert and all-to-all terms"}


def parse_search(text: str) -> tuple[str, tuple[Any, ...]]:
    """``max_num_seqs=64,128,256``: an engine option and the values ``plan`` searches (each as ``--setting``
    reads a value)."""
    name, sep, raw = text.partition("=")
    if not sep or not raw.strip():
        raise BadInput("options", "--search", f"expected NAME=V1,V2,..., got {text[:60]!r}")
    values = tuple(parse_setting(f"{name}={v}")[1] for v in raw.split(","))
    name = parse_setting(f"{name}=0")[0]
    if len(set(map(repr, values))) != len(values):
        raise BadInput("options", "--search", f"{name} lists a value twice")
    return name, values


def search_axes(req: "PlanRequest") -> list[dict[str, Any]]:
    """The searched options with what each changes; bad input for one no planned engine reads, one the
    replay does not distinguish at all, or one also fixed by --setting."""
    from csa_plan.planner.engines.registry import get_engine

    fixed = {k for k, _ in req.settings}
    out = []
    for name, values in req.search:
        if name in fixed:
            raise BadInput("options", "--search", f"{name} is also given by --setting: give it one way")
        if name in GRID_AXES:
            if name == "expert_parallel" and not all(isinstance(v, bool) for v in values):
                raise BadInput("options", "--search", f"{name} takes true and false, got {values}")
            if name == "replicas" and not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                                              for v in values):
                raise BadInput("options", "--search", f"{name} takes whole numbers of servers, got {values}")
            out.append({"name": name, "values": list(values), "engines": list(req.engines), "changes": GRID_AXES[name]})
            continue
        readers = [e for e in req.engines if name in get_engine(e).options]
        if not readers:
            raise BadInput("options", "--search", f"{name}: no engine planned reads it ({', '.join(req.engines)})")
        if name not in AXIS_EFFECT:
            raise BadInput("options", "--search", f"{name}: the replay does not distinguish its values (neither "
                           f"the step clock nor the start-up memory csa-plan models reads it differently): "
                           f"give it with --setting instead")
        out.append({"name": name, "values": list(values), "engines": readers, "changes": AXIS_EFFECT[name]})
    return out


def parse_setting(text: str) -> tuple[str, Any]:
    """``max_num_seqs=256``, ``num_speculative_tokens=1``, ``kv_cache_dtype=fp8``: a name and its value
    (a whole number, a decimal, true/false, else the text); the name may be spelt as the option is."""
    name, sep, raw = text.partition("=")
    if not sep or not name.strip():
        raise BadInput("options", "--setting", f"expected NAME=VALUE, got {text[:60]!r}")
    name = name.strip().lstrip("-").replace("-", "_")
    raw = raw.strip()
    value: Any = raw
    if raw.lower() in ("true", "false"):
        value = raw.lower() == "true"
    else:
        for read in (int, float):
            try:
                value = read(raw)
                break
            except ValueError:
                continue
    return name, value


@dataclass(frozen=True, eq=False)
class PlanOutcome:
    exit_code: ExitCode
    report: dict[str, Any]


def _spec_data(req: PlanRequest, n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    dps, d = [], 1
    while d <= req.max_dp:
        dps.append(d)
        d *= 2
    if req.disaggregated:  # every count up to --max-dp: a layout's GPU count (8 + 2 x 8) has its aggregated peer
        dps = list(range(1, req.max_dp + 1))
    import itertools

    searched = [(n, v) for n, v in req.search if n not in GRID_AXES]
    combos = [dict(req.settings) | dict(zip([n for n, _ in searched], vs))
              for vs in itertools.product(*(v for _, v in searched))]
    ep = next((list(v) for n, v in req.search if n == "expert_parallel"), [False])
    replicas = next((list(v) for n, v in req.search if n == "replicas"), [1])
    mix = {"name": "plan", "seed": req.seed, "requests": n,
           "classes": [{"name": f"{req.isl}in-{req.osl}out", "rate": req.rate_per_s,
                        "prompt": {"dist": "fixed", "value": req.isl},
                        "output": {"dist": "fixed", "value": req.osl}}]}
    cons: dict[str, Any] = {"zero_refusals": True}
    if req.wait_p99_s is not None:
        cons["wait_p99_max_s"] = req.wait_p99_s
    if req.ttft_p99_s is not None:
        cons["ttft_p99_max_s"] = req.ttft_p99_s
    if req.tpot_p99_s is not None:
        cons["tpot_p99_max_ms"] = req.tpot_p99_s * 1000
    length = req.max_seq_len or req.isl + req.osl
    layouts: list[Any] = [None]
    if req.disaggregated:  # every prefill tp x decode tp, each role 1, 2, 3 ... up to --max-dp workers of dp 1, or
        # one worker of dp 2, 4 ... up to --max-dp (DP attention / DP engine cores; EP over it where the grid's
        # expert_parallel is searched): the same GPU counts, bounded by --max-dp as the aggregated dp is
        shapes = [(w, 1) for w in dps] + [(1, d) for d in range(2, req.max_dp + 1) if d & (d - 1) == 0]
        layouts += [{"prefill_workers": pw, "prefill_tp": pt, "prefill_dp": pd, "decode_workers": dw,
                     "decode_tp": dt, "decode_dp": dd}
                    for pt in req.tps for dt in req.tps for pw, pd in shapes for dw, dd in shapes]
    spec = {"name": "plan", "workload": "plan-mix.yaml",
            "grid": {"model": req.model, "device": list(req.devices), "tp": list(req.tps), "dp": dps,
                     "max_seq_len": length, "engine": list(req.engines),
                     "settings": [c or None for c in combos], "expert_parallel": ep, "replicas": replicas,
                     "disaggregation": layouts},
            "objective": "fewest_devices", "constraints": cons, "time": {"step_time": req.step_time},
            "search": {"min_scale": 1.0, "max_scale": 1.000001}}  # the target rate alone: one steady probe
    return mix, spec


def bounded_out(p: Any, bound: Any) -> Any:
    """The result of a shape the busy-time bound (``sweep/bounds.py``) proves cannot serve the rate: infeasible,
    with the bound's figures as its reason; nothing replayed, so no replay figures."""
    from csa_plan.planner.sweep.results import PointResult

    return PointResult(key=p.key, devices=p.devices, requests=0, admitted=0, refused=0, refusals=(), wait_p99_ns=None,
                       peak_bytes=None, mean_utilization=0.0, peak_utilization=0.0, sustainable_rate_scale=None,
                       at_least=False, probes=0, sustainable_rate_per_s=None, rate_per_device_per_s=None,
                       feasible=False, violations=(bound.line(),), steady="")


def run_plan(req: PlanRequest, progress: Callable[[str, int], Any]) -> PlanOutcome:
    import json

    from csa_plan.planner.reports.plan import plan_report
    from csa_plan.planner.sweep.evaluate import Task, evaluate, point_bound, triage
    from csa_plan.planner.sweep.spec import parse_spec

    if not (math.isfinite(req.rate_per_s) and req.rate_per_s > 0):
        raise BadInput("options", "--rate", f"must be a positive request rate, got {req.rate_per_s!r}")
    if req.ttft_p99_s is None and req.tpot_p99_s is None and req.wait_p99_s is None:
        raise BadInput("options", "--tpot-p99", "give at least one bound: --ttft-p99, --tpot-p99 or --max-wait")
    axes = search_axes(req)
    n = req.requests or min(MAX_PLAN_REQUESTS, max(MIN_REQUESTS, math.ceil(req.rate_per_s * WINDOW_S)))
    mix, data = _spec_data(req, n)
    with tempfile.TemporaryDirectory(prefix="csa-plan-") as tmp:
        with open(os.path.join(tmp, "plan-mix.yaml"), "w", encoding="utf-8") as f:
            json.dump(mix, f)  # JSON is YAML
        spec = parse_spec(data, os.path.join(tmp, "plan.yaml"))
        plan = triage(spec)
        order = {p.key: i for i, p in enumerate(spec.points)}
        groups: dict[tuple[str, str | None], list] = {}
        for p in plan.to_run:
            groups.setdefault((p.device, p.engine), []).append(p)
        results = []
        total = len(plan.to_run)
        bounded = 0
        with progress("planning", total) as tick:
            done = 0
            for (device, engine), points in groups.items():
                points.sort(key=lambda p: (p.devices, order[p.key]))
                found = beat = None
                for p in points:
                    if found is not None and p.devices > found:
                        break  # more GPUs than a feasible shape of this card: never the answer
                    # early exit; a shape of the found count is replayed only while it may be preferred to it
                    task = Task(spec.context, p, early_exit=True, beat=beat)
                    bound = point_bound(task)
                    if bound is not None and bound.infeasible:  # proven not to serve the rate: not replayed
                        r = bounded_out(p, bound)
                        bounded += 1
                    else:
                        r = evaluate(task)
                    results.append((p, r))
                    done += 1
                    shape = f"tp {p.tp} dp {p.dp}" if p.disaggregation is None else p.layout_label
                    tick(done, total, f"planning: {device} {engine} {shape}")
                    if r.feasible:
                        found = p.devices
                        beat = (r.runtime.tpot_p99_s or 0.0, r.runtime.ttft_p99_s or 0.0) if r.runtime else None
        report = plan_report(req, spec, plan, results, n)
        report["question"]["search"] = axes  # each searched option and what it changes in the replay
        report["bounded_out"] = bounded  # shapes the busy-time bound proved infeasible, not replayed
    code = ExitCode.OK if report["answer"] is not None else ExitCode.REFUSED
    report["exit_code"] = int(code)
    return PlanOutcome(code, report)
