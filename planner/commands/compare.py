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


@dataclass(frozen=True, eq=False)
class CompareOutcome:
    report: dict[str, Any]
    exit_code: ExitCode
    spec: ModelSpec


def run_compare(req: CompareRequest) -> CompareOutcome:
    """Exit 3 when a layer is refused or when not even one request fits under some profile."""
    from csa_plan.planner.engines import get_profile
    from csa_plan.planner.engines.compare import compare
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.memory import device_budget
    from csa_plan.planner.reports.compare import comparison_report

    from csa_plan.planner.engines.registry import get_engine

    for name in req.layouts:
        get_profile(name, "options", "--layout")
    for name in req.engines:
        get_engine(name, "options", "--engine")
    budget = device_budget(req.device_memory_bytes, req.reserved_bytes)
    spec = load_model(req.model, max_seq_len=req.options.max_seq_len)
    chosen = bool(req.layouts or req.engines)
    result = compare(spec, req.options, budget.limit_bytes if budget else None,
                     req.layouts if chosen else None, req.engines if chosen else None)
    fits = all(r.requests_that_fit != 0 for r in result.rows)
    code = ExitCode.OK if result.admitted and fits else ExitCode.REFUSED
    report = comparison_report(result)
    report["exit_code"] = int(code)
    return CompareOutcome(report, code, spec)
