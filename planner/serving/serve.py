"""A workload served by an engine whose runtime is replayed step by step: the one entry every command uses.

``simulate --engine``, ``simulate --find-capacity`` and ``sweep``'s engine axis all go through
``runtime_setup`` (the start-up pool ``check --engine`` sizes from the device budget), ``serve``
(the trace at a rate scale, through ``loop.replay`` per data-parallel replica) and
``runtime_capacity`` (the largest rate scale that ``sustains``, by the one rate search,
``simulate.capacity.bisect_rate``), so "the highest rate" and "the cheapest deployment" mean
the same replay everywhere.

The rate criterion (``steady_probe``): the rate is served in steady state (``planner/steady.py``:
a window of many request lifetimes, the trace extended by its stated method while too short, the
queue not growing over it), nothing refused (up front, or stranded) and, on the window's
requests, the queue-wait p99 (``wait_p99_ns``: whole nanoseconds) and the TTFT and TPOT p99
within their bounds where given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from csa_plan.planner.errors import BadInput

if TYPE_CHECKING:
    from csa_plan.planner.engines.engine import EnginePlan, PoolSizing
    from csa_plan.planner.serving.report import RuntimeReport, WindowFigures
    from csa_plan.planner.replay.protocol import RuntimeOptions
    from csa_plan.planner.replay.result import RuntimeResult
    from csa_plan.planner.steady import Judgement
    from csa_plan.planner.steptime.model import StepTime
    from csa_plan.planner.workloads import Workload

Tick = Callable[[int, int], None]


@dataclass(frozen=True)
class RuntimeSetup:
    """What a replay needs besides the trace: the engine's plan and start-up pool, the time model,
    the runtime options and the data-parallel replicas (round-robin)."""

    plan: "EnginePlan"
    sizing: "PoolSizing"
    time: "StepTime"
    options: "RuntimeOptions"
    dp: int = 1
    max_concurrency: int | None = None  # one closed-loop client for the deployment (vllm bench serve's flag)
    plan_devices: int = 1  # GPUs of one replica (tp x pp)
    host_tier: Any = None  # engines.host_tier.HostTier: a host KV tier beneath the prefix cache
    pipeline: Any = None  # replay.pipeline.PipelineTiming: --pp above 1 (serving/pipeline.py)
    pipeline_link: Any = None  # cards.Link of the stage boundary
    # A deployment of several pools served as one (prefill/decode disaggregation): a callable taking the runtime
    # trace and returning the client's result, handed down by serving/disaggregation.py (``composed_setup``) so the
    # rate search and the steady probe run it as they run one pool. ``plan`` and ``sizing`` are then its decode
    # pool's, ``plan_devices`` every GPU of both roles.
    composed: Any = field(default=None, compare=False, hash=False)
    # How requests are spread over the dp ranks (serving/balancer.py): the engine's own balancer; None with one
    # rank (or servers behind an outside round-robin router). ``together`` says how the ranks are replayed.
    balancer: Any = None

    @property
    def devices(self) -> int:
        return self.plan_devices * self.dp

    @property
    def caching(self) -> bool:
        return True if self.options.enable_prefix_caching is None else self.options.enable_prefix_caching


def refuse_unreplayed(plan: Any, source: str = "options", field: str = "--engine") -> None:
    """Bad input where the plan's start-up is modelled but its scheduler is not (``EnginePlan.replay_refusal``):
    simulate, --find-capacity and sweep never replay another release's scheduler under this one's name."""
    why = plan.replay_refusal if plan.runtime_modelled else None
    if why:
        raise BadInput(source, field, why)


def runtime_setup(spec: Any, config: Any, enable_prefix_caching: bool | None = None) -> RuntimeSetup:
    """The engine's plan and pool for ``config`` (``SimConfig`` with ``engine`` set); the KV memory is
    ``config.engine``'s or the device budget's limit. EngineRefused passes to the caller."""
    from csa_plan.planner.placement import Router
    from csa_plan.planner.replay.protocol import RuntimeOptions
    from csa_plan.planner.serving.step_source import step_time_for

    p = config.placement
    length = config.max_seq_len or max(d.max_seq_len for d in spec.layers)
    plan, sizing = config.engine.sized(spec, p.pp, config.limit_bytes, length)
    refuse_unreplayed(plan)
    if plan.runtime_modelled and p.dp > 1 and p.router is not Router.ROUND_ROBIN:
        raise BadInput("options", "--router", f"simulate --engine {config.engine.name} replays data-parallel "
                                              "replicas with round-robin routing only")
    balancer = dp_balancer(config.engine.name, config.engine.settings, p.dp) if plan.runtime_modelled else None
    if balancer is not None and p.pp > 1 and not balancer.round_robin:  # the ranks together take no stages
        from csa_plan.planner.serving.balancer import Balancer, Method

        if getattr(config.engine.settings, "load_balance_method", None) is not None:  # asked for: refused
            raise BadInput("options", "--load-balance-method", f"{balancer.method.value} needs the ranks replayed "
                                                               "together (serving/balanced.py), which take no "
                                                               "pipeline stages: drop --pp or the method")

        balancer = Balancer(Method.ROUND_ROBIN, f"round-robin, each rank replayed alone: with --pp, {balancer.label} "
                                                "is not modelled (the ranks replayed together, serving/balanced.py, "
                                                "take no pipeline stages)")
    if sizing is None:
        raise BadInput("options", "--device-memory", f"simulate --engine {plan.engine.name} needs the KV memory: "
                                                     "--device-memory (the device budget sizes it) or --kv-memory")
    time = step_time_for(spec, config, plan)
    pipeline = link = None
    if p.pp > 1:  # the pools are the caller's (EngineRun.pipeline); the clock through the stages is set here
        from csa_plan.planner.serving.pipeline import stage_clock

        pipeline, link = stage_clock(spec, config, config.engine.pipeline, time)
    return RuntimeSetup(plan, sizing, time,
                        RuntimeOptions(enable_prefix_caching=enable_prefix_caching,
                                       spec_acceptance=config.time.spec_acceptance), p.dp,
                        config.time.max_concurrency, p.tp * p.pp, pipeline=pipeline, pipeline_link=link,
                        balancer=balancer)


def dp_balancer(engine: str, settings: Any, dp: int) -> Any:
    """The engine release's DP load balancer (``serving/balancer.py``) for ``dp`` ranks; None with one rank.
    ``--load-balance-method`` is SGLang's (vLLM's balancer is not configurable: its settings refuse the
    option as SGLang's); a method the release lacks, or one that cannot apply, is bad input."""
    from csa_plan.planner.serving.balancer import sglang_balancer, vllm_balancer

    method = getattr(settings, "load_balance_method", None)
    if dp == 1:
        if method is not None:
            raise BadInput("options", "--load-balance-method", f"{method} spreads requests over data-parallel "
                                                               "ranks: it needs --dp above 1")
        return None
    if engine.startswith("vllm"):
        return vllm_balancer(engine)
    try:
        return sglang_balancer(method)
    except ValueError as e:
        raise BadInput("options", "--load-balance-method", str(e)) from None


