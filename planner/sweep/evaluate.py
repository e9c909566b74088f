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

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, AbstractSet, Any, Mapping

from csa_plan.planner.errors import BadInput
from csa_plan.planner.reserve import Policy
from csa_plan.planner.sweep.results import PointResult, RuntimeFigures, point_violations, runtime_refusals
from csa_plan.planner.sweep.spec import Constraints, Context, Objective, SkipReason, SweepPoint, SweepSpec

if TYPE_CHECKING:
    from csa_plan.planner.model import ModelSpec
    from csa_plan.planner.workloads import Workload


# -- loading, cached per process (workers load once, then reuse) ---------------------------


@lru_cache(maxsize=4)
def load_context_workload(path: str, sort: bool, seed: int | None) -> "Workload":
    from csa_plan.planner.workloads import generate_mix, load_workload

    if seed is not None and Path(path).suffix.lower() in (".yaml", ".yml"):
        from csa_plan.planner.loaders.safe_yaml import load_yaml

        from csa_plan.planner.files import read_text
        from csa_plan.planner.workloads.workload import MAX_TRACE_BYTES

        data = load_yaml(read_text(path, MAX_TRACE_BYTES, "MAX_TRACE_BYTES"), path)
        if isinstance(data, dict):
            return _sweepable(generate_mix({**data, "seed": seed}, path))
    return _sweepable(load_workload(path, sort=sort))


def _sweepable(wl: "Workload") -> "Workload":
    """A mix's settings a sweep cannot honour are refused, never dropped (issue 47): a closed loop ignores
    the arrival rate every point searches, and the drafts' acceptance is simulate's option."""
    for field in ("max_concurrency", "spec_acceptance"):
        if getattr(wl.settings, field, None) is not None:
            raise BadInput(wl.source, field, "a sweep searches each point's arrival rate"
                           + (": a closed loop ignores it" if field == "max_concurrency" else
                              "; the drafts' acceptance rate is simulate's (--spec-acceptance)")
                           + ", so it would change nothing: drop it from the mix for a sweep")
    return wl


@lru_cache(maxsize=16)
def load_point_model(ref: str, max_seq_len: int | None) -> "ModelSpec":
    from csa_plan.planner.loaders.model_files import load_model

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
        return WorkloadBounds(len(wl), int(total.min()), int(total.max()), wl.base_rate_per_s())


def _largest_bundle(spec: "ModelSpec", point: SweepPoint, tokens: int) -> int:
    """Bytes one request of ``tokens`` reserved tokens keeps on the fullest device."""
    from csa_plan.planner.placement import split_stages, stage_bundles
    from csa_plan.planner.plan import PlanOptions, plan_model

    split = split_stages(spec.num_main_layers, spec.num_mtp_layers, point.pp)
    plan = plan_model(spec, PlanOptions(max_seq_len=tokens, tp=point.tp, layout=point.layout))
    return max(b.total_bytes for b in stage_bundles(plan, split))


def static_skip(point: SweepPoint, bounds: WorkloadBounds, constraints: Constraints,
                source: str = "sweep spec") -> Skip | None:
    """A reason this point cannot work, found without simulating it; None if it must be run."""
    from csa_plan.planner.placement import split_stages
    from csa_plan.planner.plan import PlanOptions, plan_model
    from csa_plan.planner.reserve import reserved_tokens

    if point.disaggregation is not None:
        return _disaggregated_skip(point, bounds, constraints, source)
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
    if point.engine is not None and any(d.sharing is not None for d in spec.layers):
        # shared compressed state (DeepSeek-V4.1) on a release that does not model it: the typed refusal of
        # check (shared_engines.py), before any budget or pool of that release's V4 rules is read
        from csa_plan.planner.engines.registry import get_engine, resolve_engine_name
        from csa_plan.planner.shared_engines import before_modelled, engine_refusal, release_of, spelled

        name = resolve_engine_name(point.engine)[0]
        if not get_engine(name).models_shared_state or before_modelled(point.engine):
            name = spelled(point.engine) if release_of(spelled(point.engine))[1] else name  # the release named
            r = engine_refusal(name)
            return Skip(point.key, SkipReason.PLAN_REFUSED, f"{r.type.value}: {name}: {r.message}")
    if point.limit_bytes <= 0:  # after the deployment's own checks: a bad tp is not 'no memory'
        if point.reserved.budget:  # the weights (or the rules) leave nothing: say which
            from csa_plan.planner.budget.deployment import budget_shortfall

            split = split_problem(point, point.tp, point.dp)
            if split is not None:  # a split the engine cannot make is no memory question (issue 45)
                return Skip(point.key, SkipReason.BAD_DEPLOYMENT, split + nearest_valid(point))

            return Skip(point.key, SkipReason.NO_MEMORY_LEFT, budget_shortfall(
                point.model, point.memory_bytes, point.tp, point.pp, point.dp, point.max_seq_len, point.engine,
                point.reserved.runtime_bytes, point.engine_settings, point.ep))
        return Skip(point.key, SkipReason.NO_MEMORY_LEFT,
                    f"reserved {point.reserved_bytes:,} bytes >= device memory {point.memory_bytes:,} bytes")
    max_seq_len = point.max_seq_len or max(d.max_seq_len for d in spec.layers)
    window = max(d.window for d in spec.layers)
    if point.engine is not None:
        return _engine_skip(spec, point, max_seq_len, constraints, source)
    if point.settings or point.expert_parallel or point.replicas > 1:
        what = ("engine settings apply" if point.settings else "expert_parallel applies" if point.expert_parallel
                else "replicas (servers behind a router) apply")
        return Skip(point.key, SkipReason.BAD_DEPLOYMENT, f"{what} to an engine point (engine: null "
                                                          "is csa-plan's own layout)")
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


