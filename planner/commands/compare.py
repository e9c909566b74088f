"""``compare`` as a use case: one model under each layout profile, and the exit code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from csa_plan.planner.errors import ExitCode
from csa_plan.planner.model import ModelSpec
from csa_plan.planner.plan import PlanOptions


@dataclass(frozen=True)
class CompareRequest:
    model: str
    options: PlanOptions
    layouts: tuple[str, ...] = ()  # empty: every registered profile
    device_memory_bytes: int | None = None
    reserved_bytes: int = 0
    engines: tuple[str, ...] = ()  # engine models; with layouts empty too: every profile and engine
    deployment: Any = None  # planner.budget.Deployment (--tp/--pp/--dp/--ep/--weights/--reserved)


@dataclass(frozen=True, eq=False)
class CompareOutcome:
    report: dict[str, Any]
    exit_code: ExitCode
    spec: ModelSpec


def run_compare(req: CompareRequest) -> CompareOutcome:
    """Exit 3 when a layer is refused or when not even one request fits under some profile."""
    from csa_plan.planner.profiles import get_profile
    from csa_plan.planner.budget.comparison import compare
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.memory import device_budget
    from csa_plan.planner.reports.compare import comparison_report

    from csa_plan.planner.engines.registry import get_engine

    for name in req.layouts:
        get_profile(name, "options", "--layout")
    for name in req.engines:
        get_engine(name, "options", "--engine")
    from csa_plan.planner.budget.deployment import Deployment, deployment_budget
    from csa_plan.planner.budget.document import budget_document
    from csa_plan.planner.budget.engine_pool import max_seq_len_of
    from csa_plan.planner.engines.registry import ENGINES

    deployment = req.deployment or Deployment(tp=req.options.tp, reserved_bytes=req.reserved_bytes or None)
    deployment.require_one_stage("compare sizes one stage holding every layer (check --pp N gives the per-stage "
                                 "answer)")
    if req.device_memory_bytes is None:
        device_budget(None, deployment.reserved_bytes or 0)  # --reserved alone is bad input
    spec = load_model(req.model, max_seq_len=req.options.max_seq_len)
    chosen = bool(req.layouts or req.engines)
    engine_names = req.engines if chosen else tuple(ENGINES)
    length = max_seq_len_of(spec, req.options.max_seq_len)
    # each row gets its own device budget: the layout profiles the no-engine one, each engine its own
    from csa_plan.planner.budget.deployment import card_settings

    settings = card_settings(None, req.device_memory_bytes)  # the card --device-memory names is the target
    from csa_plan.planner.engines.engine import EngineRefused

    budgets, budget_refusals = {}, []
    # shared compressed state (DeepSeek-V4.1) on a release that does not model it: its row is the typed refusal,
    # named or by default, and no V4 figure is computed for it (shared_routing)
    from csa_plan.planner.commands.shared_routing import shared_state_refusal

    shared_refusals = {n: r for n in engine_names if (r := shared_state_refusal(spec, n)) is not None}
    engine_names = tuple(n for n in engine_names if n not in shared_refusals)
    for name in (None, *engine_names):
        try:
            budgets[name] = deployment_budget(req.model, req.device_memory_bytes, deployment, length, name, settings)
        except EngineRefused as exc:
            # an engine whose device budget is not modelled (vllm-0.34): named with --engine, its row is the
            # refusal; in the default rows (every engine) it is left out (docs/compare.md)
            if name is None:
                raise
            budget_refusals.append(exc.refusal)
    if budget_refusals:
        refused_names = {r.engine for r in budget_refusals}
        engine_names = tuple(n for n in engine_names if n not in refused_names)
    base = budgets[None]
    limit = None if base is None else (base.kv_memory_bytes if base.fits else 0)
    engine_limits = None if base is None else {name: (b.kv_memory_bytes if b.fits else 0)
                                               for name, b in budgets.items() if name is not None}
    if chosen or budget_refusals:
        from csa_plan.planner.profiles import PROFILES

        layouts = req.layouts if chosen else tuple(PROFILES)
        result = compare(spec, req.options, limit, layouts, engine_names, engine_limits, settings)
    else:
        result = compare(spec, req.options, limit, None, None, engine_limits, settings)
    if (budget_refusals and chosen) or shared_refusals:  # named with --engine: its row is the refusal
        from dataclasses import replace as _with

        result = _with(result, engine_refusals=result.engine_refusals + tuple(budget_refusals if chosen else ())
                       + tuple(shared_refusals.values()))
    fits = all(r.requests_that_fit != 0 for r in result.rows)
    weights_fit = base is None or all(b.fits for b in budgets.values())
    code = ExitCode.OK if result.admitted and fits and weights_fit else ExitCode.REFUSED
    from csa_plan.planner.reports.compare import compare_head

    report = comparison_report(result)
    report["exit_code"] = int(code)
    where = None
    if base is not None:
        p = base.request.placement
        where = f"tp {p.tp} pp {p.pp} dp {p.dp}: {p.device_count} GPU(s) of {base.card_bytes / (1 << 30):.2f} GiB"
    report.update(compare_head(result, report, int(code), weights_fit, where).as_dict())
    report["budget"] = None if base is None else budget_document(base)
    report["engine_budgets"] = None if base is None else {
        name: budget_document(b) for name, b in budgets.items() if name is not None}
    return CompareOutcome(report, code, spec)
