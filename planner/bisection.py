"""The searches for "the largest value that still passes": the longest context that fits, by the
exact layout (``capacity``) or by an engine's own admission (``budget.answer``) (``largest_passing``),
and the highest arrival-rate scale a deployment sustains, by the reservation ledger or an engine's
replay (``bisect_rate``)."""

from __future__ import annotations

import math
from typing import Callable

SCALE_MIN, SCALE_MAX = 2.0 ** -20, 2.0 ** 20  # the rate search's default range of --rate-scale


def largest_passing(ok: Callable[[int], bool], low: int, high: int) -> int | None:
    """The largest n in [low, high] with ok(n), for an ``ok`` that holds up to some n and fails after it;
    None when ok(low) fails. Calls ``ok`` about log2(high - low) times."""
    if low > high or not ok(low):
        return None
    if ok(high):
        return high
    while high - low > 1:  # invariant: ok(low), not ok(high)
        mid = (low + high) // 2
        if ok(mid):
            low = mid
        else:
            high = mid
    return low


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