def engine_runtime(setup: RuntimeSetup, trace: Any, made: list | None = None) -> Any:
    """The engine's runtime over ``trace``, under its host tier when the setup has one (``made`` collects
    the tiers, whose counters the caller sums)."""
    rt = setup.plan.runtime(setup.sizing, trace, setup.options)
    if setup.pipeline is not None and getattr(rt, "async_on", False) and hasattr(rt, "decode_stagger"):
        rt.decode_stagger = setup.pipeline.stages  # vLLM V2 + PP + async: AsyncScheduler.decode_stagger = pp_size
    if setup.pipeline is not None and setup.pipeline.micro_batch_turns:  # SGLang: pp_loop_size micro-batches
        rt.use_micro_batches(setup.pipeline.in_flight, setup.pipeline.stages)
    if setup.host_tier is not None:
        from csa_plan.planner.engines.host_tier import HostTierRuntime

        rt = HostTierRuntime(rt, trace, setup.host_tier, setup.plan)
        if made is not None:
            made.append(rt)
    return rt


def serve(setup: RuntimeSetup, wl: "Workload", rate_scale: float, progress: Tick | None = None,
          stop: Any = None) -> "RuntimeResult":
    """The workload at ``rate_scale``, replayed through the engine's own scheduler, one replay per replica.
    ``stop`` (``replay/early_exit.py`` ``StopRule``): end as soon as it decides a bound (``ReplayStopped``)."""
    from csa_plan.planner.replay.trace import runtime_trace

    return serve_trace(setup, runtime_trace(wl, rate_scale), progress, stop)


