"""``simulate`` as a use case: option interplay, what runs, and the exit code.

The CLI hands over what the user typed; this module resolves it against the workload's
own settings, refuses a refused plan before any replay, runs the fast path (or the rate
search), optionally verifies it against the ledger replay, and returns the document and
the exit code. Rendering stays in the CLI.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, ContextManager

from csa_plan.planner.errors import BadInput, ExitCode
from csa_plan.planner.limits import MAX_WAIT_S
from csa_plan.planner.placement import Placement
from csa_plan.planner.workloads.workload import MixSettings, TraceOptions

if TYPE_CHECKING:
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.reserve.series import Series

LONG_RUN_REQUESTS = 200_000
"""From this many requests on (or for a rate search) a run is long enough to show progress."""

SERIES_BUCKETS = 60

Tick = Callable[[int, "int | None", "str | None"], None]
ProgressFactory = Callable[[str, "int | None", bool], ContextManager[Tick]]
"""``(label, total, long_run) -> context manager yielding tick(done, total, text)``."""


@dataclass(frozen=True)
class SimulateRequest:
    """What the user asked for; ``given`` holds the options that override the workload's settings."""

    workload: str
    given: MixSettings
    sort_rows: bool = False
    find_capacity: bool = False
    max_wait_s: float | None = None
    verify: bool = False
    trace: TraceOptions = TraceOptions()  # how to read a trace (format, columns, filters)
    engine: str | None = None  # an engine model's name: charge what that engine charges
    engine_settings: Any = None  # EngineSettings
    kv_memory_bytes: int | None = None  # the engine's KV memory per device [default: device memory - reserved]
    enable_prefix_caching: bool | None = None  # runtime-modelled engines: None = the engine's default
    engines: tuple[str, ...] = ()  # several runtime-modelled engines side by side on the same trace


@dataclass(frozen=True, eq=False)
class SimulateOutcome:
    report: dict[str, Any]
    exit_code: ExitCode
    series: "Series | None" = None
    title: str = ""


def _no_progress(label: str, total: int | None, long_run: bool) -> ContextManager[Tick]:
    return nullcontext(lambda *a: None)