def _disaggregated_skip(point: SweepPoint, bounds: WorkloadBounds, constraints: Constraints,
                        source: str) -> Skip | None:
    """A disaggregated point is skipped for what skips either role's worker as an aggregated point (its split,
    its memory, a request it can never hold: ``static_skip`` of ``role_point``), for a link its cards cannot
    have; a point without an engine has no prefill and decode instances to replay."""
    if point.engine is None:
        return Skip(point.key, SkipReason.BAD_DEPLOYMENT, "disaggregation replays an engine's prefill and decode "
                                                          "instances: an engine point (engine: null has none)")
    for role in ("prefill", "decode"):
        r = point.role_point(role)
        skip = _role_skip(r, bounds, constraints, source)
        if skip is not None:
            return Skip(point.key, skip.reason, f"{role} worker ({getattr(point.disaggregation, role).shape}): "
                                                f"{skip.detail}")
    try:
        transfer_link(point)
    except BadInput as exc:
        return Skip(point.key, SkipReason.BAD_DEPLOYMENT, f"{exc.field}: {exc.problem}")
    return None


@lru_cache(maxsize=256)
def _role_skip(point: SweepPoint, bounds: WorkloadBounds, constraints: Constraints, source: str) -> Skip | None:
    """``static_skip`` of a role's worker, once per worker shape: a grid of layouts names each a hundred times."""
    return static_skip(point, bounds, constraints, source)


def transfer_link(point: SweepPoint) -> tuple[Any, float]:
    """The disaggregated point's link and its bytes/s per GPU, as ``simulate --transfer-link`` resolves it
    (``cards.link``; the default: NVLink when both roles fit one NVLink domain, else ib-ndr)."""
    from csa_plan.planner.cards import card, default_link, link
    from csa_plan.planner.engines.settings import target_of

    d = point.disaggregation
    c = card(target_of(_card_settings(point.memory_bytes, point.engine, 1, point.engine_settings))[0].name)
    domain = c.perf.link_domain if c.perf is not None else 1
    return link(d.link or default_link(d.gpus, domain), c, d.gpus, field="grid.disaggregation.transfer_link")


def split_problem(point: SweepPoint, tp: int, dp: int, expert_parallel: bool | None = None) -> str | None:
    """The engine's shard rules' refusal of ``tp`` x ``dp`` for the point's model and engine (the divisibility
    rules: heads over attention ranks, ``moe_intermediate_size`` over MoE ranks, the MXFP4 runner's 128
    columns, ``planner/weights/rules.py``), through the device budget; None when the split can be made."""
    from csa_plan.planner.budget.deployment import Deployment, card_settings, deployment_budget

    spec = load_point_model(point.model, point.max_seq_len)
    length = point.max_seq_len or max(d.max_seq_len for d in spec.layers)
    try:
        ep_on = point.expert_parallel if expert_parallel is None else expert_parallel
        ep = tp * dp if ep_on and tp * dp > 1 else None
        deployment_budget(point.model, point.memory_bytes, Deployment(tp=tp, pp=point.pp, dp=dp, ep=ep,
                                                                      reserved_bytes=point.reserved.runtime_bytes),
                          length, point.engine, card_settings(point.engine_settings, point.memory_bytes),
                          search=False)
    except BadInput as exc:
        return f"{exc.field}: {exc.problem}"
    return None


