"""One bisection for "the largest value that still passes": the longest context that fits, by the
exact layout (``capacity``) or by an engine's own admission (``budget.answer``)."""

from __future__ import annotations

from typing import Callable


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
