"""Capacity search: the largest arrival-rate scale a deployment sustains (bisection)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from csa_plan.planner.bisection import SCALE_MAX, SCALE_MIN, bisect_rate
from csa_plan.planner.errors import BadInput
from csa_plan.planner.reserve.fast import SimResult, simulate
from csa_plan.planner.reserve.scenario import Outcome, Scenario

@dataclass(frozen=True)
class RateCapacity:
    """The largest rate scale that meets the criterion, or None when even the slowest fails."""

    rate_scale: float | None
    result: SimResult | None
    probes: tuple[tuple[float, bool], ...]
    capped: bool  # the search hit its upper bound: capacity is at least rate_scale
    floor: float = 0.0  # the slowest scale the search could probe
    floor_reason: str = ""  # why it stops there: the search's own bound or the int64 clock


CLOCK_FLOOR = "the slowest rate whose arrival times fit the int64 nanosecond clock (~73 years)"
SEARCH_FLOOR = "the search's lower bound (min_scale)"


KEEP_RESULTS_BELOW = 1_000_000
"""Below this many requests the best probe's result is kept for the answer; from it on only its
scale is, and the answer is that probe run once more (one run's arrays in memory at a time)."""


def find_capacity(scn: Scenario, max_wait_ns: int | None = None, rel_tol: float = 1e-3,
                  progress: Callable[[int, float], None] | None = None, *,
                  scale_min: float = SCALE_MIN, scale_max: float = SCALE_MAX) -> RateCapacity:
    """Bisection on --rate-scale: zero memory refusals, and wait p99 <= max_wait when given.

    Requests refused up front (too long, never fit) do not depend on the rate, so
    they are left out of the criterion (and reported). The search never leaves
    [floor, scale_max], the floor being scale_min or, when higher, the slowest scale the
    int64 nanosecond clock can represent for this trace (``Scenario.min_rate_scale``): it
    probes the floor itself before answering None, and states which floor it was. Hitting
    scale_max is reported as "at least".
    """
    from csa_plan.planner.limits import MIN_REL_TOL

    if not 0 < scale_min < scale_max:
        from csa_plan.planner.values import shown_against
        raise BadInput("options", "rate-scale bounds", f"need 0 < min < max, got {shown_against(scale_min, scale_max, 0)} and {shown_against(scale_max, scale_min)}")
    if not MIN_REL_TOL <= rel_tol <= 1.0:  # below it, 1 + rel_tol may round to 1 and the bisection never ends
        raise BadInput("options", "rel_tol", f"must be between {MIN_REL_TOL:g} and 1 (MIN_REL_TOL), got {rel_tol!r}")
    clock = scn.min_rate_scale
    floor, reason = (clock, CLOCK_FLOOR) if clock > scale_min else (scale_min, SEARCH_FLOOR)
    probes: list[tuple[float, bool]] = []
    results: dict[float, SimResult] = {}
    keep = scn.requests < KEEP_RESULTS_BELOW

    def answer(scale: float) -> SimResult:
        return results[scale] if scale in results else simulate(scn.with_rate_scale(scale))

    def good(scale: float) -> bool:
        result = simulate(scn.with_rate_scale(scale))
        ok = result.refusal_count(Outcome.OUT_OF_MEMORY) == 0 and result.refusal_count(Outcome.RUNNING_CAP) == 0 and (
            max_wait_ns is None or result.wait_p99_ns is None or result.wait_p99_ns <= max_wait_ns)
        probes.append((scale, ok))
        if ok:  # the latest good probe is always the search's lower end: only its result is kept
            results.clear()
            if keep:
                results[scale] = result
        del result
        if progress:
            progress(len(probes), scale)
        return ok

    lo, capped = bisect_rate(good, scn.config.time.rate_scale, floor, scale_max, rel_tol)
    if lo is None:
        return RateCapacity(None, None, tuple(probes), False, floor, reason)
    return RateCapacity(lo, answer(lo), tuple(probes), capped, floor, reason)