def nearest_valid(point: SweepPoint) -> str:
    """The nearest shapes the rules accept (fewer and more GPUs), for a point whose split cannot be made:
    the same tp with another dp first, then another tp with the same dp."""
    tried = [(point.tp, d) for d in range(1, 2 * point.dp + 1) if d != point.dp]
    tried += [(t, point.dp) for t in (1, 2, 4, 8, 16) if t != point.tp]
    tried.sort(key=lambda s: (abs(s[0] * s[1] - point.devices), s[0] != point.tp))
    below = above = None
    for t, d in tried:
        if (below is not None and t * d < point.devices) or (above is not None and t * d >= point.devices):
            continue
        if split_problem(point, t, d) is None:
            if t * d < point.devices:
                below = (t, d)
            else:
                above = (t, d)
        if below is not None and above is not None:
            break
    found = [f"tp {s[0]} dp {s[1]} ({s[0] * s[1]} GPUs)" for s in (below, above) if s is not None]
    if not point.expert_parallel and point.engine is not None and split_problem(point, point.tp, point.dp, True) is None:
        found.insert(0, f"this shape with expert_parallel: true (EP {point.tp * point.dp})")
    return f"; nearest valid: {' or '.join(found)}" if found else ""


def _engine_skip(spec: "ModelSpec", point: SweepPoint, max_seq_len: int, constraints: Constraints,
                 source: str) -> Skip | None:
    """An engine point is skipped when the engine refuses the model or the KV memory (its own rule).
    An engine whose runtime is replayed queues rather than refuses: the spec must bound a latency
    (the queue wait, TTFT or TPOT p99; SLO bounds alone will do), bad input before anything runs."""
    from csa_plan.planner.engines.engine import EngineRefused
    from csa_plan.planner.engines.registry import get_engine

    if point.pp > 1:  # each stage's pool (serving/pipeline.py), as simulate --engine --pp sizes it
        if not point.reserved.budget:
            return Skip(point.key, SkipReason.BAD_DEPLOYMENT,
                        f"{point.engine} with {point.pp} pipeline stages sizes each stage's pool from its own device "
                        f"budget: reserved must be budget, not {point.reserved.label}")
        try:
            pipeline_pools_of(point)
        except BadInput as exc:
            return Skip(point.key, SkipReason.BAD_DEPLOYMENT, f"{exc.field}: {exc.problem}")
        except EngineRefused as exc:
            return Skip(point.key, SkipReason.PLAN_REFUSED, f"EngineRefused: {exc.refusal.message}")
    model = get_engine(point.engine)
    foreign = [name for name, _ in point.settings if name not in model.options]
    if foreign:
        return Skip(point.key, SkipReason.BAD_DEPLOYMENT, f"{point.engine} has no setting {foreign[0]} "
                                                          f"(its own: {', '.join(sorted(model.options))})")
    try:
        plan = model.configure(spec, _card_settings(point.memory_bytes, point.engine, point.dp, point.engine_settings),
                               max_seq_len)
        plan.size_pool(point.limit_bytes)
    except EngineRefused as exc:
        return Skip(point.key, SkipReason.PLAN_REFUSED, f"EngineRefused: {exc.refusal.message}")
    from csa_plan.planner.serving.serve import refuse_unreplayed

    refuse_unreplayed(plan, source, "grid.engine")
    if plan.runtime_modelled and constraints.wait_p99_max_s is None and constraints.ttft_p99_max_s is None \
            and constraints.tpot_p99_max_ms is None:
        raise BadInput(source, "constraints.wait_p99_max_s",
                       f"a bound is required when the grid has {plan.engine.name}: its runtime is replayed step by "
                       "step and it queues rather than refuses, so a latency bound is the rate limit: give "
                       "wait_p99_max_s, ttft_p99_max_s or tpot_p99_max_ms")
    from csa_plan.planner.placement import Router

    if plan.runtime_modelled and point.dp > 1 and point.router is not Router.ROUND_ROBIN:
        return Skip(point.key, SkipReason.BAD_DEPLOYMENT, f"{point.engine}'s runtime is replayed with round-robin "
                                                          f"data-parallel routing only, not {point.router.value}")
    return None


# -- evaluating one point -----------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """What a worker receives: the point and the shared context (no arrays: workers load and cache them)."""

    context: Context
    point: SweepPoint
    early_exit: bool = False  # plan's path: a replay stops once a bound is decided; no rate search once it fails
    beat: tuple[float, float] | None = None  # (TPOT p99 s, TTFT p99 s) of a found shape of the same GPU count


NOT_JUDGED = "not judged"  # a shape stopped because it cannot be preferred to one found: no verdict of its own