def serve_trace(setup: RuntimeSetup, trace: Any, progress: Tick | None = None, stop: Any = None,
                layer: Callable[[Any, int], Any] | None = None) -> "RuntimeResult":
    """``trace`` replayed through the engine's own scheduler, one replay per replica (``serve``); ``stop``
    counts over the whole deployment (each replica's final counts carried into the next one's checks).
    A closed-loop client refuses it (its arrivals are set as it runs): it is replayed in full. A composed
    deployment's pools (disaggregated roles) go through its composition, replayed in full. ``layer(rt, k)``
    wraps replica k's runtime (a disaggregated prefill's transfer hold, ``serving/transfer_hold.py``): over
    ``replicas.split_round_robin``'s k-th sub-trace, or, with the ranks replayed ``together``, over the
    whole trace (rank k is handed the requests its balancer picks, by their own indices)."""
    from dataclasses import replace

    if setup.composed is not None:
        return setup.composed(trace)

    from csa_plan.planner.replay.loop import replay
    from csa_plan.planner.serving.replicas import replay_replicas

    time = setup.time
    made: list = []
    watch = None if stop is None or setup.max_concurrency is not None else stop.watch()
    replayed = [0]

    if layer is not None and setup.max_concurrency is not None:
        raise RuntimeError("a runtime layer is replayed open-loop only")

    def one(t: Any) -> "RuntimeResult":
        rt = engine_runtime(setup, t, made)
        r = replay(rt if layer is None else layer(rt, replayed[0]), t, time, progress=progress, max_concurrency=setup.max_concurrency,
                   pipeline=setup.pipeline, stop=watch)
        replayed[0] += 1
        if watch is not None:
            watch.carry(r.arrival_ns, t.output_tokens, r.admitted_ns, r.first_token_ns, r.finished_ns, len(r.refused),
                        more=replayed[0] < setup.dp)
        return r

    if together(setup):
        from csa_plan.planner.serving.balanced import replay_balanced

        ranks_made = [0]

        def rank_runtime() -> Any:  # rank k's runtime over the whole trace (``layer(rt, k)`` wraps it)
            rt, k = engine_runtime(setup, trace, made), ranks_made[0]
            ranks_made[0] += 1
            return rt if layer is None else layer(rt, k)

        result = replay_balanced(rank_runtime, trace, time, setup.dp, setup.balancer, setup.max_concurrency,
                                 progress=progress)
    elif setup.max_concurrency is not None and setup.dp > 1:  # one client pool for the deployment
        from csa_plan.planner.serving.replicas import replay_closed_replicas

        result = replay_closed_replicas(lambda t, c: replay(engine_runtime(setup, t, made), t, time,
                                                            progress=progress, max_concurrency=c,
                                                            pipeline=setup.pipeline),
                                        trace, setup.dp, setup.max_concurrency, lockstep_time=time)
    else:
        result = replay_replicas(one, trace, setup.dp)
    if made:
        totals: dict[str, int] = {}
        for rt in made:
            for k, v in rt.counters().items():
                totals[k] = totals.get(k, 0) + v
        result = replace(result, host_tier=totals)
    return result


def together(setup: RuntimeSetup) -> bool:
    """Whether the dp ranks are replayed together in time (``serving/balanced.py``): under a load-aware
    balancer (its choice reads the ranks' state on arrival), and under round-robin behind a closed-loop
    client, whose next request goes to the next rank in turn whichever rank freed the connection (the
    ranks alone, ``replicas.replay_closed_replicas``, would pin each connection to one rank: on unequal
    requests a rank there never holds more than its share). Round-robin over open-loop arrivals deals
    the trace in order, as ``split_round_robin`` does: each rank alone, compiled where it can be; so with
    pipeline stages, which the ranks together do not take."""
    b = setup.balancer
    if setup.dp == 1 or b is None or setup.pipeline is not None:
        return False
    return not b.round_robin or setup.max_concurrency is not None