def run_simulate(req: SimulateRequest, progress: ProgressFactory = _no_progress) -> SimulateOutcome:
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.plan import PlanOptions, plan_model
    from csa_plan.planner.reports.simulate import simulate_report
    from csa_plan.planner.reserve.capacity import find_capacity as search
    from csa_plan.planner.reserve.fast import simulate as run
    from csa_plan.planner.reserve.replay import replay
    from csa_plan.planner.reserve.scenario import Policy, prepare
    from csa_plan.planner.reserve.settings import merge, sim_config
    from csa_plan.planner.workloads import load_workload

    if len(req.engines) > 1:
        return run_side_by_side(req, run_simulate, progress)

    wl = load_workload(req.workload, sort=req.sort_rows, options=req.trace)
    settings = merge(req.given, wl.settings)
    if settings.model is None:
        raise BadInput("options", "--model", "no model: pass --model or name one in the mix spec")
    max_wait = req.max_wait_s
    if max_wait is not None and (not math.isfinite(max_wait) or max_wait < 0 or max_wait > MAX_WAIT_S):
        raise BadInput("options", "--max-wait", f"must be a non-negative number of seconds at most {MAX_WAIT_S:g} "
                                                f"(MAX_WAIT_S), got {max_wait:g}")
    config, _budget = sim_config(settings, wl.source)
    from dataclasses import replace

    from csa_plan.planner.budget.deployment import card_settings

    # the mix's memory.device names the card too: its engine rules follow it (one target GPU)
    engine_settings = card_settings(req.engine_settings, settings.device_memory_bytes, req.engine) if req.engine \
        else None
    device = device_budget(settings, config, req.engine, engine_settings, req.kv_memory_bytes)
    if device is not None and device.fits:
        config = replace(config, limit_bytes=device.kv_memory_bytes)  # the state pool of the tightest stage
    if req.engine is not None:
        from csa_plan.planner.engines.registry import get_engine
        from csa_plan.planner.engines.settings import EngineSettings
        from csa_plan.planner.reserve.engine_run import EngineRun

        get_engine(req.engine)
        kv_memory = req.kv_memory_bytes if device is None else (device.kv_memory_bytes if device.fits else None)
        config = replace(config, engine=EngineRun(req.engine, engine_settings or EngineSettings(), kv_memory))
    if req.find_capacity:
        if not config.limit_bytes and not req.kv_memory_bytes:
            raise BadInput("options", "--find-capacity", "needs --device-memory (unlimited memory never refuses)")
        if config.policy is Policy.QUEUE and max_wait is None:
            raise BadInput("options", "--max-wait", "--find-capacity under --policy queue needs --max-wait SECONDS")
    spec = load_model(settings.model, max_seq_len=config.max_seq_len)
    base_plan = plan_model(spec, PlanOptions(max_seq_len=config.max_seq_len, tp=config.placement.tp,
                                             layout=config.layout))
    runtime_plan = _runtime_plan(req, spec, config)
    if runtime_plan is not None:
        refuse_reservation_options(req, runtime_plan)
    elif req.enable_prefix_caching is not None:
        raise BadInput("options", "--enable-prefix-caching" if req.enable_prefix_caching else
                       "--no-enable-prefix-caching/--disable-radix-cache", "applies to an engine whose runtime is "
                       "replayed step by step (--engine vllm-0.33, --engine sglang-0.5.23)")
    if base_plan.refusals or (device is not None and not device.fits):
        report = simulate_report(wl, spec, config, None, None, plan_refusals=base_plan.refusals,
                                 exit_code=ExitCode.REFUSED)
        return SimulateOutcome(with_budget(report, device, _capacity(spec, config, req.engine, engine_settings,
                                                                      device, req.kv_memory_bytes)),
                               ExitCode.REFUSED)
    from csa_plan.planner.engines.engine import EngineRefused

    if runtime_plan is not None:
        try:
            outcome = run_runtime_simulate(req, wl, spec, config, progress)
        except EngineRefused as exc:  # the engine refuses the KV memory: the same typed document as below
            return _engine_refused(wl, spec, config, device, exc.refusal, req.engine, engine_settings,
                                   req.kv_memory_bytes)
        with_budget(outcome.report, device, _capacity(spec, config, req.engine, engine_settings, device,
                                                      req.kv_memory_bytes))
        return outcome
    try:
        scn = prepare(spec, wl, config)
    except EngineRefused as exc:  # the engine refuses the configuration: its document, typed, no count
        return _engine_refused(wl, spec, config, device, exc.refusal, req.engine, engine_settings,
                               req.kv_memory_bytes)
    wl = wl.without_tokens()  # the scenario holds what the run needs from them (memory: 10M requests)
    long_run = len(wl) >= LONG_RUN_REQUESTS or req.find_capacity

    capacity = None
    if req.find_capacity:
        max_wait_ns = None if max_wait is None else int(round(max_wait * 1e9))
        with progress("finding capacity", None, long_run) as tick:
            capacity = search(scn, max_wait_ns, progress=lambda k, s: tick(k, None, f"probe {k}: x{s:.4g}"))
        result = capacity.result
        if result is not None:  # the run that was judged: the trace repeated as its steady window needed
            scn = scn.repeated(capacity.copies, capacity.rate_scale)
    else:
        with progress("simulating", len(scn.arrival_ns), long_run) as tick:
            result = run(scn, progress=lambda done, total: tick(done, total, None), series_buckets=SERIES_BUCKETS)
    verified = None
    if req.verify and result is not None:
        reference, ledger = replay(scn)
        verified = reference == result and reference.decisions.same_as(result.decisions) and ledger.at_baseline
    series = None
    if result is not None:
        from csa_plan.planner.reserve.series import residency_series

        series = residency_series(scn, result.decisions, buckets=SERIES_BUCKETS)
    code = ExitCode.REFUSED if result is None or result.refused or verified is False else ExitCode.OK
    report = simulate_report(wl, spec, config if result is None else scn.config, scn, result, capacity=capacity,
                             verified=verified, exit_code=code, split=scn.split)
    cap = _capacity(spec, config, req.engine, engine_settings, device, req.kv_memory_bytes)
    return SimulateOutcome(with_budget(report, device, cap), code, series, title=f"{spec.name} — {wl.source}")