def evaluate(task: Task) -> PointResult:
    """Run one point: ``simulate`` at its target rate, ``find_capacity`` from there."""
    from csa_plan.planner.reserve.capacity import find_capacity
    from csa_plan.planner.reserve import prepare, simulate

    ctx, p = task.context, task.point
    wl = load_context_workload(ctx.workload, ctx.sort, ctx.seed)
    spec = load_point_model(p.model, p.max_seq_len)
    if p.disaggregation is not None:
        return _disaggregated_point(ctx, p, wl, spec)
    config = _sim_config(ctx, p)
    if config.engine is not None:
        runtime = _runtime_point(ctx, p, wl, spec, config, task.early_exit, task.beat)
        if runtime is not None:
            return runtime
    scn = prepare(spec, wl, config)
    result = simulate(scn)
    cons = ctx.constraints
    wait_bound = cons.wait_p99_max_ns if p.policy is Policy.QUEUE else None
    cap = find_capacity(scn, wait_bound, rel_tol=ctx.search.rel_tol, scale_min=ctx.search.min_scale,
                        scale_max=ctx.search.max_scale)
    byte_ns = sum(d.byte_ns for d in result.devices)
    mean_util = byte_ns / (p.limit_bytes * result.span_ns * len(result.devices)) if result.span_ns else 0.0
    peak_util = max(d.peak_bytes for d in result.devices) / p.limit_bytes
    violations = point_violations(cons, result.refusals, result.wait_p99_ns, mean_util, cap.rate_scale)
    bounds = WorkloadBounds.of(wl)
    rate = None if cap.rate_scale is None else cap.rate_scale * bounds.base_rate_per_s
    return PointResult(
        key=p.key, devices=p.devices, requests=result.requests, admitted=result.admitted, refused=result.refused,
        refusals=result.refusals, wait_p99_ns=result.wait_p99_ns, peak_bytes=result.peak_bytes,
        mean_utilization=mean_util, peak_utilization=peak_util, sustainable_rate_scale=cap.rate_scale,
        at_least=cap.capped, probes=len(cap.probes), sustainable_rate_per_s=rate,
        rate_per_device_per_s=None if rate is None else rate / p.devices,
        feasible=not violations, violations=violations, steady=_steady_note(cap))


@lru_cache(maxsize=64)
def pipeline_pools_of(p: SweepPoint):
    """An engine point's pipeline stages (pp above 1): each stage's pool from its own layers and its device
    budget (``serving.pipeline.pipeline_pools``, the budget ``check``/``simulate --engine --pp`` use). BadInput
    or EngineRefused pass to the caller."""
    from csa_plan.planner.budget.deployment import Deployment, card_settings, deployment_budget
    from csa_plan.planner.placement import Placement
    from csa_plan.planner.serving.pipeline import pipeline_pools

    spec = load_point_model(p.model, p.max_seq_len)
    length = p.max_seq_len or max(d.max_seq_len for d in spec.layers)
    budget = deployment_budget(p.model, p.memory_bytes, Deployment(tp=p.tp, pp=p.pp, dp=p.dp, ep=p.ep,
                                                                   reserved_bytes=p.reserved.runtime_bytes),
                               length, p.engine, card_settings(p.engine_settings, p.memory_bytes), search=False,
                               placement=Placement(tp=p.tp, pp=p.pp, dp=p.dp, router=p.router, ep=p.ep))
    if budget is None or not budget.fits:
        raise BadInput("sweep spec", "grid.pp", f"{p.pp} stages of tp {p.tp}: the weights do not fit the stages")
    return pipeline_pools(spec, p.engine, _card_settings(p.memory_bytes, p.engine, p.dp, p.engine_settings), length,
                          budget)


def _sim_config(ctx: Context, p: SweepPoint):
    """The point as ``simulate`` runs it: one construction for the replay and the bound (an engine point with
    pipeline stages carries each stage's pool, ``pipeline_pools_of``)."""
    from dataclasses import replace

    config = _base_config(ctx, p)
    if p.engine is not None and p.pp > 1:
        config = replace(config, engine=replace(config.engine, pipeline=pipeline_pools_of(p)))
    return config


def _base_config(ctx: Context, p: SweepPoint):
    from csa_plan.planner.placement import Placement
    from csa_plan.planner.reserve.engine_run import EngineRun
    from csa_plan.planner.reserve import SimConfig, TimeModel

    return SimConfig(placement=Placement(tp=p.tp, pp=p.pp, dp=p.dp, router=p.router, ep=p.ep), limit_bytes=p.limit_bytes,
                     reserve=p.reserve, bucket=p.bucket, policy=p.policy,
                     time=TimeModel(prefill_tok_s=ctx.prefill_tok_s, tpot_ms=ctx.tpot_ms, rate_scale=p.rate_scale,
                                    step_time=p.step_time or ctx.step_time),
                     layout=p.layout, max_seq_len=p.max_seq_len,
                     engine=None if p.engine is None else EngineRun(p.engine, _card_settings(
                         p.memory_bytes, p.engine, p.dp, p.engine_settings)))


