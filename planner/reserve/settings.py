"""Which run a ``simulate`` invocation describes: the command line over the mix spec over
the defaults, field by field, then checked into a ``SimConfig``.

Kept out of the CLI so the same precedence serves every caller (and is testable alone).
"""

from __future__ import annotations

from dataclasses import fields
from enum import Enum

from csa_plan.planner.errors import BadInput
from csa_plan.planner.memory import DeviceBudget, device_budget
from csa_plan.planner.placement import Placement, Router
from csa_plan.planner.replay.draft_acceptance import DEFAULT_RATE
from csa_plan.planner.steptime.model import StepSource
from csa_plan.planner.reserve.scenario import DEFAULT_BUCKET, Policy, Reserve, SimConfig, TimeModel
from csa_plan.planner.workloads.workload import MixSettings

DEFAULTS = MixSettings(layout="exact", tp=1, pp=1, dp=1, router=Router.ROUND_ROBIN.value, reserved_bytes=0,
                       reserve=Reserve.MAX.value, bucket=DEFAULT_BUCKET, policy=Policy.REFUSE.value,
                       prefill_tok_s=TimeModel.prefill_tok_s, tpot_ms=TimeModel.tpot_ms,
                       rate_scale=TimeModel.rate_scale)


def merge(command_line: MixSettings, mix: MixSettings, mix_source: str = "the mix") -> MixSettings:
    """Each field from the first of: the command line, the mix spec, the default. The step-time source
    not named: ``fixed`` where ``tpot_ms`` or ``prefill_tok_s`` is given (those are its constants),
    else ``physics``."""
    chosen = {}
    for f in fields(MixSettings):
        values = (getattr(command_line, f.name), getattr(mix, f.name), getattr(DEFAULTS, f.name))
        chosen[f.name] = next((v for v in values if v is not None), None)
    for s, where, names in ((command_line, "options", ("--step-time", "--tpot-ms and --prefill-tok-s")),
                            (mix, mix_source, ("time.step_time", "time.tpot_ms and time.prefill_tok_s"))):
        if s.step_time in (StepSource.PHYSICS.value, StepSource.MEASURED.value) and \
                (s.tpot_ms is not None or s.prefill_tok_s is not None):
            raise BadInput(where, names[0], f"{names[1]} are the constants of {names[0]} fixed, not of "
                                            f"{s.step_time}")
    if chosen["step_time"] is None:
        fixed = any(getattr(s, k) is not None for s in (command_line, mix) for k in ("tpot_ms", "prefill_tok_s"))
        chosen["step_time"] = StepSource.FIXED.value if fixed else StepSource.PHYSICS.value
    return MixSettings(**chosen)


def _member(enum: type[Enum], value: str, source: str, field: str) -> Enum:
    try:
        return enum(value)
    except ValueError:
        from csa_plan.planner.suggest import unknown_problem

        raise BadInput(source, field, unknown_problem("value", value, [m.value for m in enum])) from None


def sim_config(s: MixSettings, source: str) -> tuple[SimConfig, DeviceBudget | None]:
    """The checked configuration and the per-device budget (None: unlimited)."""
    budget = device_budget(s.device_memory_bytes, s.reserved_bytes or 0)
    placement = Placement(tp=s.tp, pp=s.pp, dp=s.dp, router=_member(Router, s.router, source, "deployment.router"),
                          ep=s.ep)
    step_time = _member(StepSource, s.step_time or StepSource.FIXED.value, source, "--step-time").value
    if s.max_concurrency is not None and s.max_concurrency < 1:
        raise BadInput(source, "--max-concurrency", f"must be at least 1, got {s.max_concurrency}")
    acceptance = DEFAULT_RATE if s.spec_acceptance is None else s.spec_acceptance
    if not (0 < acceptance <= 1):
        from csa_plan.planner.values import shown_against
        raise BadInput(source, "--spec-acceptance", f"must be in (0, 1], got {shown_against(acceptance, 0, 1)}")
    time = TimeModel(prefill_tok_s=s.prefill_tok_s, tpot_ms=s.tpot_ms, rate_scale=s.rate_scale, step_time=step_time,
                     max_concurrency=s.max_concurrency, spec_acceptance=acceptance)
    config = SimConfig(placement=placement, limit_bytes=budget.limit_bytes if budget else 0,
                       reserve=_member(Reserve, s.reserve, source, "reserve"), bucket=s.bucket,
                       policy=_member(Policy, s.policy, source, "policy"), time=time, layout=s.layout,
                       max_seq_len=s.max_seq_len)
    return config, budget