def _runtime_plan(req: SimulateRequest, spec: Any, config: Any) -> Any:
    """The engine plan when the engine's runtime is replayed step by step, else None."""
    if req.engine is None:
        return None
    from csa_plan.planner.engines.engine import EngineRefused

    try:
        plan = config.engine.sized(spec, config.placement.pp, 0, config.max_seq_len or
                                   max(d.max_seq_len for d in spec.layers))[0]
    except EngineRefused:
        return None
    return plan if plan.runtime_modelled else None


def device_budget(settings: MixSettings, config: Any, engine: str | None = None, engine_settings: Any = None,
                   kv_memory_bytes: int | None = None) -> Any:
    """The device budget when a device is named (its state pool becomes every device's ledger limit,
    the tightest pipeline stage's); None without a device: everything accounted, nothing refused."""
    from csa_plan.planner.budget.deployment import Deployment, deployment_budget
    from csa_plan.planner.loaders.model_files import load_model

    if settings.device_memory_bytes is None:
        return None
    p = config.placement
    deployment = Deployment(tp=p.tp, pp=p.pp, dp=p.dp, ep=settings.ep, weights_bytes=settings.weights_bytes,
                            reserved_bytes=settings.reserved_bytes or None)
    length = config.max_seq_len
    if length is None:
        length = max(d.max_seq_len for d in load_model(settings.model).layers)
    return deployment_budget(settings.model, settings.device_memory_bytes, deployment, length, engine,
                             engine_settings, kv_memory_bytes,
                             placement=Placement(tp=p.tp, pp=p.pp, dp=p.dp, router=p.router, ep=settings.ep))


def _engine_refused(wl: Any, spec: Any, config: Any, device: Any, refusal: Any, engine: str | None,
                    engine_settings: Any, kv_memory_bytes: int | None) -> SimulateOutcome:
    """The document of a run the engine refuses (exit 3), as check gives it: the refusal typed
    (``engine_refusal``, ``all_refusals``), ``fit`` with no count, nothing replayed."""
    from csa_plan.planner.budget.answer import engine_authority, no_answer
    from csa_plan.planner.reports.check import Refusal
    from csa_plan.planner.reports.simulate import simulate_report

    report = simulate_report(wl, spec, config, None, None, exit_code=ExitCode.REFUSED)
    report["engine_refusal"] = refusal.as_dict()
    report["all_refusals"] = [Refusal("configuration", "EngineRefused", refusal.setting, refusal.message,
                                      refusal.expected, refusal.actual, refusal.rule).as_dict()]
    length = config.max_seq_len or max(d.max_seq_len for d in spec.layers)
    cap = _capacity(spec, config, engine, engine_settings, device, kv_memory_bytes)
    if cap is None or cap.answered:  # no pool to size, or refused only at the run's own tiers: still no count
        cap = no_answer(engine_authority(engine or refusal.engine), length, 1,
                        f"{refusal.engine} refuses this configuration ({refusal.setting}; the refusal says why)",
                        None if cap is None else cap.kv_memory_bytes)
    return SimulateOutcome(with_budget(report, device, cap), ExitCode.REFUSED)