def _setup(spec: "ModelSpec", config, p: SweepPoint):
    """The replay's setup for the point: its tp x dp shape's plan, pool and clock, and ``replicas``
    independent servers of it behind a round-robin router (the replay's replicas: dp x replicas)."""
    from dataclasses import replace

    from csa_plan.planner.serving.serve import runtime_setup

    setup = runtime_setup(spec, config)
    if p.replicas > 1 and setup.balancer is not None and not setup.balancer.round_robin \
            and dict(p.settings).get("load_balance_method") is not None:
        raise BadInput("sweep spec", "grid.settings", f"load_balance_method {setup.balancer.method.value} with "
                                                      f"replicas {p.replicas}: servers behind a round-robin router "
                                                      "are each replayed alone, so the method cannot apply")
    # Servers behind a round-robin router do not step together: all dp x replicas ranks are dealt round-robin,
    # each replayed alone, as before issue 44's balancers (one server's own DP balancer inside the router's
    # split is not modelled: serving/balanced.py steps one deployment's ranks together)
    return setup if p.replicas == 1 else replace(setup, dp=setup.dp * p.replicas, balancer=None)


def point_bound(task: Task):
    """The busy-time lower bound of an engine point whose runtime is replayed, at its target rate
    (``sweep/bounds.py``); None for a ledger point or a clock that gives none. EngineRefused passes."""
    from csa_plan.planner.serving.serve import runtime_setup
    from csa_plan.planner.sweep.bounds import busy_bound

    ctx, p = task.context, task.point
    if p.engine is None:
        return None
    wl = load_context_workload(ctx.workload, ctx.sort, ctx.seed)
    if not len(wl):
        return None
    isl = wl.prompt_tokens.astype(float)
    rate = WorkloadBounds.of(wl).base_rate_per_s * p.rate_scale
    positions = float((isl * (isl + 1) / 2).mean())
    if p.disaggregation is not None:
        # each role's work alone, counted low: the prefill pool computes every prompt (its one output token comes
        # from the prompt's last step: no decode counted); the decode pool computes each prompt's last token and
        # decodes the other output tokens over contexts of at least the shortest prompt (the loaded prompt costs
        # no step time, so neither its tokens nor their positions are counted)
        prefill, decode = _role_setups(ctx, p, load_point_model(p.model, p.max_seq_len))
        if not prefill.plan.runtime_modelled:
            return None
        osl = max(0.0, float(wl.output_tokens.mean()) - 1.0)
        found = [b for b in (busy_bound(prefill, rate, float(isl.mean()), 0.0, int(isl.min()), positions,
                                        who="a prefill worker"),
                             busy_bound(decode, rate, 1.0, osl, int(isl.min()), 0.0, who="a decode worker"))
                 if b is not None]
        return max(found, key=lambda b: b.busy_s_per_s) if found else None
    if p.pp > 1:  # stages in flight at once: one replica's busy time is no longer at most a second a second
        return None
    setup = _setup(load_point_model(p.model, p.max_seq_len), _sim_config(ctx, p), p)
    if not setup.plan.runtime_modelled:
        return None
    return busy_bound(setup, rate, float(isl.mean()), float(wl.output_tokens.mean()), int(isl.min()), positions)


def _role_setups(ctx: Context, p: SweepPoint, spec: "ModelSpec"):
    """The prefill and decode pools of a disaggregated point: each role's worker set up as the aggregated point
    of its tp x dp (``role_point``: its device budget per rank, pool and clock), its workers' ranks as round-robin
    replicas; the decode side's prefix cache as its engine keeps one, as ``simulate --prefill-workers`` replays it."""
    from dataclasses import replace

    from csa_plan.planner.serving.disaggregation import disagg_decode_caching
    from csa_plan.planner.serving.serve import runtime_setup

    d = p.disaggregation
    pre_point, dec_point = p.role_point("prefill"), p.role_point("decode")
    prefill = runtime_setup(spec, _sim_config(ctx, pre_point))
    config = _sim_config(ctx, dec_point)
    decode = runtime_setup(spec, config, disagg_decode_caching(config.engine.name, None))
    return replace(prefill, dp=d.prefill.ranks), replace(decode, dp=d.decode.ranks)


