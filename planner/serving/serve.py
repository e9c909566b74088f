"""A workload served by an engine whose runtime is replayed step by step: the one entry every command uses.

``simulate --engine``, ``simulate --find-capacity`` and ``sweep``'s engine axis all go through
``runtime_setup`` (the start-up pool ``check --engine`` sizes from the device budget), ``serve``
(the trace at a rate scale, through ``loop.replay`` per data-parallel replica) and
``runtime_capacity`` (the largest rate scale that ``sustains``, by the one rate search,
``simulate.capacity.bisect_rate``), so "the highest rate" and "the cheapest deployment" mean
the same replay everywhere.

The rate criterion: nothing refused (up front, or stranded) and, when a bound is given, the
queue-wait p99 (``wait_p99_ns``: the report's figure in whole nanoseconds) at most that bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from csa_plan.planner.errors import BadInput

if TYPE_CHECKING:
    from csa_plan.planner.engines.engine import EnginePlan, PoolSizing
    from csa_plan.planner.serving.report import RuntimeReport
    from csa_plan.planner.replay.protocol import RuntimeOptions
    from csa_plan.planner.replay.result import RuntimeResult
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
    if sizing is None:
        raise BadInput("options", "--device-memory", f"simulate --engine {plan.engine.name} needs the KV memory: "
                                                     "--device-memory (the device budget sizes it) or --kv-memory")
    return RuntimeSetup(plan, sizing, step_time_for(spec, config, plan),
                        RuntimeOptions(enable_prefix_caching=enable_prefix_caching,
                                       spec_acceptance=config.time.spec_acceptance), p.dp,
                        config.time.max_concurrency, p.tp * p.pp)


def serve(setup: RuntimeSetup, wl: "Workload", rate_scale: float, progress: Tick | None = None) -> "RuntimeResult":
    """The workload at ``rate_scale``, replayed through the engine's own scheduler, one replay per replica."""
    from csa_plan.planner.replay.loop import replay
    from csa_plan.planner.serving.replicas import replay_replicas
    from csa_plan.planner.replay.trace import runtime_trace

    plan, sizing, options, time = setup.plan, setup.sizing, setup.options, setup.time
    trace = runtime_trace(wl, rate_scale)
    if setup.max_concurrency is not None and setup.dp > 1:  # one client pool for the deployment
        from csa_plan.planner.serving.replicas import replay_closed_replicas

        return replay_closed_replicas(lambda t, c: replay(plan.runtime(sizing, t, options), t, time, progress=progress,
                                                          max_concurrency=c), trace, setup.dp, setup.max_concurrency)
    return replay_replicas(lambda t: replay(plan.runtime(sizing, t, options), t, time, progress=progress,
                                            max_concurrency=setup.max_concurrency), trace, setup.dp)


def report(setup: RuntimeSetup, result: "RuntimeResult", wl: "Workload | None" = None) -> "RuntimeReport":
    """The replay's report; with ``wl`` (its output tokens) TPOT and output tokens/s per GPU too."""
    from csa_plan.planner.serving.report import runtime_report

    out = None if wl is None else wl.output_tokens
    return runtime_report(result, caching=setup.caching, unit=setup.sizing.unit_name, output_tokens=out,
                          devices=setup.devices, step_time=setup.time.as_dict())


def wait_p99_ns(rep: "RuntimeReport") -> int | None:
    """The queue-wait p99 in whole nanoseconds (None: nothing admitted): the figure bounds compare."""
    p99 = rep.queue_wait.p99_s
    return None if p99 is None else int(round(p99 * 1e9))


def sustains(rep: "RuntimeReport", max_wait_ns: int | None,
             latency: tuple[float | None, float | None] = (None, None)) -> bool:
    """The rate criterion: every request served, none refused, queue-wait p99 within the bound, and
    the TTFT and TPOT p99 (seconds) within ``latency`` where given."""
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
    rate_scale: float | None  # None: no rate scale in the search's range sustains
    capped: bool  # the search reached its ceiling: the capacity is at least rate_scale
    probes: int
    report: "RuntimeReport | None"  # the replay at rate_scale
    tried: tuple[tuple[float, bool], ...] = ()  # every probe: (rate scale, sustained), in order


def runtime_capacity(setup: RuntimeSetup, wl: "Workload", max_wait_ns: int | None, *, start: float = 1.0,
                     rel_tol: float = 1e-2, scale_min: float | None = None, scale_max: float | None = None,
                     tick: Callable[[int, float], None] | None = None,
                     latency: tuple[float | None, float | None] = (None, None)) -> RuntimeCapacity:
    """The largest rate scale that ``sustains``, by the one rate search (``bisect_rate``), from ``start``."""
    from csa_plan.planner.bisection import SCALE_MAX, SCALE_MIN, bisect_rate
    from csa_plan.planner.clock import MAX_SIM_NS

    scale_min = SCALE_MIN if scale_min is None else scale_min
    scale_max = SCALE_MAX if scale_max is None else scale_max
    last = float(wl.arrival_ns.max()) if len(wl) else 0.0
    floor = max(scale_min, last / MAX_SIM_NS * (1 + 1e-9) if last > 0 else 0.0)
    best: dict[float, "RuntimeReport"] = {}
    probes = [0]
    tried: list[tuple[float, bool]] = []

    def good(scale: float) -> bool:
        rep = report(setup, serve(setup, wl, scale), wl)
        probes[0] += 1
        if tick:
            tick(probes[0], scale)
        ok = sustains(rep, max_wait_ns, latency)
        tried.append((scale, ok))
        if ok:
            best.clear()
            best[scale] = rep
        return ok

    lo, capped = bisect_rate(good, min(max(start, floor), scale_max), floor, scale_max, rel_tol)
    return RuntimeCapacity(lo, capped, probes[0], None if lo is None else best.get(lo), tuple(tried))
