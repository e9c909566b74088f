"""Replay a workload through device memory: admission, refusal, queueing, residency.

Two implementations share ``Scenario`` and must agree exactly (tests prove it): the fast
path (``fast.simulate``) decides with integer per-stage totals and derives observables
with numpy; ``replay.replay`` charges a real ``Ledger`` event by event. ``capacity``
bisects the arrival-rate scale, ``series`` draws residency over time, ``settings``
resolves option precedence, ``placement`` maps requests to replicas and stages.
"""

from csa_plan.planner.reserve.fast import DevicePeak, SimResult, decide, nearest_rank, observe, simulate
from csa_plan.planner.reserve.decisions import Decisions
from csa_plan.planner.reserve.scenario import (REASONS, TOKEN_CLIP, Outcome, Policy, Reserve, Scenario, SimConfig,
                                              TimeModel, prepare, reserved_tokens)

__all__ = ["Decisions", "DevicePeak", "Outcome", "Policy", "REASONS", "Reserve", "Scenario",
           "SimConfig", "SimResult", "TOKEN_CLIP", "TimeModel", "decide", "nearest_rank", "observe", "prepare",
           "reserved_tokens", "simulate"]