def _disaggregated_point(ctx: Context, p: SweepPoint, wl: "Workload", spec: "ModelSpec") -> PointResult:
    """A disaggregated point: the replay at its target rate (``serve_disaggregated``: the prefill pool, the link,
    the decode pool) and the one rate search (``serve.runtime_capacity`` over the composed setup, so the same
    steady probe, window and TTFT/TPOT bounds as an aggregated point). TTFT is the client's (prefill queue +
    prefill + transfer + the decode side's first step), TPOT and the blocks in use the decode pool's."""
    from csa_plan.planner.replay.loop import STRANDED
    from csa_plan.planner.serving.disaggregation import composed_setup, serve_disaggregated, transfer_figures
    from csa_plan.planner.serving.serve import report, runtime_capacity, wait_p99_ns

    d = p.disaggregation
    prefill, decode = _role_setups(ctx, p, spec)
    link, bytes_s = transfer_link(p)
    setup = composed_setup(prefill, decode, bytes_s)
    run = serve_disaggregated(prefill, decode, wl, p.rate_scale, bytes_s)
    rep = report(setup, run.result, wl)
    cons = ctx.constraints
    cap = runtime_capacity(setup, wl, cons.wait_p99_max_ns, start=p.rate_scale, rel_tol=ctx.search.rel_tol,
                           scale_min=ctx.search.min_scale, scale_max=ctx.search.max_scale,
                           latency=cons.latency_bounds)
    refusals = runtime_refusals(rep.refused, STRANDED)
    mean_util, peak_util = _utilization(rep)
    wait = wait_p99_ns(rep)
    steady = _steady_note(cap)
    violations = point_violations(cons, refusals, wait, mean_util, cap.rate_scale, rep.ttft.p99_s, rep.tpot.p99_s,
                                  p.rate_scale, steady)
    rate = None if cap.rate_scale is None else cap.rate_scale * WorkloadBounds.of(wl).base_rate_per_s
    figures = {"layout": d.label, "link": link.name, "link_source": link.source,
               "prefill": {"workers": d.prefill.workers, "tp": d.prefill.tp, "dp": d.prefill.dp, "ep": d.prefill.ep,
                           "gpus": d.prefill.gpus, "usable_units": int(run.prefill.usable_units)},
               "decode": {"workers": d.decode.workers, "tp": d.decode.tp, "dp": d.decode.dp, "ep": d.decode.ep,
                          "gpus": d.decode.gpus, "usable_units": int(run.decode.usable_units)},
               "transfer": transfer_figures(run)}
    return PointResult(
        key=p.key, devices=p.devices, requests=rep.requests, admitted=rep.served, refused=rep.requests - rep.served,
        refusals=refusals, wait_p99_ns=wait, peak_bytes=None, mean_utilization=mean_util, peak_utilization=peak_util,
        sustainable_rate_scale=cap.rate_scale, at_least=cap.capped, probes=cap.probes, sustainable_rate_per_s=rate,
        rate_per_device_per_s=None if rate is None else rate / p.devices, feasible=not violations,
        violations=violations, runtime=RuntimeFigures.of(rep), steady=steady, disaggregation=figures)



def _utilization(rep: Any) -> tuple[float, float]:
    """A replayed run's mean and peak pool utilisation (units in use over usable units, at most 1)."""
    occ = rep.occupancy
    usable = occ.usable_units
    if not usable:
        return 0.0, 0.0
    return min(1.0, occ.mean_units / usable), min(1.0, occ.peak_units / usable)

def _steady_note(cap) -> str:
    """The steady-state verdict at a point's sustainable rate, or why there is none (either search)."""
    note = cap.too_short or ("" if cap.judgement is None else cap.judgement.line())
    if cap.undetermined_above is not None:
        note += f"; at x{cap.undetermined_above:.4g} and above, the trace is too short to say"
    return note


def stop_rule(cons: Constraints, wl: "Workload", beat_tpot_s: float | None = None):
    """The early-exit rule (``replay/early_exit.py``) of a point's constraints over the whole trace ``wl``."""
    from csa_plan.planner.replay.early_exit import StopRule

    tpot = cons.latency_bounds[1]
    return StopRule(requests=len(wl), multi_token=int((wl.output_tokens >= 2).sum()), no_refusals=cons.zero_refusals,
                    ttft_max_s=cons.latency_bounds[0], tpot_max_s=tpot,
                    wait_max_s=None if cons.wait_p99_max_ns is None else cons.wait_p99_max_ns / 1e9,
                    beat_tpot_s=beat_tpot_s)