def with_budget(report: dict[str, Any], device: Any, capacity: Any = None) -> dict[str, Any]:
    from csa_plan.planner.budget.document import budget_document

    report["budget"] = None if device is None else budget_document(device)
    report["fit"] = None if capacity is None else capacity.as_dict()  # "capacity" is the rate search
    return report


def _capacity(spec: Any, config: Any, engine: str | None, engine_settings: Any, device: Any,
              kv_memory_bytes: int | None) -> Any:
    """Requests of max_seq_len that fit the state pool: the same answer as check's (budget/answer.py)."""
    from csa_plan.planner.budget.answer import point_answer

    kv = kv_memory_bytes if device is None else (device.kv_memory_bytes if device.fits else None)
    if kv is None:
        return None
    length = config.max_seq_len or max(d.max_seq_len for d in spec.layers)
    return point_answer(spec, engine, engine_settings, length, kv, tp=config.placement.tp, layout=config.layout)


# --- an engine whose runtime is replayed step by step (``EnginePlan.runtime_modelled``) ------------
#
# The engine reserves nothing per request up front, so ``--reserve`` / ``--policy`` do not apply (refused,
# saying why); the start-up pool is the one ``check --engine`` sizes from the device budget (or ``--kv-memory``);
# the trace is replayed through the engine's own scheduler by the one loop (``planner/replay``);
# ``--find-capacity`` searches the largest ``--rate-scale`` sustained in steady state (``planner/steady.py``: a window
# of many request lifetimes, the trace repeated with fresh ids while too short, the queue not growing) with the
# queue-wait p99 under ``--max-wait`` on the window and every request served (``planner/serving/serve.py``: the
# same entry ``sweep``'s engine axis uses).

NOT_RESERVED = ("{engine} reserves nothing per request up front: its scheduler admits and preempts step by step, "
                "and simulate --engine {name} replays exactly that ({option} applies to the reference layout "
                "and to --engine onnx-genai)")


def refuse_reservation_options(req: SimulateRequest, plan) -> None:
    from csa_plan.planner.serving.serve import refuse_unreplayed

    refuse_unreplayed(plan)  # first: no other option matters where the scheduler is not modelled
    for option, value in (("--reserve", req.given.reserve), ("--policy", req.given.policy),
                          ("--bucket", req.given.bucket)):
        if value is not None:
            raise BadInput("options", option, NOT_RESERVED.format(engine=plan.engine.label(), name=plan.engine.name,
                                                                  option=option))
    if req.verify:
        raise BadInput("options", "--verify", f"the ledger replay does not apply to --engine {plan.engine.name}: "
                                              "its runtime is cross-checked against the engine's own scheduler "
                                              "(tools/crosscheck_vllm_runtime.py)")