def with_host_tier(setup: RuntimeSetup, config: Any, flags: Any) -> RuntimeSetup:
    """``setup`` with the host tier ``flags`` ask for (``engines.host_tier``), resolved on the deployment's card."""
    from dataclasses import replace

    from csa_plan.planner.cards import card
    from csa_plan.planner.engines.host_tier import resolve_tier
    from csa_plan.planner.engines.settings import target_of

    if flags is None or not flags.given:
        return setup
    field = flags.check_for(setup.plan.engine.name, setup.options.enable_prefix_caching)
    gpu = card(target_of(config.engine.settings)[0].name)
    tier = resolve_tier(setup.plan, setup.sizing, config.placement.tp, gpu,
                        offloading_gib=flags.kv_offloading_size_gib, hicache_gb=flags.hicache_size_gb,
                        hicache_ratio=flags.hicache_ratio, field=field)
    return replace(setup, host_tier=tier)


def host_tier_section(setup: RuntimeSetup, result: "RuntimeResult") -> dict[str, Any] | None:
    """``runtime.host_tier``: the tier, and the prefix hits from HBM and from the host apart, the reload in the clock."""
    if setup.host_tier is None or result.host_tier is None:
        return None
    c = result.host_tier
    return {**setup.host_tier.as_dict(), "hbm_hit_tokens": int(result.prefix_hit_tokens),
            "host_hit_tokens": c["host_hit_tokens"], "queried_tokens": int(result.prefix_query_tokens),
            "reload_bytes": c["reload_bytes"], "reload_s": c["reload_ns"] / 1e9, "stored_blocks": c["stored_blocks"],
            "evicted_blocks": c["evicted_blocks"]}


def report(setup: RuntimeSetup, result: "RuntimeResult", wl: "Workload | None" = None) -> "RuntimeReport":
    """The replay's report; with ``wl`` (its output tokens) TPOT and output tokens/s per GPU too."""
    from csa_plan.planner.serving.report import runtime_report

    out = None if wl is None else wl.output_tokens
    return runtime_report(result, caching=setup.caching, unit=setup.sizing.unit_name, output_tokens=out,
                          devices=setup.devices, step_time=setup.time.as_dict())


def wait_p99_ns(rep: "RuntimeReport | WindowFigures") -> int | None:
    """The queue-wait p99 in whole nanoseconds (None: nothing admitted): the figure bounds compare."""
    p99 = rep.queue_wait.p99_s
    return None if p99 is None else int(round(p99 * 1e9))


def sustains(rep: "RuntimeReport | WindowFigures", max_wait_ns: int | None,
             latency: tuple[float | None, float | None] = (None, None)) -> bool:
    """The bounds of the rate criterion, on a report or on a steady window's requests: every request
    served, none refused, queue-wait p99 within the bound, and the TTFT and TPOT p99 (seconds)
    within ``latency`` where given."""
    if rep.refused or rep.served != rep.requests:
        return False
    wait = wait_p99_ns(rep)
    if not (max_wait_ns is None or wait is None or wait <= max_wait_ns):
        return False
    return not latency_violations(rep.ttft.p99_s, rep.tpot.p99_s, latency)


def latency_violations(ttft_p99_s: float | None, tpot_p99_s: float | None,
                       latency: tuple[float | None, float | None]) -> tuple[str, ...]:
    """The latency bounds a replay's p99s break, as shown (sweep ``ttft_p99_max_s``, ``tpot_p99_max_ms``)."""
    out = []
    ttft_max, tpot_max = latency
    if ttft_max is not None and ttft_p99_s is not None and ttft_p99_s > ttft_max:
        out.append(f"TTFT p99 {ttft_p99_s:.3f} s > {ttft_max:g} s")
    if tpot_max is not None and tpot_p99_s is not None and tpot_p99_s > tpot_max:
        out.append(f"TPOT p99 {tpot_p99_s * 1000:.2f} ms > {tpot_max * 1000:g} ms")
    return tuple(out)


