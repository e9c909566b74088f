"""Capacity search: the largest arrival-rate scale a deployment sustains (bisection)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from csa_plan.planner.errors import BadInput
from csa_plan.planner.simulate.fast import SimResult, simulate
from csa_plan.planner.simulate.scenario import Outcome, Scenario

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


SCALE_MIN, SCALE_MAX = 2.0 ** -20, 2.0 ** 20
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


def bisect_rate(good: Callable[[float], bool], start: float, floor: float, scale_max: float,
                rel_tol: float) -> tuple[float | None, bool]:
    """The one rate search (the reservation simulator's and the engine runtimes'): from ``start``,
    double while ``good`` (up to ``scale_max``: capped, "at least") or halve while not (down to
    ``floor``, probed itself before answering None), then bisect geometrically to ``rel_tol``.
    Returns the largest good scale found and whether the search hit its ceiling."""
    scale = start
    if good(scale):
        lo = scale
        hi = scale * 2
        while hi <= scale_max and good(hi):
            lo, hi = hi, hi * 2
        if hi > scale_max:
            return lo, True
    else:
        hi = scale
        lo = scale / 2
        while lo >= floor and not good(lo):
            hi, lo = lo, lo / 2
        if lo < floor:  # the floor itself is the last probe: an answer there, or none at any rate
            if not (floor < hi and good(floor)):
                return None, False
            lo = floor
    while hi / lo > 1 + rel_tol:
        mid = math.sqrt(lo * hi)
        if good(mid):
            lo = mid
        else:
            hi = mid
    return lo, False
