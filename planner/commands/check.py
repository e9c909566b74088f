"""``check`` as a use case: load, gate and lay out a model, size it against a device, decide the exit code."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from csa_plan.planner.errors import BadInput, ExitCode
from csa_plan.planner.gate import Gate
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
    deployment: Any = None  # planner.budget.Deployment (--tp/--pp/--dp/--ep/--weights/--reserved)
    gate_from_spec: bool = False  # no --gate given: a spec's own ``gate:`` applies


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

    from csa_plan.planner.budget.deployment import Deployment, deployment_budget
    from csa_plan.planner.engines.check import max_seq_len_of

    if req.concurrency < 1:
        raise BadInput("options", "--concurrency", "must be at least 1")
    o = req.options
    deployment = req.deployment or Deployment(tp=o.tp, reserved_bytes=req.reserved_bytes or None)
    if req.engine is not None:  # an engine's pool is sized from every layer's specs on one stage
        deployment.require_one_stage(f"--engine {req.engine} is modelled with one stage (pp 1); without "
                                     "--engine, check gives the per-stage ledger answer")
    if req.device_memory_bytes is None:
        budget = device_budget(None, deployment.reserved_bytes or 0)
        if deployment.weights_bytes is not None:
            raise BadInput("options", "--weights", "needs --device-memory to subtract from")
    spec = load_model(req.model, max_seq_len=o.max_seq_len, window=o.window, at_length=req.at_length)
    if req.gate_from_spec and spec.gate is not None:
        o = replace(o, gate=Gate(spec.gate))
    plan = plan_model(spec, o)
    device = deployment_budget(req.model, req.device_memory_bytes, deployment, max_seq_len_of(spec, o.max_seq_len),
                               req.engine, req.engine_settings, req.kv_memory_bytes)
    if device is None:
        cap = capacity(spec, plan, budget.limit_bytes, req.concurrency) if budget else None
    else:
        from csa_plan.planner.budget.check import budget_fit

        budget, cap = budget_fit(spec, plan, device, req.concurrency)
    code = ExitCode.OK if verdict(plan, cap) == Verdict.ADMITTED else ExitCode.REFUSED
    if device is not None and not device.fits:
        code = ExitCode.REFUSED
    if req.engine is None:
        return CheckOutcome(_with_budget(check_report(plan, budget, cap, code), device, cap), code)
    from csa_plan.planner.engines.check import engine_check
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.reports.engine import engine_report

    kv_memory = req.kv_memory_bytes if device is None else (device.kv_memory_bytes if device.fits else None)
    result = engine_check(spec, req.engine, req.engine_settings or EngineSettings(), o.max_seq_len, kv_memory)
    code = ExitCode.OK if result.admitted else ExitCode.REFUSED  # the engine decides
    if device is not None and not device.fits:
        code = ExitCode.REFUSED  # the weights do not fit: no pool to admit into
    report = _with_budget(check_report(plan, budget, cap, code), device, cap, result)
    report["verdict"] = Verdict.ADMITTED if code == ExitCode.OK else (
        Verdict.DOES_NOT_FIT if device is not None and not device.fits else Verdict.REFUSED)
    report["engine"] = engine_report(result.engine, result.plan, result.sizing, result.refusal, result.kv_memory_bytes)
    return CheckOutcome(report, code)


def _with_budget(report: dict[str, Any], device: Any, cap: Any, engine: Any = None) -> dict[str, Any]:
    """Add the device budget (``budget`` key, None without a device) to a check document, with the
    requests of max_seq_len that its state pool admits (the engine's admission, else the ledger's)."""
    if device is None:
        report["budget"] = None
        return report
    from csa_plan.planner.budget.admission import requests_that_fit
    from csa_plan.planner.budget.document import budget_document

    report["budget"] = budget_document(device)
    report["budget"]["requests_that_fit"] = requests_that_fit(device, cap, engine)
    if not device.fits:
        report["verdict"] = "does_not_fit"
    return report
