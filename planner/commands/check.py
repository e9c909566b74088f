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
    if req.engine is not None:  # an engine's pool is sized from every layer's specs on one stage
        deployment.require_one_stage(f"--engine {req.engine} is modelled with one stage (pp 1); without "
                                     "--engine, check gives the per-stage ledger answer")
    if req.device_memory_bytes is None:
        if deployment.reserved_bytes:  # --reserved alone is bad input
            from csa_plan.planner.memory import device_budget

            device_budget(None, deployment.reserved_bytes)
        if deployment.weights_bytes is not None:
            raise BadInput("options", "--weights", "needs --device-memory to subtract from")
    spec = load_model(req.model, max_seq_len=o.max_seq_len, window=o.window, at_length=req.at_length)
    if req.engine is not None and any(d.sharing is not None for d in spec.layers) and not _models_shared_state(req.engine):
        # shared compressed state on a release whose V4.1 pool is not modelled: a typed refusal, never a V4 figure
        from csa_plan.planner.engines.registry import resolve_engine_name
        from csa_plan.planner.shared_engines import engine_refusal

        name = resolve_engine_name(req.engine)[0]
        refusal = engine_refusal(name)
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
    if req.engine is not None:
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
    return CheckOutcome(doc, ExitCode(code))


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
    """Whether that engine release's pools for shared compressed state are modelled (an unknown name is bad input)."""
    from csa_plan.planner.engines.registry import get_engine, resolve_engine_name

    return get_engine(resolve_engine_name(engine)[0]).models_shared_state
