"""``check`` as a use case: load, gate and lay out a model, size it against a device, decide the exit code."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from csa_plan.planner.errors import BadInput, ExitCode
from csa_plan.planner.gate import Gate
from csa_plan.planner.loaders.model_files import DEFAULT_LINT_LENGTH
from csa_plan.planner.plan import PlanOptions
from csa_plan.planner.record import record


@record
class CheckRequest:
    """Everything ``check`` is asked: the model, the plan options, the device and the engine."""

    model: str
    options: PlanOptions
    device_memory_bytes: int | None = None
    reserved_bytes: int = 0
    concurrency: int = 1
    at_length: int = DEFAULT_LINT_LENGTH
    engine: str | None = None  # an engine model's name: the engine decides the verdict (planner/engines)
    engine_settings: Any = None  # EngineSettings
    kv_memory_bytes: int | None = None  # the engine's KV memory per device
    deployment: Any = None  # planner.budget.Deployment (--tp/--pp/--dp/--ep/--weights/--reserved)
    gate_from_spec: bool = False  # no --gate given: a spec's own ``gate:`` applies
    length_question: bool = False  # --concurrency N without --max-seq-len: the answer asked is the longest length


@record(eq=False)
class CheckOutcome:
    """The check document and the exit code it decides."""

    report: dict[str, Any]
    exit_code: ExitCode


def run_check(req: CheckRequest) -> CheckOutcome:
    """Gate and lay out the model, size the device budget, and answer with one authority: the
    engine's admission when ``--engine`` is named, else the exact layout. Every refusal is
    collected (configuration: the gate and the engine's rules; fit: the weights, the state
    pool), and a suggested deployment passes every check."""
    from dataclasses import replace as with_

    from csa_plan.planner.budget.answer import engine_answer, layout_answer, no_answer, engine_authority
    from csa_plan.planner.budget.deployment import Deployment, deployment_budget, reserve_warnings
    from csa_plan.planner.capacity import capacity
    from csa_plan.planner.budget.engine_pool import max_seq_len_of
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.plan import plan_model
    from csa_plan.planner.reports.check import check_document

    if req.concurrency < 1:
        raise BadInput("options", "--concurrency", "must be at least 1")
    o = req.options
    deployment = req.deployment or Deployment(tp=o.tp, reserved_bytes=req.reserved_bytes or None)
    stages = deployment.pp or 1
    if req.engine is not None:
        from csa_plan.planner.commands.shared_routing import refuse_split_sharing_groups

        refuse_split_sharing_groups(req.model, req.engine, deployment.pp)  # vLLM's own refusal first (typed)
    if req.engine is not None and stages > 1 and req.device_memory_bytes is None:
        raise BadInput("options", "--pp", f"--engine {req.engine} with {stages} pipeline stages sizes each stage's "
                                          "pool from that stage's budget: name --device-memory (or --gpu)")
    if req.device_memory_bytes is None:
        if deployment.reserved_bytes:  # --reserved alone is bad input
            from csa_plan.planner.memory import device_budget

            device_budget(None, deployment.reserved_bytes)
        if deployment.weights_bytes is not None:
            raise BadInput("options", "--weights", "needs --device-memory to subtract from")
    spec = load_model(req.model, max_seq_len=o.max_seq_len, window=o.window, at_length=req.at_length)
    if req.engine is not None and any(d.sharing is not None for d in spec.layers) and not _models_shared_state(req.engine):
        # shared compressed state on a release whose V4.1 pool is not modelled: a typed refusal, never a V4 figure
        from csa_plan.planner.commands.shared_routing import named_release
        from csa_plan.planner.engines.registry import resolve_engine_name
        from csa_plan.planner.shared_engines import engine_refusal

        name = resolve_engine_name(req.engine)[0]  # the registry release (its Engram placement)
        refusal = engine_refusal(named_release(req.engine))  # the release named (vllm-0.30.1), not its rules
        spec = replace(spec, graph_refusals=spec.graph_refusals + (refusal,))
        req = replace(req, engine=None, engine_settings=None, kv_memory_bytes=None)  # the deployment stays
        deployment = replace(deployment, engram_engine=name)  # its Engram tables still sit where that release puts them
    if req.gate_from_spec and spec.gate is not None:
        o = replace(o, gate=Gate(spec.gate))
    plan = plan_model(spec, o)
    length = max_seq_len_of(spec, o.max_seq_len)
    settings = req.engine_settings or EngineSettings()
    from csa_plan.planner.budget.deployment import engine_settings_for

    settings = engine_settings_for(req.engine, settings, deployment)  # SGLang: --dp is its DP-attention size

    def budget_at(n_tokens: int, search: bool = False):
        return deployment_budget(req.model, req.device_memory_bytes, deployment, n_tokens, req.engine, settings,
                                 req.kv_memory_bytes, search=search, facts=None if device is None else device.facts)

    device = None
    refused_first = False
    if req.engine is not None:  # the engine's own argument and config checks before any budget (issue 47)
        from csa_plan.planner.engines.engine import EngineRefused
        from csa_plan.planner.engines.registry import get_engine

        try:
            get_engine(req.engine).configure(spec, settings, length)
        except EngineRefused as exc:  # its own argument checks: no budget from settings it will not start with
            from csa_plan.planner.engines.vllm.startup import refuses_its_arguments

            refused_first = refuses_its_arguments(exc.refusal)
    if not refused_first:
        device = budget_at(length)
    if device is not None:  # the Engram tables' host line (planner/weights/engram.py), refused when they do not fit
        from csa_plan.planner.cards import card_of
        from csa_plan.planner.weights.engram import host_line

        card = card_of(req.device_memory_bytes)
        line = host_line(device.engram, deployment.host_memory_bytes, card.name if card else settings.gpu)
        if line is not None:
            device = with_(device, host=line)
    else:  # no budget: the Engram options have nothing to move or size
        for name, value in (("--host-memory", deployment.host_memory_bytes),
                            ("--engram-config", deployment.engram_config),
                            ("--enable-dsv41-engram-host-table", deployment.engram_host_table)):
            if value is not None:
                raise BadInput("options", name, "places the Engram tables in the device budget or beside it: name a "
                                                "device (--device-memory or --gpu)")
    warnings = () if device is None else reserve_warnings(device, req.model, deployment, req.engine, settings)
    engine_result = None
    pipeline = None
    if req.engine is not None and stages > 1 and device is not None and device.fits:
        answer, engine_result, pipeline = pipeline_answer(spec, req.engine, req.concurrency, settings, length, device)
        if plan.refusals and answer.answered:
            answer = no_answer(engine_authority(req.engine), length, req.concurrency,
                               "the model is refused by the gate (see the refusals)", answer.kv_memory_bytes)
        cap = None
    elif req.engine is not None:
        if device is None and req.kv_memory_bytes is None:
            kv_at = lambda n: None  # noqa: E731
            why = ("the engine refuses this configuration (no budget is sized from it)" if refused_first else
                   "no KV memory: name --device-memory (the device budget) or --kv-memory")
        elif device is None:
            kv_at = lambda n: req.kv_memory_bytes  # noqa: E731
            why = ""
        else:
            kv_at = lambda n: (device if n == length else budget_at(n)).kv_memory_bytes  # noqa: E731
            why = "no state pool: the weights and start-up reserves do not fit"
        upper = max(d.max_seq_len for d in load_model(req.model).layers)
        answer, here = engine_answer(spec, req.engine, settings, length, req.concurrency, kv_at,
                                     max(upper, length), no_pool=why)
        engine_result = here.check
        if plan.refusals and answer.answered:  # the gate refuses layers the engine would run: no count
            answer = no_answer(engine_authority(req.engine), length, req.concurrency,
                               "the model is refused by the gate (see the refusals)", answer.kv_memory_bytes)
        cap = None
    else:
        if device is None:
            cap = None
        else:
            from csa_plan.planner.budget.check import budget_fit  # a device: the budget modules (start-up)

            _, cap = budget_fit(spec, plan, device, req.concurrency)
        answer = layout_answer(cap, length, req.concurrency, None if device is None or not device.fits
                               else device.kv_memory_bytes, o.layout,
                               None if device is None else "no state pool: the weights do not fit")

    def passes(candidate) -> bool:  # a suggested deployment passes every check
        if engine_result is not None:
            if engine_result.refusal is not None and engine_result.plan is None:
                return False
            from csa_plan.planner.budget.answer import engine_count

            return (engine_count(spec, req.engine, settings, length, candidate.kv_memory_bytes).count or 0) \
                >= req.concurrency
        if plan.refusals:
            return False
        tp = candidate.request.placement.tp
        per = plan_model(spec, replace(o, tp=tp)).per_request_per_device_bytes
        return per * req.concurrency <= candidate.kv_memory_bytes

    # "the longest context for N requests": answered when some length holds them (exit 0), though N do not
    # fit at the model's own length
    question = "length" if req.length_question and answer.fits is False and answer.longest_context else "count"
    searchable = (device is not None and deployment.weights_bytes is None and req.kv_memory_bytes is None
                  and question == "count")
    if searchable and (not device.fits or answer.fits is False) and len(device.stages) == 1:
        from csa_plan.planner.budget.device import MAX_SEARCH_TP, smallest_fitting

        max_tp = min(min(d.num_heads for d in spec.layers), MAX_SEARCH_TP)  # tp splits heads: no wider
        found = smallest_fitting(device.request, device.weights, passes, facts=device.facts, max_tp=max_tp)
        device = with_(device, smallest_fitting=found, searched=True, searched_max_tp=max_tp,
                       replicas=None if found else replicas_for(device, answer, req.concurrency))
    doc, code = check_document(plan, device, answer, engine_result, warnings, o.layout, question)
    if pipeline is not None:
        doc["pipeline"] = pipeline.as_dict()
    return CheckOutcome(doc, ExitCode(code))


def pipeline_answer(spec, engine_name: str, concurrency: int, settings, length: int, device):
    """``--engine E --pp N``: each stage's pool from its own layers and budget (``serving/pipeline.py``), the
    scheduler's pool the smallest, and the engine's admission count in it (the same ``engine_admits`` as one
    stage). No longest-context search (as the ledger's per-stage answer). An engine that refuses a stage's
    memory: its refusal, typed, no count."""
    from csa_plan.planner.budget.admission import engine_admits
    from csa_plan.planner.budget.answer import CapacityAnswer, engine_authority, no_answer
    from csa_plan.planner.budget.engine_pool import EngineCheck
    from csa_plan.planner.engines.engine import EngineRefused
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.serving.pipeline import pipeline_pools

    engine = get_engine(engine_name)
    authority = engine_authority(engine_name)
    try:
        pools = pipeline_pools(spec, engine_name, settings, length, device)
    except EngineRefused as exc:
        why = f"{engine_name} refuses this configuration ({exc.refusal.setting}; the refusal says why)"
        return (no_answer(authority, length, concurrency, why, device.kv_memory_bytes),
                EngineCheck(engine, None, None, exc.refusal, device.kv_memory_bytes), None)
    binding = pools.stages[pools.binding]
    admits = engine_admits(pools.plan, pools.sizing)
    source = (f"{admits['source']}; stage {binding.stage} binds ({pools.sizing.total_units:,} "
              f"{pools.sizing.unit_name}s: {pools.rule})")
    answer = CapacityAnswer(authority, length, concurrency, binding.kv_memory_bytes,
                            admits["units_per_request"] * binding.sizing.unit_bytes, admits["count"], None,
                            source=source)
    return answer, EngineCheck(engine, pools.plan, pools.sizing, None, binding.kv_memory_bytes), pools


def replicas_for(device, answer, concurrency: int) -> dict[str, int] | None:
    """Where no wider tp passes (each rank keeps every request's full latent state, so tp frees only
    weight memory): the data-parallel replicas of this deployment that hold ``concurrency`` requests
    of max_seq_len in all, each admitting what this one does. None when this one admits none."""
    count = answer.requests_that_fit
    if not count or count >= concurrency:
        return None
    from csa_plan.planner.units import ceil_div

    p = device.request.placement
    dp = ceil_div(concurrency, count) * p.dp
    return {"tp": p.tp, "pp": p.pp, "dp": dp, "gpus": p.tp * p.pp * dp, "per_replica": count,
            "in_all": count * (dp // p.dp)}


def _models_shared_state(engine: str) -> bool:
    """Whether that engine release's pools for shared compressed state are modelled (shared_routing decides)."""
    from csa_plan.planner.commands.shared_routing import models_shared_state

    return models_shared_state(engine)