def _stopped(p: SweepPoint, stop: Any) -> PointResult:
    """A point whose replay at the target rate stopped early (``ReplayStopped``): infeasible with the
    decided bound as its reason, or (verdict None) not judged, as it cannot be preferred to a found shape."""
    note = f"{NOT_JUDGED}: " if stop.verdict is None else ""
    return PointResult(key=p.key, devices=p.devices, requests=stop.requests, admitted=0, refused=0, refusals=(),
                       wait_p99_ns=None, peak_bytes=None, mean_utilization=0.0, peak_utilization=0.0,
                       sustainable_rate_scale=None, at_least=False, probes=0, sustainable_rate_per_s=None,
                       rate_per_device_per_s=None, feasible=False, violations=(stop.reason,),
                       steady=f"{note}the replay at the target rate {stop.reason}; the rate search not run")


def _runtime_point(ctx: Context, p: SweepPoint, wl: "Workload", spec: "ModelSpec", config, early_exit: bool = False,
                   beat: tuple[float, float] | None = None) -> PointResult | None:
    """A point whose engine's runtime is replayed step by step (``EnginePlan.runtime_modelled``):
    the same replay as ``simulate --engine`` (``planner/serving/serve.py``) at the point's rate
    scale, and the same rate search as ``simulate --engine --find-capacity`` (``serve.steady_probe``:
    a steady state over a window of many request lifetimes, every request served, the wait, TTFT
    and TPOT bounds on the window). The point is feasible only when its target rate is itself
    sustained. None: the engine reserves (the ledger).

    ``early_exit`` (``plan``'s path, issue 45 item 5): the replay at the target rate stops as soon as a
    bound is decided (``stop_rule``), and the rate search is not run once that replay breaks a bound
    (the point is infeasible whatever rate it sustains) nor for a shape that cannot be preferred to
    ``beat`` (a found shape's TPOT and TTFT p99 at the same GPU count). Every verdict it gives is the
    full evaluation's; a feasible point is replayed and searched in full."""
    from csa_plan.planner.replay.early_exit import ReplayStopped
    from csa_plan.planner.replay.loop import STRANDED
    from csa_plan.planner.serving.serve import report, runtime_capacity, runtime_setup, serve, wait_p99_ns

    setup = _setup(spec, config, p)
    if not setup.plan.runtime_modelled:
        return None
    cons = ctx.constraints
    stop = stop_rule(cons, wl, None if beat is None else beat[0]) if early_exit else None
    try:
        res = serve(setup, wl, p.rate_scale, stop=stop)
    except ReplayStopped as e:
        return _stopped(p, e)
    rep = report(setup, res, wl)
    refusals = runtime_refusals(rep.refused, STRANDED)
    mean_util, peak_util = _utilization(rep)
    wait = wait_p99_ns(rep)
    cap = None
    if early_exit:
        broken = point_violations(cons, refusals, wait, mean_util, p.rate_scale, rep.ttft.p99_s, rep.tpot.p99_s)
        mine = (rep.tpot.p99_s or 0.0, rep.ttft.p99_s or 0.0)
        if broken:
            steady = "the rate search not run: the replay at the target rate already breaks a bound"
        elif beat is not None and not mine < beat:
            broken = (f"TPOT p99 {mine[0] * 1000:.3f} ms, TTFT p99 {mine[1]:.3f} s: not below the found shape's "
                      f"{beat[0] * 1000:.3f} ms, {beat[1]:.3f} s: it cannot be preferred to it",)
            steady = f"{NOT_JUDGED}: it cannot be preferred to the found shape; the rate search not run"
        if broken:
            return PointResult(
                key=p.key, devices=p.devices, requests=rep.requests, admitted=rep.served,
                refused=rep.requests - rep.served, refusals=refusals, wait_p99_ns=wait, peak_bytes=None,
                mean_utilization=mean_util, peak_utilization=peak_util, sustainable_rate_scale=None, at_least=False,
                probes=0, sustainable_rate_per_s=None, rate_per_device_per_s=None, feasible=False, violations=broken,
                runtime=RuntimeFigures.of(rep), steady=steady)
    cap = runtime_capacity(setup, wl, cons.wait_p99_max_ns, start=p.rate_scale, rel_tol=ctx.search.rel_tol,
                           scale_min=ctx.search.min_scale, scale_max=ctx.search.max_scale,
                           latency=cons.latency_bounds)
    steady = _steady_note(cap)
    violations = point_violations(cons, refusals, wait, mean_util, cap.rate_scale, rep.ttft.p99_s, rep.tpot.p99_s,
                                  p.rate_scale, steady)
    rate = None if cap.rate_scale is None else cap.rate_scale * WorkloadBounds.of(wl).base_rate_per_s
    return PointResult(
        key=p.key, devices=p.devices, requests=rep.requests, admitted=rep.served, refused=rep.requests - rep.served,
        refusals=refusals, wait_p99_ns=wait, peak_bytes=None, mean_utilization=mean_util, peak_utilization=peak_util,
        sustainable_rate_scale=cap.rate_scale, at_least=cap.capped, probes=cap.probes, sustainable_rate_per_s=rate,
        rate_per_device_per_s=None if rate is None else rate / p.devices, feasible=not violations,
        violations=violations, runtime=RuntimeFigures.of(rep), steady=steady)


