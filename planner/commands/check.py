"""``check`` as a use case: load, gate and lay out a model, size it against a device, decide the exit code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from csa_plan.planner.errors import BadInput, ExitCode
from csa_plan.planner.loaders.model_files import DEFAULT_LINT_LENGTH
from csa_plan.planner.plan import PlanOptions


@dataclass(frozen=True)
class CheckRequest:
    model: str
    options: PlanOptions
    device_memory_bytes: int | None = None
    reserved_bytes: int = 0
    concurrency: int = 1
    at_length: int = DEFAULT_LINT_LENGTH
    engine: str | None = None  # an engine model's name: the engine decides the verdict (planner/engines)
    engine_settings: Any = None  # EngineSettings
    kv_memory_bytes: int | None = None  # the engine's KV memory per device


@dataclass(frozen=True, eq=False)
class CheckOutcome:
    report: dict[str, Any]
    exit_code: ExitCode


def run_check(req: CheckRequest) -> CheckOutcome:
    from csa_plan.planner.capacity import capacity
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.memory import device_budget
    from csa_plan.planner.plan import plan_model
    from csa_plan.planner.reports.check import Verdict, check_report, verdict

    if req.concurrency < 1:
        raise BadInput("options", "--concurrency", "must be at least 1")
    budget = device_budget(req.device_memory_bytes, req.reserved_bytes)
    o = req.options
    spec = load_model(req.model, max_seq_len=o.max_seq_len, window=o.window, at_length=req.at_length)
    plan = plan_model(spec, o)
    cap = capacity(spec, plan, budget.limit_bytes, req.concurrency) if budget and plan.per_request_per_device_bytes \
        else None
    code = ExitCode.OK if verdict(plan, cap) == Verdict.ADMITTED else ExitCode.REFUSED
    if req.engine is None:
        return CheckOutcome(check_report(plan, budget, cap, code), code)
    from csa_plan.planner.engines.check import engine_check
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.reports.engine import engine_report

    result = engine_check(spec, req.engine, req.engine_settings or EngineSettings(), o.max_seq_len, req.kv_memory_bytes)
    code = ExitCode.OK if result.admitted else ExitCode.REFUSED  # the engine decides
    report = check_report(plan, budget, cap, code)
    report["verdict"] = Verdict.ADMITTED if result.admitted else Verdict.REFUSED
    report["engine"] = engine_report(result.engine, result.plan, result.sizing, result.refusal, result.kv_memory_bytes)
    return CheckOutcome(report, code)
