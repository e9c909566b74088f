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

from csa_plan.planner.text import excerpt
from csa_plan.planner.errors import BadInput, ExitCode
from csa_plan.planner.limits import MAX_WAIT_S
from csa_plan.planner.placement import Placement, Router
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
    max_ttft_s: float | None = None  # --find-capacity with a replayed engine: the TTFT p99 bound (seconds)
    max_tpot_ms: float | None = None  # ... and the TPOT p99 bound (milliseconds)
    verify: bool = False
    trace: TraceOptions = TraceOptions()  # how to read a trace (format, columns, filters)
    engine: str | None = None  # an engine model's name: charge what that engine charges
    engine_settings: Any = None  # EngineSettings
    kv_memory_bytes: int | None = None  # the engine's KV memory per device [default: device memory - reserved]
    enable_prefix_caching: bool | None = None  # runtime-modelled engines: None = the engine's default
    engines: tuple[str, ...] = ()  # several runtime-modelled engines side by side on the same trace
    concurrencies: tuple[int, ...] = ()  # several --max-concurrency: the throughput-interactivity frontier
    disaggregation: Any = None  # serving.disaggregation.Disaggregation: a prefill pool and a decode pool
    host_tier: Any = None  # engines.host_tier.HostTierFlags: a host KV tier beneath the prefix cache


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

    if len(req.concurrencies) > 1:
        return run_frontier(req, progress)
    if len(req.engines) > 1 and req.disaggregation is None:
        return run_side_by_side(req, run_simulate, progress)

    refuse_unused_input_options(req)
    if req.host_tier is not None and req.host_tier.given and req.engine is None:
        raise BadInput("options", "--kv-offloading-size" if req.host_tier.kv_offloading_size_gib is not None
                       else "--enable-hierarchical-cache", "a host KV tier under an engine's replayed prefix cache: "
                       "add --engine vllm-0.33 (--kv-offloading-size) or --engine sglang-0.5.23 "
                       "(--enable-hierarchical-cache)")
    if req.host_tier is not None and req.engine is not None:  # a flag the engine lacks: before anything runs
        req.host_tier.check_for(req.engine, req.enable_prefix_caching)
    wl = load_workload(req.workload, sort=req.sort_rows, options=req.trace)
    settings = merge(req.given, wl.settings, wl.source)
    refuse_unused_run_options(req, wl, settings)
    if settings.model is None:
        raise BadInput("options", "--model", "no model: pass --model or name one in the mix spec")
    if req.disaggregation is not None:  # two engine instances and a link: planner/commands/disaggregated.py
        from csa_plan.planner.commands.disaggregated import run_disaggregated

        doc, code, title = run_disaggregated(req, wl, settings)
        return SimulateOutcome(doc, code, None, title=title)
    max_wait = req.max_wait_s
    if max_wait is not None and (not math.isfinite(max_wait) or max_wait < 0 or max_wait > MAX_WAIT_S):
        from csa_plan.planner.values import shown_against
        raise BadInput("options", "--max-wait", f"must be a non-negative number of seconds at most {MAX_WAIT_S:g} "
                                                f"(MAX_WAIT_S), got {shown_against(max_wait, 0, MAX_WAIT_S)}")
    for field, bound in (("--max-ttft", req.max_ttft_s), ("--max-tpot", req.max_tpot_ms)):
        if bound is not None and (not math.isfinite(bound) or bound <= 0):
            raise BadInput("options", field, f"must be a positive number, got {bound:g}")
    config, _budget = sim_config(settings, wl.source)
    from dataclasses import replace

    from csa_plan.planner.budget.deployment import card_settings

    if req.engine is not None:  # shared compressed state on a release that does not model it: typed, nothing sized
        from csa_plan.planner.commands.shared_routing import shared_state_refusal

        shared_spec = load_model(settings.model, max_seq_len=config.max_seq_len)
        refused = shared_state_refusal(shared_spec, req.engine)
        if refused is not None:
            return _engine_refused(wl, shared_spec, config, None, refused, None, None, None)
    # the mix's memory.device names the card too: its engine rules follow it (one target GPU)
    engine_settings = card_settings(req.engine_settings, settings.device_memory_bytes, req.engine) if req.engine \
        else None
    if engine_settings is not None:  # SGLang: --dp is its DP-attention size, each worker sized for its share
        from csa_plan.planner.budget.deployment import Deployment, engine_settings_for

        engine_settings = engine_settings_for(req.engine, engine_settings, Deployment(dp=config.placement.dp))
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
    latency_bound = "--max-ttft" if req.max_ttft_s is not None else "--max-tpot" if req.max_tpot_ms is not None else None
    if latency_bound and not req.find_capacity:
        raise BadInput("options", latency_bound, "bounds the rate --find-capacity searches: add --find-capacity")
    if req.find_capacity:
        if not config.limit_bytes and not req.kv_memory_bytes:
            raise BadInput("options", "--find-capacity", "needs --device-memory (unlimited memory never refuses)")
        if config.policy is Policy.QUEUE and max_wait is None:
            raise BadInput("options", "--max-wait", "--find-capacity under --policy queue needs --max-wait SECONDS")
    spec = load_model(settings.model, max_seq_len=config.max_seq_len)
    base_plan = plan_model(spec, PlanOptions(max_seq_len=config.max_seq_len, tp=config.placement.tp,
                                             layout=config.layout))
    pipeline_fit = None
    if req.engine is not None and config.placement.pp > 1:  # each stage's pool (serving/pipeline.py)
        if device is None:
            raise BadInput("options", "--pp", f"--engine {req.engine} with {config.placement.pp} pipeline stages "
                                              "sizes each stage's pool from that stage's budget: name "
                                              "--device-memory (or --gpu)")
        if device.fits:
            from csa_plan.planner.commands.check import pipeline_answer

            length = config.max_seq_len or max(d.max_seq_len for d in spec.layers)
            pipeline_fit, checked, pools = pipeline_answer(spec, req.engine, 1, config.engine.settings, length, device)
            if pools is None:  # the engine refuses a stage's memory: its typed document
                return _engine_refused(wl, spec, config, device, checked.refusal, req.engine, engine_settings,
                                       req.kv_memory_bytes)
            config = replace(config, engine=replace(config.engine, pipeline=pools))
    runtime_plan = _runtime_plan(req, spec, config)
    refuse_unused_time_options(req, wl, runtime_plan)
    if runtime_plan is not None:
        refuse_reservation_options(req, runtime_plan)
    elif latency_bound:
        raise BadInput("options", latency_bound, "bounds TTFT/TPOT, which only an engine replayed step by step "
                       "gives (--engine vllm-0.33, --engine sglang-0.5.23)")
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
        with_budget(outcome.report, device, pipeline_fit or _capacity(spec, config, req.engine, engine_settings,
                                                                      device, req.kv_memory_bytes))
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