def point_capacity(p: SweepPoint):
    """The point's capacity answer (requests of max_seq_len that fit its state pool), from the same
    budget and admission as check: ``budget.answer.point_answer``; a disaggregated point's decode worker's."""
    from csa_plan.planner.budget.answer import point_answer

    if p.disaggregation is not None:
        p = p.role_point("decode")
    spec = load_point_model(p.model, p.max_seq_len)
    length = p.max_seq_len or max(d.max_seq_len for d in spec.layers)
    return point_answer(spec, p.engine, _card_settings(p.memory_bytes, p.engine, p.dp, p.engine_settings), length,
                        p.limit_bytes if p.limit_bytes > 0 else None, tp=p.tp, layout=p.layout)


def _card_settings(memory_bytes: int, engine: str | None, dp: int = 1, settings=None):
    """An engine point's settings: its ``settings`` axis (else the engine's defaults) on the card the point's
    device names (SGLang: the point's dp is its DP-attention size, each worker sized for its share of
    --max-running-requests)."""
    from csa_plan.planner.budget.deployment import Deployment, card_settings, engine_settings_for

    return engine_settings_for(engine, card_settings(settings, memory_bytes, engine), Deployment(dp=dp))


# -- the answer ---------------------------------------------------------------------------





def rank(results: list[PointResult], objective: Objective, order: Mapping[str, int]) -> list[PointResult]:
    """Feasible points, best first; ties fall back to the other objective, then grid order.

    A point whose rate search reached its ceiling has no measured rate (NOT_LIMITED): its
    ceiling is never compared as if it were one. Memory does not limit it at any rate the
    trace can be replayed at, so it goes before every measured point of the same standing
    (the same device count; under rate_per_device, before all measured points), and such
    points are ordered among themselves by devices, then grid order, never by the ceiling.
    """

    def rate(r: PointResult) -> float:
        return (r.rate_per_device_per_s or 0.0) if r.rate_measured else 0.0

    def measured(r: PointResult) -> int:  # 0: not limited by memory (better), 1: measured
        return 1 if r.rate_measured or r.sustainable_rate_scale is None else 0

    feasible = [r for r in results if r.feasible]
    if objective is Objective.FEWEST_DEVICES:
        return sorted(feasible, key=lambda r: (r.devices, measured(r), -rate(r), order[r.key]))
    return sorted(feasible, key=lambda r: (measured(r), -rate(r), r.devices, order[r.key]))


def not_limited(results: list[PointResult], order: Mapping[str, int]) -> list[PointResult]:
    """Feasible points whose rate memory does not limit within the trace, fewest devices first."""
    return sorted((r for r in results if r.feasible and r.sustainable_rate_scale is not None and not r.rate_measured),
                  key=lambda r: (r.devices, order[r.key]))


def pareto_front(results: list[PointResult], order: Mapping[str, int]) -> list[PointResult]:
    """Feasible points no other feasible point beats on both devices (fewer) and sustainable rate (higher).

    Only measured rates take part: a ceiling (NOT_LIMITED) is no rate to compare, and is listed
    apart (``not_limited``)."""
    best: dict[int, PointResult] = {}
    for r in sorted((r for r in results if r.feasible and r.sustainable_rate_per_s is not None and r.rate_measured),
                    key=lambda r: (r.devices, -(r.sustainable_rate_per_s or 0.0), order[r.key])):
        best.setdefault(r.devices, r)
    front, top = [], -1.0
    for devices in sorted(best):
        r = best[devices]
        if (r.sustainable_rate_per_s or 0.0) > top:
            front.append(r)
            top = r.sustainable_rate_per_s or 0.0
    return front


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
        skip = static_skip(point, bounds, spec.context.constraints, spec.source)
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
    front: tuple[PointResult, ...]  # Pareto front: devices vs sustainable rate (measured rates only)
    unbounded: tuple[PointResult, ...] = ()  # feasible, rate not limited by memory within the trace

    @property
    def best(self) -> PointResult | None:
        return self.ranked[0] if self.ranked else None


def answer(spec: SweepSpec, results: list[PointResult]) -> SweepAnswer:
    order = {p.key: i for i, p in enumerate(spec.points)}
    in_order = sorted(results, key=lambda r: order[r.key])
    return SweepAnswer(tuple(in_order), tuple(rank(in_order, spec.objective, order)),
                       tuple(pareto_front(in_order, order)), tuple(not_limited(in_order, order)))