@dataclass(frozen=True)
class RuntimeCapacity:
    rate_scale: float | None  # None: no rate scale in the search's range sustains (or the trace cannot say)
    capped: bool  # the search reached its ceiling: the capacity is at least rate_scale
    probes: int
    report: "RuntimeReport | None"  # the replay at rate_scale (of the extended trace its window needed)
    tried: tuple[tuple[float, bool], ...] = ()  # every probe: (rate scale, sustained in steady state), in order
    judgement: "Judgement | None" = None  # the steady-state verdict at rate_scale (planner/steady.py)
    too_short: str | None = None  # no rate could be judged steady or not: the trace is too short to say
    undetermined_above: float | None = None  # the search's next probe above rate_scale could not be judged (at least)
    copies: int = 1  # the trace's copies replayed at rate_scale

    def as_dict(self) -> dict[str, Any]:
        from csa_plan.planner.steady import EXTENSION

        return {"steady": None if self.judgement is None else self.judgement.as_dict(), "too_short": self.too_short,
                "undetermined_above": self.undetermined_above, "copies": self.copies, "extension": EXTENSION}


@dataclass(frozen=True)
class SteadyProbe:
    """One rate probed as ``planner/steady.py`` says: ``ok`` None when the trace, extended to
    ``MAX_STEADY_REQUESTS``, is still too short to say."""

    ok: bool | None
    judgement: "Judgement"
    copies: int
    report: "RuntimeReport | None" = None  # the whole run's report (when ok)


def steady_probe(setup: RuntimeSetup, wl: "Workload", scale: float, max_wait_ns: int | None,
                 latency: tuple[float | None, float | None] = (None, None)) -> SteadyProbe:
    """Serve ``wl`` at ``scale`` for long enough to judge a steady state (extending it by
    ``steady.EXTENSION`` while the window is too short), then check the bounds on the window."""
    from dataclasses import replace

    from csa_plan.planner.serving.report import window_figures
    from csa_plan.planner.steady import (BOUND, MAX_EXTENSION_ROUNDS, REFUSED, copies_needed, extension_cap, judge,
                                         max_copies)
    from csa_plan.planner.workloads.extend import repeated

    n = len(wl)
    base_arrivals = wl.arrival_ns
    span = int(wl.arrival_ns[-1] - wl.arrival_ns[0]) / scale if n else 0
    copies = 2  # the balance compares a copy of the trace with the one before
    for _ in range(MAX_EXTENSION_ROUNDS):
        run = repeated(wl, copies)
        res = serve(setup, run, scale)
        j = judge(res.arrival_ns, res.finished_ns, copies, normalized_lifetimes(res, run))
        if res.refused:
            return SteadyProbe(False, replace(j, steady=False, reason=REFUSED, detail=f"{len(res.refused):,} refused"),
                               copies)
        if j.steady is False:
            return SteadyProbe(False, j, copies)
        if j.steady:
            fig = window_figures(res, run.output_tokens, *j.in_window)
            if not sustains(fig, max_wait_ns, latency):
                broken = latency_violations(fig.ttft.p99_s, fig.tpot.p99_s, latency)
                wait = fig.queue_wait.p99_s
                if max_wait_ns is not None and wait is not None and wait * 1e9 > max_wait_ns:
                    broken = (f"wait p99 {wait:.3f} s > {max_wait_ns / 1e9:g} s",) + broken
                return SteadyProbe(False, replace(j, steady=False, reason=BOUND, detail="; ".join(broken)), copies)
            return SteadyProbe(True, j, copies, report(setup, res, run))
        need = copies_needed(int(span), n, j.lifetime_ns, copies)
        if need == 0 or need * n > extension_cap(n) or need > max_copies(base_arrivals, scale):
            return SteadyProbe(None, j, copies)
        copies = need
    return SteadyProbe(None, j, copies)


