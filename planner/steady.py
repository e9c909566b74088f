"""Sustainable means steady: the one judgement of a rate probe, shared by the engine replays
(``serving/serve.py``) and the reservation ledger (``reserve/capacity.py``).

A finite trace replayed at a high rate scale ends before a queue can grow: every request arrives
in a few seconds, runs at once and drains, and no wait bound binds. So a probed rate counts as
sustained only when the run was long enough to be a steady state and the queue did not grow:

* **the window**: the requests that arrive after a warm-up (``WARMUP_LIFETIMES`` times the p90
  of the lifetimes: the system fills from empty), up to the last arrival; it must span at least
  ``WINDOW_LIFETIMES`` lifetimes (the lifetime: the median time from arrival to the last token,
  measured in this very run);
* **balanced**: the run holds at least two copies of the trace (``EXTENSION``), and the same
  requests take no longer in a copy than in the one before: the median, over every request and
  its copy one period earlier both inside the window, of the difference in their lifetime (the part of it load moves: ``judge``'s ``delay_ns``) is at most
  ``BALANCE_TOLERANCE`` of a copy's period (plus twice the differences' interquartile range over
  the square root of their count, the sampling noise). When arrivals outpace completions by a
  share g, the queue grows and a request arriving a period later waits about g x the period longer;
  comparing a request with itself leaves out the trace's own bursts and request sizes. A
  difference that large over a whole window is a queue that grows: not sustained (over a shorter
  one it may still be the system filling toward a fuller steady state: the trace is extended,
  unless it is half a period or more, ``GROSS_GROWTH``);
* **the bounds** (refusals, queue wait, TTFT, TPOT) are checked on the window's requests, not on a
  burst draining.

Every probe replays at least two copies; a trace whose arrivals at the probed rate span too few lifetimes is extended further by ``EXTENSION``
(``workloads/extend.py``), up to ``MAX_STEADY_REQUESTS`` requests; past that the probe is
*undetermined* and the search says so ("trace too short to say") rather than give a number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

WINDOW_LIFETIMES = 5  # the measured window spans at least this many request lifetimes
WARMUP_LIFETIMES = 1  # left out before the window, in p90 lifetimes: the system fills from empty
GROSS_GROWTH = 0.5  # over even a short window (one lifetime): arrivals outpacing completions by half are a queue
BALANCE_TOLERANCE = 0.05  # a request may take at most this share of a copy's period longer in the next copy (+ noise)
MAX_STEADY_REQUESTS = 50_000  # the longest extended trace one probe replays (docs/limits-and-security.md)
MAX_EXTENSION_ROUNDS = 5  # replays of one probe while its window is found too short
EXTENSION = ("the trace repeated end to end with fresh request ids (each copy shifted by the trace's span plus "
             "one mean arrival gap; prefix-block ids renumbered, so no copy hits another's prefix cache)")

RULE = (f"steady: a window of at least {WINDOW_LIFETIMES} median request lifetimes after a warm-up of the p90 "
        f"lifetime, the same requests taking at most {BALANCE_TOLERANCE:.0%} of a copy's period longer in each copy "
        f"of the trace than in the one before; the trace repeated with fresh ids, twice or more while the window is "
        f"too short, up to {MAX_STEADY_REQUESTS:,} requests")
"""The rule in one line: sweep contexts carry it, so a resume file written under another rule is refused."""

STEADY = "steady"
GROWS = "queue grows"
SHORT = "window too short"
REFUSED = "refused"
BOUND = "bound broken"


@dataclass(frozen=True)
class Judgement:
    """One probe's run judged: its verdict (``steady`` None: the run could not say), the window
    (arrivals from ``window_start_ns`` to ``window_end_ns``) and what was measured on it."""

    steady: bool | None
    reason: str  # STEADY, GROWS, SHORT, REFUSED or BOUND (with a detail)
    lifetime_ns: int  # the median arrival-to-finish time of the run's served requests
    window_start_ns: int
    window_end_ns: int
    window_lifetimes: float  # the window's span over the lifetime
    arrived: int  # pairs compared: a request after the warm-up and its next copy before the drain
    completed: int  # of them, served in the later copy
    growth_ns: int  # the median, over the pairs, of a request's lifetime in a copy minus in the one before
    requests: int  # the run's requests (the extended trace)
    copies: int = 1  # the trace's copies the run replayed
    detail: str = ""

    @property
    def in_window(self) -> tuple[int, int]:
        return self.window_start_ns, self.window_end_ns

    def as_dict(self) -> dict[str, Any]:
        return {"steady": self.steady, "reason": self.reason, "detail": self.detail,
                "lifetime_s": self.lifetime_ns / 1e9, "window_s": [self.window_start_ns / 1e9, self.window_end_ns / 1e9],
                "window_lifetimes": round(self.window_lifetimes, 3), "arrived": self.arrived,
                "completed": self.completed, "lifetime_growth_s": self.growth_ns / 1e9, "requests": self.requests,
                "copies": self.copies}

    def line(self) -> str:
        """One line for the text reports."""
        return (f"{self.reason}{': ' + self.detail if self.detail else ''} — window {self.window_lifetimes:.1f} "
                f"lifetimes of {self.lifetime_ns / 1e9:.3g} s ({self.arrived:,} requests against their copies, "
                f"{self.growth_ns / 1e9:+.3g} s copy to copy; {self.requests:,} requests, {self.copies} "
                f"cop{'y' if self.copies == 1 else 'ies'} of the trace)")


def judge(arrival_ns: Any, finished_ns: Any, copies: int = 1, delay_ns: Any = None) -> Judgement:
    """The steady-state verdict of one run from its per-request arrival and finish times (ns,
    finish -1: never served), the run being ``copies`` copies of a trace in order (``EXTENSION``):
    None while there are fewer than two copies or the window is shorter than ``WINDOW_LIFETIMES``,
    else True when the last copy's requests take no longer than the same requests of the copy
    before and False when they do (a growing queue). ``delay_ns`` (per request) is what is compared
    instead of the lifetime: the part of it load moves (the ledger's wait; an engine's lifetime at
    the trace's mean request size)."""
    import numpy as np

    arrival = np.asarray(arrival_ns, dtype=np.int64)
    finished = np.asarray(finished_ns, dtype=np.int64)
    n = len(arrival)
    served = finished >= 0
    if n == 0 or not served.any():
        return Judgement(None, SHORT, 0, 0, 0, 0.0, 0, 0, 0, n, copies, "nothing served")
    lives = finished[served] - arrival[served]
    life = max(int(np.median(lives)), 1)
    warm = max(int(np.quantile(lives, 0.9)), life)
    t0, t_end = int(arrival.min()), int(arrival.max())
    start = t0 + WARMUP_LIFETIMES * warm
    lifetimes = max((t_end - start) / life, 0.0)
    if copies < 2:
        return Judgement(None, SHORT, life, start, t_end, lifetimes, 0, 0, 0, n, copies,
                         "one copy: the balance compares a copy of the trace with the one before")
    per = n // copies
    big = np.iinfo(np.int64).max
    delay = np.where(served, finished - arrival if delay_ns is None else np.asarray(delay_ns, dtype=np.int64), big)
    # each request against itself one copy earlier, every such pair inside the window: the earlier after the
    # warm-up, the later before the drain (the last lifetime sees no later arrivals: it would read as a
    # queue shrinking)
    cur, prev = np.arange(per, per * copies), np.arange(0, per * (copies - 1))
    rows = (arrival[prev] > start) & (arrival[cur] <= t_end - warm)
    period = int(arrival[per] - arrival[0])
    arrived = int(rows.sum())
    completed = int((served[cur] & rows).sum())
    if t_end <= start or arrived == 0:
        return Judgement(None, SHORT, life, start, t_end, lifetimes, 0, 0, 0, n, copies,
                         f"the arrivals span {(t_end - t0) / 1e9:.3g} s: no request and its copy fall between the "
                         f"warm-up and the drain (each the p90 lifetime, {warm / 1e9:.3g} s)")
    a, b = delay[cur][rows], delay[prev][rows]
    both = (a < big) & (b < big)
    diff = (a[both] - b[both]) if both.any() else np.zeros(1, dtype=np.int64)
    unserved = int((~both).sum())
    growth = int(np.median(diff)) if unserved * 2 < len(a) else big // 2
    spread = float(np.quantile(diff, 0.75) - np.quantile(diff, 0.25)) if len(diff) > 1 else 0.0
    slack = BALANCE_TOLERANCE * period + 2 * spread / math.sqrt(max(arrived, 1))
    balanced = growth <= slack
    args = (life, start, t_end, lifetimes, arrived, completed, growth, n, copies)
    grows = (f"the same requests take {growth / 1e9:.3g} s longer in each copy of the trace than in the one "
             f"before ({period / 1e9:.3g} s earlier)")
    if not balanced and lifetimes >= 1 and growth > GROSS_GROWTH * period:
        return Judgement(False, GROWS, *args, detail=grows)
    if lifetimes < WINDOW_LIFETIMES:
        return Judgement(None, SHORT, *args, detail=f"under {WINDOW_LIFETIMES} lifetimes")
    if not balanced:
        return Judgement(False, GROWS, *args, detail=grows)
    return Judgement(True, STEADY, *args)


def repeat_arrivals(arrival_ns: Any, copies: int) -> Any:
    """``EXTENSION``'s arrivals: copy k shifted by k x (the span plus one mean gap), int64."""
    import numpy as np

    base = np.asarray(arrival_ns, dtype=np.int64)
    period = copy_period(base)
    return np.tile(base, copies) + np.repeat(np.arange(copies, dtype=np.int64) * period, len(base))


def copy_period(arrival_ns: Any) -> int:
    """``EXTENSION``'s shift between copies: the trace's span plus one mean gap."""
    n = len(arrival_ns)
    span = int(arrival_ns[-1] - arrival_ns[0]) if n else 0
    return span + (span // (n - 1) if n > 1 else 0)


def last_arrival(arrival_ns: Any, copies: int) -> int:
    """The latest arrival of ``copies`` copies (before any rate scale)."""
    return int(arrival_ns[-1]) + (copies - 1) * copy_period(arrival_ns) if len(arrival_ns) else 0


def max_copies(arrival_ns: Any, scale: float) -> int:
    """The most copies whose arrivals at ``scale`` the int64 nanosecond clock holds (planner/clock.py)."""
    from csa_plan.planner.clock import MAX_SIM_NS

    period = copy_period(arrival_ns)
    room = MAX_SIM_NS * scale - (int(arrival_ns[-1]) if len(arrival_ns) else 0)
    if room < 0:
        return 0
    return 1 << 30 if period <= 0 else 1 + int(room // period)


def extension_cap(n: int) -> int:
    """The most requests one probe replays: ``MAX_STEADY_REQUESTS``, or two copies of a longer trace."""
    return max(MAX_STEADY_REQUESTS, 2 * n)


def copies_needed(span_ns: int, n: int, lifetime_ns: int, copies: int) -> int:
    """Copies of a trace of ``n`` requests spanning ``span_ns`` (at the probed rate) whose arrivals
    span the warm-up and the window at ``lifetime_ns``: at least twice ``copies``."""
    gap = span_ns / (n - 1) if n > 1 else 0.0
    per_copy = span_ns + gap
    if per_copy <= 0:
        return 0  # every request arrives at once: no arrival statistics to extend
    want = (2 * WARMUP_LIFETIMES + WINDOW_LIFETIMES) * lifetime_ns * 1.25  # p90 ~ 2 medians; a quarter over
    return max(2 * copies, math.ceil(want / per_copy), 2)