def run_runtime_simulate(req: SimulateRequest, wl, spec, config, progress) -> SimulateOutcome:
    """The outcome without the budget sections (the caller adds them, as for every simulate)."""
    from csa_plan.planner.reports.simulate import runtime_document
    from csa_plan.planner.serving.serve import report, runtime_capacity, runtime_setup, serve

    setup = runtime_setup(spec, config, req.enable_prefix_caching)  # EngineRefused: the caller's typed document
    plan, sizing = setup.plan, setup.sizing
    capacity = None
    if req.find_capacity:
        if req.max_wait_s is None:
            raise BadInput("options", "--max-wait", f"--find-capacity with --engine {plan.engine.name} needs "
                                                    "--max-wait SECONDS (the engine queues; it never refuses for "
                                                    "memory)")
        with progress("finding capacity", None, True) as tick:
            cap = runtime_capacity(setup, wl, int(round(req.max_wait_s * 1e9)), start=config.time.rate_scale,
                                   tick=lambda k, s: tick(k, None, f"probe {k}: x{s:.4g}"))
        if cap.too_short is not None:
            raise BadInput("options", "--find-capacity", cap.too_short)
        if cap.rate_scale is None:
            raise BadInput("options", "--max-wait", f"no rate scale keeps the queue-wait p99 under "
                                                    f"{req.max_wait_s:g} s with every request served in steady state")
        capacity = {"rate_scale": cap.rate_scale, "probes": cap.probes, "max_wait_s": req.max_wait_s,
                    "at_least": cap.capped, **cap.as_dict()}
        rate = cap.rate_scale
        if cap.copies > 1:  # the answer's replay is the run that was judged: the trace as extended
            from csa_plan.planner.workloads.extend import repeated

            wl = repeated(wl, cap.copies)
    else:
        rate = config.time.rate_scale
    n = len(wl)
    with progress("simulating", n, n >= 200_000) as tick:
        result = serve(setup, wl, rate, progress=lambda done, total: tick(done, total, None))
    rep = report(setup, result, wl)
    code = ExitCode.REFUSED if rep.refused else ExitCode.OK
    doc = runtime_document(wl, spec, replace(config, time=replace(config.time, rate_scale=rate)), plan, sizing, code)
    doc["time"].update(step_time=setup.time.as_dict(), max_concurrency=setup.max_concurrency,
                       step_model=setup.time.label)
    doc["runtime"] = rep.as_dict()
    doc["capacity"] = capacity
    return SimulateOutcome(doc, code, None, title=f"{spec.name} — {wl.source}")


def run_side_by_side(req: SimulateRequest, run_one, progress) -> SimulateOutcome:
    """Several ``--engine`` on the same trace and deployment: each engine's own runtime replay (the one
    path above, ``run_one`` = run_simulate), each given the settings it has (``settings_for``)."""
    from csa_plan.planner.engines.engine import EngineRefused
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.reports.simulate import side_by_side_document

    names = req.engines
    docs, code = [], ExitCode.OK
    for name in names:
        es = settings_for(get_engine(name), req.engine_settings or EngineSettings(), names)
        try:
            out = run_one(replace(req, engine=name, engines=(), engine_settings=es), progress)
        except EngineRefused as exc:  # this engine would not start: said in its column, the others still run
            docs.append({"engine": {"name": name}, "engine_refusal": exc.refusal.as_dict(), "runtime": None})
            code = max(code, ExitCode.REFUSED)
            continue
        if out.report.get("runtime") is None and out.report.get("engine_refusal") is None \
                and out.report.get("engine") is not None:
            raise BadInput("options", "--engine", f"side by side needs engines whose runtime is replayed step by "
                                                  f"step; {name} reserves at admission instead (run it alone)")
        if out.report.get("engine_refusal") is not None:  # refused alone (its own document): no runtime column
            out.report.setdefault("runtime", None)
        docs.append(out.report)
        code = max(code, out.exit_code)
    first = next((d for d in docs if "workload" in d), None)
    if first is None:  # every engine refused to start: the first refusal is the answer
        raise EngineRefused(_refusal(docs[0]))
    title = f"{first['model']['name']} — {first['workload']['source']}"
    return SimulateOutcome(side_by_side_document(first, docs, code), ExitCode(code), None, title=title)


def settings_for(model, settings: "EngineSettings", names: tuple[str, ...]) -> "EngineSettings":
    """The settings this engine has, when several engines share one command line: an option only some of
    them have goes to those (--max-running-requests is SGLang's, --max-num-seqs vLLM's); one none has is
    bad input."""
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import OPTION_SPELLING

    accepted = set(model.options)
    for name in settings.given():
        if not any(name in get_engine(n).options for n in names):
            raise BadInput("options", OPTION_SPELLING[name], f"none of {', '.join(names)} has this setting")
    return replace(settings, **{f: None for f in settings.given() if f not in accepted})


def _refusal(doc):
    from csa_plan.planner.engines.engine import EngineRefusal

    return EngineRefusal(**{k: v for k, v in doc["engine_refusal"].items() if k != "type"})