def refuse_unused_input_options(req: SimulateRequest) -> None:
    """The trace readers' options on a YAML mix (a mix generates its requests, in arrival order): refused."""
    from pathlib import Path

    if req.trace.format or Path(str(req.workload)).suffix.lower() not in (".yaml", ".yml"):
        return
    t = req.trace
    for option, value in (("--columns", t.columns), ("--time-unit", t.time_unit), ("--where", t.where),
                          ("--keep-failures", t.keep_failures), ("--sort", req.sort_rows)):
        if value:
            raise BadInput("options", option, f"applies to a CSV or JSONL trace; {excerpt(str(req.workload))} is a "
                                              "YAML mix (its requests are generated in arrival order): it would "
                                              "change nothing")


def refuse_unused_run_options(req: SimulateRequest, wl: Any, settings: MixSettings) -> None:
    """Options that cannot apply to the run the rest describe: refused, never dropped."""
    if req.max_wait_s is not None and not req.find_capacity:
        raise BadInput("options", "--max-wait", "bounds the queue wait --find-capacity searches under; without "
                                                "--find-capacity it changes nothing")
    mix = wl.settings
    if settings.reserve != "fit" and req.engine is None:
        for given, source, shown in ((req.given.bucket, "options", "--bucket"), (mix.bucket, wl.source, "bucket")):
            if given is not None:
                raise BadInput(source, shown, f"rounds the reservations of --reserve fit; the run reserves "
                                              f"{settings.reserve}, so it would change nothing")
    if (settings.dp or 1) == 1:
        for given, source, shown in ((req.given.router, "options", "--router"), (mix.router, wl.source, "router")):
            if given is not None and given != Router.ROUND_ROBIN.value:  # the default, stated, is no choice
                raise BadInput(source, shown, "routes requests over data-parallel replicas; with dp 1 there is one "
                                              "replica, so it would change nothing")