def normalized_lifetimes(res: "RuntimeResult", wl: "Workload") -> Any:
    """Each request's lifetime as if it were of the trace's mean size: its queue wait, its prefill
    time (admission to first token) scaled to the mean prompt, and its decode time per token times
    the mean output length (what the steady-state balance compares: load moves it, the trace's own
    request sizes do not)."""
    import numpy as np

    arrival = np.asarray(res.arrival_ns, dtype=np.int64)
    admitted = np.asarray(res.admitted_ns, dtype=np.int64)
    first = np.asarray(res.first_token_ns, dtype=np.int64)
    done = np.asarray(res.finished_ns, dtype=np.int64)
    out = np.maximum(np.asarray(wl.output_tokens, dtype=np.int64), 1)
    prompt = np.maximum(np.asarray(wl.prompt_tokens, dtype=np.int64), 1)
    per_token = np.where(out > 1, (done - first) / np.maximum(out - 1, 1), 0.0)
    prefill = (first - admitted) * (float(prompt.mean()) / prompt)
    norm = (admitted - arrival) + np.rint(prefill + per_token * max(float(out.mean()) - 1, 0.0)).astype(np.int64)
    return np.where((done >= 0) & (first >= 0) & (admitted >= 0), norm, done - arrival)


def runtime_capacity(setup: RuntimeSetup, wl: "Workload", max_wait_ns: int | None, *, start: float = 1.0,
                     rel_tol: float = 1e-2, scale_min: float | None = None, scale_max: float | None = None,
                     tick: Callable[[int, float], None] | None = None,
                     latency: tuple[float | None, float | None] = (None, None)) -> RuntimeCapacity:
    """The largest rate scale that is sustained in steady state (``steady_probe``), by the one rate
    search (``bisect_rate``), from ``start``. A probe the trace is too short to judge counts as not
    sustained; when no probe could be judged sustained and some could not be judged, the answer
    is "too short to say", never a number."""
    from csa_plan.planner.bisection import SCALE_MAX, SCALE_MIN, bisect_rate
    from csa_plan.planner.clock import MAX_SIM_NS
    from csa_plan.planner.steady import MAX_STEADY_REQUESTS, last_arrival

    scale_min = SCALE_MIN if scale_min is None else scale_min
    scale_max = SCALE_MAX if scale_max is None else scale_max
    last = float(last_arrival(wl.arrival_ns, 2)) if len(wl) else 0.0  # two copies: the fewest a probe replays
    floor = max(scale_min, last / MAX_SIM_NS * (1 + 1e-9) if last > 0 else 0.0)
    best: dict[float, SteadyProbe] = {}
    unknown: list[tuple[float, SteadyProbe]] = []
    seen: dict[float, bool | None] = {}
    probes = [0]
    tried: list[tuple[float, bool]] = []

    def good(scale: float) -> bool:
        probe = steady_probe(setup, wl, scale, max_wait_ns, latency)
        probes[0] += 1
        if tick:
            tick(probes[0], scale)
        seen[scale] = probe.ok
        tried.append((scale, bool(probe.ok)))
        if probe.ok is None:
            unknown.append((scale, probe))
        if probe.ok:
            best.clear()
            best[scale] = probe
        return bool(probe.ok)

    lo, capped = bisect_rate(good, min(max(start, floor), scale_max), floor, scale_max, rel_tol)
    if lo is None:
        short = None
        if unknown:
            j = unknown[-1][1].judgement
            short = (f"trace too short to say: at x{unknown[-1][0]:.4g} its arrivals, extended to "
                     f"at most {MAX_STEADY_REQUESTS:,} requests, span {j.window_lifetimes:.1f} request lifetimes of "
                     f"{j.lifetime_ns / 1e9:.3g} s after the warm-up")
        return RuntimeCapacity(None, False, probes[0], None, tuple(tried), too_short=short)
    probe = best.get(lo)
    judged = sorted(s for s in seen if s > lo)  # the lowest probe above the answer: undetermined, or a real fail
    above = judged[0] if judged and seen[judged[0]] is None else None
    return RuntimeCapacity(lo, capped, probes[0], None if probe is None else probe.report, tuple(tried),
                           None if probe is None else probe.judgement, None, above,
                           1 if probe is None else probe.copies)
