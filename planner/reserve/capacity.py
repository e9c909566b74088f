"""Capacity search: the largest arrival-rate scale a deployment sustains (bisection)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from csa_plan.planner.bisection import SCALE_MAX, SCALE_MIN, bisect_rate
from csa_plan.planner.errors import BadInput
from csa_plan.planner.reserve.fast import SimResult, simulate
from csa_plan.planner.reserve.scenario import Outcome, Scenario

if TYPE_CHECKING:
    from csa_plan.planner.steady import Judgement

@dataclass(frozen=True)
class RateCapacity:
    """The largest rate scale that meets the criterion, or None when even the slowest fails."""

    rate_scale: float | None
    result: SimResult | None
    probes: tuple[tuple[float, bool], ...]
    capped: bool  # the search hit its upper bound: capacity is at least rate_scale
    floor: float = 0.0  # the slowest scale the search could probe
    floor_reason: str = ""  # why it stops there: the search's own bound or the int64 clock
    judgement: "Judgement | None" = None  # the steady-state verdict at rate_scale (planner/steady.py)
    copies: int = 1  # the trace's copies the answer's run replayed (result is that run)
    too_short: str | None = None  # no rate could be judged: the trace is too short to say
    undetermined_above: float | None = None  # the search's next probe above rate_scale could not be judged

    def steady_dict(self) -> dict:
        from csa_plan.planner.steady import EXTENSION

        return {"steady": None if self.judgement is None else self.judgement.as_dict(), "too_short": self.too_short,
                "undetermined_above": self.undetermined_above, "copies": self.copies, "extension": EXTENSION}


@dataclass(frozen=True)
class LedgerProbe:
    ok: bool | None  # None: the trace, extended as far as it may be, is too short to say
    judgement: "Judgement"
    copies: int
    result: SimResult | None = None


def steady_ledger_probe(scn: Scenario, scale: float, max_wait_ns: int | None) -> LedgerProbe:
    """The reservation ledger's run at ``scale`` judged as ``planner/steady.py`` says (as the engine
    replays are, ``serving/serve.py`` ``steady_probe``): no OutOfMemory or running-cap refusal, a
    steady window of many request lifetimes (the trace repeated while too short), and the wait
    p99 of the window's requests within ``max_wait_ns``. Requests refused up front (too long,
    never fit) do not depend on the rate and are left out."""
    import numpy as np

    from dataclasses import replace

    from csa_plan.planner.reserve.fast import nearest_rank
    from csa_plan.planner.steady import (BOUND, MAX_EXTENSION_ROUNDS, REFUSED, copies_needed, extension_cap, judge,
                                         max_copies)

    n = scn.requests
    base = base_arrivals = scn.base_arrival_ns
    span = int(base[-1] - base[0]) / scale if n else 0
    copies = 2  # the balance compares a copy of the trace with the one before
    for _ in range(MAX_EXTENSION_ROUNDS):
        run = scn.repeated(copies, scale)
        result = simulate(run)
        oom = result.refusal_count(Outcome.OUT_OF_MEMORY) + result.refusal_count(Outcome.RUNNING_CAP)
        d = result.decisions
        mine = np.asarray(run.upfront) == Outcome.ADMITTED.value  # not refused up front
        admitted = np.asarray(d.outcome) == Outcome.ADMITTED.value
        admit = np.asarray(d.admit_ns, dtype=np.int64)
        finished = np.where(admitted, admit + np.asarray(run.hold_ns, dtype=np.int64), -1)
        arrival = np.asarray(run.arrival_ns, dtype=np.int64)
        j = judge(arrival[mine], finished[mine], copies, (admit - arrival)[mine])  # the wait: holds are the trace's
        if oom:
            return LedgerProbe(False, replace(j, steady=False, reason=REFUSED, detail=f"{oom:,} refused for memory"),
                               copies)
        if j.steady is False:
            return LedgerProbe(False, j, copies)
        if j.steady:
            inside = mine & admitted & (arrival > j.window_start_ns) & (arrival <= j.window_end_ns)
            waits = np.sort(admit[inside] - arrival[inside])
            wait = nearest_rank(waits, 99) if len(waits) else None
            if max_wait_ns is not None and wait is not None and wait > max_wait_ns:
                return LedgerProbe(False, replace(j, steady=False, reason=BOUND,
                                                  detail=f"wait p99 {wait / 1e9:.3f} s > {max_wait_ns / 1e9:g} s"),
                                   copies)
            return LedgerProbe(True, j, copies, result)
        need = copies_needed(int(span), n, j.lifetime_ns, copies)
        if need == 0 or need * n > extension_cap(n) or need > max_copies(base_arrivals, scale):
            return LedgerProbe(None, j, copies)
        copies = need
    return LedgerProbe(None, j, copies)


CLOCK_FLOOR = ("the slowest rate whose arrival times fit the int64 nanosecond clock (~73 years), for the two copies "
               "of the trace a steady probe replays")
SEARCH_FLOOR = "the search's lower bound (min_scale)"


KEEP_RESULTS_BELOW = 1_000_000
"""Below this many requests the best probe's result is kept for the answer; from it on only its
scale is, and the answer is that probe run once more (one run's arrays in memory at a time)."""


def _two_copy_floor(scn: Scenario) -> float:
    """The slowest rate scale whose arrivals the int64 clock holds for two copies of the trace (the
    fewest a steady probe replays, ``planner/steady.py``): ``Scenario.min_rate_scale``'s rule."""
    import math

    from csa_plan.planner.clock import MAX_SIM_NS
    from csa_plan.planner.steady import last_arrival

    last = float(last_arrival(scn.base_arrival_ns, 2)) if scn.requests else 0.0
    if last <= 0:
        return 0.0
    floor = last / MAX_SIM_NS
    while not last / floor <= MAX_SIM_NS:
        floor = math.nextafter(floor, math.inf)
    return floor


def find_capacity(scn: Scenario, max_wait_ns: int | None = None, rel_tol: float = 1e-3,
                  progress: Callable[[int, float], None] | None = None, *,
                  scale_min: float = SCALE_MIN, scale_max: float = SCALE_MAX) -> RateCapacity:
    """Bisection on --rate-scale for the largest rate sustained in steady state
    (``steady_ledger_probe``): zero memory refusals, and wait p99 <= max_wait when given, on a
    window of many request lifetimes with arrivals and completions balanced.

    Requests refused up front (too long, never fit) do not depend on the rate, so
    they are left out of the criterion (and reported). The search never leaves
    [floor, scale_max], the floor being scale_min or, when higher, the slowest scale the
    int64 nanosecond clock can represent for this trace (``Scenario.min_rate_scale``): it
    probes the floor itself before answering None, and states which floor it was. Hitting
    scale_max is reported as "at least". A probe the trace is too short to judge counts as not
    sustained; when none is sustained and some could not be judged, the answer is
    ``too_short``, never a number.
    """
    from csa_plan.planner.limits import MIN_REL_TOL
    from csa_plan.planner.steady import MAX_STEADY_REQUESTS

    if not 0 < scale_min < scale_max:
        from csa_plan.planner.values import shown_against
        raise BadInput("options", "rate-scale bounds", f"need 0 < min < max, got {shown_against(scale_min, scale_max, 0)} and {shown_against(scale_max, scale_min)}")
    if not MIN_REL_TOL <= rel_tol <= 1.0:  # below it, 1 + rel_tol may round to 1 and the bisection never ends
        raise BadInput("options", "rel_tol", f"must be between {MIN_REL_TOL:g} and 1 (MIN_REL_TOL), got {rel_tol!r}")
    clock = _two_copy_floor(scn)
    floor, reason = (clock, CLOCK_FLOOR) if clock > scale_min else (scale_min, SEARCH_FLOOR)
    probes: list[tuple[float, bool]] = []
    best: dict[float, LedgerProbe] = {}
    seen: dict[float, LedgerProbe] = {}

    def good(scale: float) -> bool:
        probe = steady_ledger_probe(scn, scale, max_wait_ns)
        ok = bool(probe.ok)
        probes.append((scale, ok))
        seen[scale] = LedgerProbe(probe.ok, probe.judgement, probe.copies)  # without its result (memory)
        if ok:  # the latest good probe is always the search's lower end: only its result is kept
            best.clear()
            best[scale] = probe if probe.copies * scn.requests < KEEP_RESULTS_BELOW else seen[scale]
        del probe
        if progress:
            progress(len(probes), scale)
        return ok

    lo, capped = bisect_rate(good, scn.config.time.rate_scale, floor, scale_max, rel_tol)
    if lo is None:
        unknown = [(s, p) for s, p in seen.items() if p.ok is None]
        short = None
        if unknown:
            s, p = unknown[-1]
            short = (f"trace too short to say: at x{s:.4g} its arrivals, extended to at most {MAX_STEADY_REQUESTS:,} "
                     f"requests, span {p.judgement.window_lifetimes:.1f} request lifetimes of "
                     f"{p.judgement.lifetime_ns / 1e9:.3g} s after the warm-up")
        return RateCapacity(None, None, tuple(probes), False, floor, reason, too_short=short)
    probe = best[lo]
    result = probe.result if probe.result is not None else simulate(scn.repeated(probe.copies, lo))
    above = sorted(s for s in seen if s > lo)
    undetermined = above[0] if above and seen[above[0]].ok is None else None
    return RateCapacity(lo, result, tuple(probes), capped, floor, reason, probe.judgement, probe.copies, None,
                        undetermined)