def refuse_unused_time_options(req: SimulateRequest, wl: Any, runtime_plan: Any) -> None:
    """Options that only an engine's replayed runtime reads are refused where none runs, never dropped:
    ``--max-concurrency`` (a closed-loop client), ``--step-time`` (the engine step's clock) and
    ``--spec-acceptance`` (vLLM's MTP drafts: only where drafts run). Named where they were given: the
    command line, else the mix."""
    mix = wl.settings
    for name, option, field in (("max_concurrency", "--max-concurrency", "max_concurrency"),
                                ("step_time", "--step-time", "time.step_time"),
                                ("spec_acceptance", "--spec-acceptance", "spec_acceptance")):
        given, in_mix = getattr(req.given, name), getattr(mix, name, None)
        if given is None and in_mix is None:
            continue
        source, shown = ("options", option) if given is not None else (wl.source, field)
        if runtime_plan is None:
            if name == "step_time" and (given or in_mix) == "fixed":
                continue  # the ledger's clock is the fixed one: --step-time fixed says what it does
            what = f"--engine {req.engine}'s runtime is not replayed step by step" if req.engine else "no --engine"
            raise BadInput(source, shown, f"applies to an engine whose runtime is replayed step by step "
                                          f"(--engine vllm-0.33, --engine sglang-0.5.23); {what}, so it would "
                                          "change nothing")
        if name == "spec_acceptance":
            resolved = getattr(runtime_plan, "resolved", None)
            vllm = runtime_plan.engine.name.startswith("vllm")
            drafts = (getattr(resolved, "num_speculative_tokens", 0) if vllm else
                      max(0, (getattr(resolved, "draft_tokens", 0) or 0) - 1)) or 0
            if not drafts:
                why = "no --num-speculative-tokens" if vllm else "no --speculative-num-steps"
                raise BadInput(source, shown, f"the acceptance rate of speculative drafts, and no drafts run ({why}): "
                                              "it would change nothing")


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


def capacity_criterion(max_wait_s: float | None, max_ttft_s: float | None, max_tpot_ms: float | None) -> str:
    """What a replayed engine's rate search holds: every request served and each bound given, in words."""
    bounds = [f"queue-wait p99 <= {max_wait_s:g} s" if max_wait_s is not None else None,
              f"TTFT p99 <= {max_ttft_s:g} s" if max_ttft_s is not None else None,
              f"TPOT p99 <= {max_tpot_ms:g} ms" if max_tpot_ms is not None else None]
    return "every request served, " + ", ".join(b for b in bounds if b)


def run_runtime_simulate(req: SimulateRequest, wl, spec, config, progress) -> SimulateOutcome:
    """The outcome without the budget sections (the caller adds them, as for every simulate)."""
    from csa_plan.planner.reports.simulate import runtime_document
    from csa_plan.planner.serving.serve import report, runtime_capacity, runtime_setup, serve

    from csa_plan.planner.serving.serve import host_tier_section, with_host_tier

    setup = runtime_setup(spec, config, req.enable_prefix_caching)  # EngineRefused: the caller's typed document
    setup = with_host_tier(setup, config, req.host_tier)
    plan, sizing = setup.plan, setup.sizing
    capacity = None
    if req.find_capacity:
        if setup.max_concurrency is not None:
            raise BadInput("options", "--find-capacity", f"a closed loop (max_concurrency {setup.max_concurrency:,}) "
                                                         "sends each request when one ends, not at the trace's rate: "
                                                         "the rate scale the search would bisect changes nothing; "
                                                         "drop --max-concurrency (or the mix's max_concurrency) or "
                                                         "--find-capacity")
        if req.max_wait_s is None and req.max_ttft_s is None and req.max_tpot_ms is None:
            raise BadInput("options", "--max-wait", f"--find-capacity with --engine {plan.engine.name} needs "
                                                    "--max-wait SECONDS, --max-ttft SECONDS or --max-tpot MS (the "
                                                    "engine queues; it never refuses for memory)")
        latency = (req.max_ttft_s, None if req.max_tpot_ms is None else req.max_tpot_ms / 1000)
        wait_ns = None if req.max_wait_s is None else int(round(req.max_wait_s * 1e9))
        with progress("finding capacity", None, True) as tick:
            cap = runtime_capacity(setup, wl, wait_ns, start=config.time.rate_scale, latency=latency,
                                   tick=lambda k, s: tick(k, None, f"probe {k}: x{s:.4g}"))
        if cap.too_short is not None:
            raise BadInput("options", "--find-capacity", cap.too_short)
        criterion = capacity_criterion(req.max_wait_s, req.max_ttft_s, req.max_tpot_ms)
        if cap.rate_scale is None:
            field = "--max-wait" if req.max_wait_s is not None else "--max-ttft" if req.max_ttft_s is not None \
                else "--max-tpot"
            raise BadInput("options", field, f"no rate scale keeps {criterion} in steady state")
        base = wl.base_rate_per_s()
        capacity = {"rate_scale": cap.rate_scale, "rate_per_s": cap.rate_scale * base if base else None,
                    "probes": [{"rate_scale": s, "ok": ok} for s, ok in cap.tried], "criterion": criterion,
                    "max_wait_s": req.max_wait_s, "max_ttft_s": req.max_ttft_s, "max_tpot_ms": req.max_tpot_ms,
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
    doc["runtime"]["host_tier"] = host_tier_section(setup, result)
    doc["runtime"]["dp_balancer"] = None if setup.balancer is None else setup.balancer.as_dict()
    doc["runtime"]["pipeline"] = None
    if setup.pipeline is not None:
        from csa_plan.planner.serving.pipeline import pipeline_section

        doc["runtime"]["pipeline"] = pipeline_section(config.engine.pipeline, setup.pipeline, setup.pipeline_link,
                                                      rep.occupancy)
    doc["capacity"] = capacity
    return SimulateOutcome(doc, code, None, title=f"{spec.name} — {wl.source}")


def run_frontier(req: SimulateRequest, progress) -> SimulateOutcome:
    """``--max-concurrency C1,C2,...``: the run ``--max-concurrency C`` gives alone, once per C (the same
    replay, client and clock), condensed to the throughput-interactivity frontier
    (``planner/serving/frontier.py``). An engine that refuses to start refuses every point: its
    document is the answer (exit 3)."""
    from csa_plan.planner.serving.frontier import check_concurrencies, frontier_document, frontier_point

    check_concurrencies(req.concurrencies)
    if len(req.engines) > 1:
        raise BadInput("options", "--max-concurrency", "several concurrencies draw one deployment's frontier: "
                                                       "give one --engine (run each engine on its own)")
    if req.find_capacity:
        raise BadInput("options", "--find-capacity", "a closed loop sends each request when one ends, not at the "
                                                     "trace's rate: the frontier's --max-concurrency list and "
                                                     "--find-capacity do not go together")
    points, first, code = [], None, ExitCode.OK
    for c in req.concurrencies:
        out = run_simulate(replace(req, concurrencies=(), given=replace(req.given, max_concurrency=c)), progress)
        runtime = out.report.get("runtime")
        if runtime is None:  # refused, or the weights do not fit: nothing to draw, the refusal is the answer
            return out
        first = first or out.report
        points.append(frontier_point(c, runtime))
        code = max(code, out.exit_code)
    doc = frontier_document(first, points, code)
    return SimulateOutcome(doc, ExitCode(code), None, title=f"{first['model']['name']} — {first['workload']['source']}")


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
