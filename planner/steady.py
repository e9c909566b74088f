"""Sustainable means steady: the one judgement of a rate probe, shared by the engine replays
(``serving/serve.py``) and the reservation ledger (``reserve/capacity.py``).

A finite trace replayed at a high rate scale ends before a queue can grow: every request arrives
in a few seconds, runs at once and drains, and no wait bound binds. So a probed rate counts as
sustained only when the run was long enough to be a steady state and the queue did not grow:

* **the window**: the requests that arrive after a warm-up (``WARMUP_LIFETIMES`` times the p90
  of the lifetimes: the system fills from empty), up to the last arrival; it must span at least
  ``WINDOW_LIFETIMES`` lifetimes (the lifetime: the median time from arrival to the last token,
  measured in this very run);
* **balanced**: the median lifetime (the part of it load moves: ``judge``'s ``delay_ns``) of the
  requests arriving in the window's second half exceeds that of its first half by no more than ``BALANCE_TOLERANCE`` of a half's length (plus twice the
  lifetimes' interquartile range over the square root of a half's arrivals, the sampling noise):
  when arrivals outpace completions by a share g, the queue grows and a request arriving t later
  stays about g x t longer, so the median moves by g x the half's length; medians, so that a
  trace's few very long requests, or a busier stretch, do not move it;  A
  lifetime that grows so over a whole window is a queue that grows: not sustained (over a shorter
  one it may still be the system filling toward a fuller steady state: the trace is extended,
  unless it grows by half a half window, ``GROSS_GROWTH``);
* **the bounds** (refusals, queue wait, TTFT, TPOT) are checked on the window's requests, not on a
  burst draining.

A trace whose arrivals at the probed rate span too few lifetimes is extended by ``EXTENSION``
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
BALANCE_TOLERANCE = 0.05  # the time in system may grow by at most this share of a half window (+ noise)
MAX_STEADY_REQUESTS = 50_000  # the longest extended trace one probe replays (docs/limits-and-security.md)
MAX_EXTENSION_ROUNDS = 5  # replays of one probe while its window is found too short
EXTENSION = ("the trace repeated end to end with fresh request ids (each copy shifted by the trace's span plus "
             "one mean arrival gap; prefix-block ids renumbered, so no copy hits another's prefix cache)")

RULE = (f"steady: a window of at least {WINDOW_LIFETIMES} median request lifetimes after a warm-up of the p90 "
        f"lifetime, the median lifetime growing by at most {BALANCE_TOLERANCE:.0%} of a half window between its halves; "
        f"a short trace extended by "
        f"repetition with fresh ids up to {MAX_STEADY_REQUESTS:,} requests")
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
    arrived: int  # requests arriving in the window's second half
    completed: int  # requests finishing in the window's second half
    growth_ns: int  # the median lifetime of the window's second half's arrivals minus its first half's
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
                f"lifetimes of {self.lifetime_ns / 1e9:.3g} s ({self.arrived:,} arrived, {self.completed:,} completed, "
                f"median lifetime {self.growth_ns / 1e9:+.3g} s from its first half to its second; {self.requests:,} requests, {self.copies} "
                f"cop{'y' if self.copies == 1 else 'ies'} of the trace)")


def judge(arrival_ns: Any, finished_ns: Any, copies: int = 1, delay_ns: Any = None) -> Judgement:
    """The steady-state verdict of one run from its per-request arrival and finish times (ns,
    finish -1: never served): None while the window is shorter than ``WINDOW_LIFETIMES``, else
    True when it is balanced and False when the lifetimes grow. ``delay_ns`` (per request) is what
    the balance compares instead of the lifetime: the part of it that load moves and the trace's
    own request sizes do not (the ledger's wait; an engine's lifetime at the trace's mean output
    length), so a trace whose second half asks for longer requests is no growing queue."""
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
    lifetimes = (t_end - start) / life
    if t_end <= start:
        return Judgement(None, SHORT, life, start, t_end, max(lifetimes, 0.0), 0, 0, 0, n, copies,
                         f"the arrivals span {(t_end - t0) / 1e9:.3g} s, within the warm-up (the p90 lifetime, {warm / 1e9:.3g} s)")
    done = np.sort(np.where(served, finished, np.iinfo(np.int64).max))
    arr = np.sort(arrival)

    def count(sorted_times: Any, a: int, b: int) -> int:
        return int(np.searchsorted(sorted_times, b, side="right") - np.searchsorted(sorted_times, a, side="right"))

    life_of = np.where(served, finished - arrival if delay_ns is None else np.asarray(delay_ns, dtype=np.int64),
                       np.iinfo(np.int64).max)

    def half(a: int, b: int) -> Any:  # the lifetimes of the requests arriving in (a, b]
        return life_of[(arrival > a) & (arrival <= b)]

    mid = (start + t_end) // 2
    arrived, completed = count(arr, mid, t_end), count(done, mid, t_end)
    one, two = half(start, mid), half(mid, t_end)
    if not len(one) or not len(two):
        return Judgement(None, SHORT, life, start, t_end, lifetimes, arrived, completed, 0, n, copies,
                         "no arrival in half the window")
    growth = int(np.median(two)) - int(np.median(one))  # medians: a few long requests do not move them
    both = np.concatenate([one, two])
    spread = float(np.quantile(both, 0.75) - np.quantile(both, 0.25))
    slack = BALANCE_TOLERANCE * (t_end - mid) + 2 * spread / math.sqrt(min(len(one), len(two)))
    balanced = growth <= slack
    args = (life, start, t_end, lifetimes, arrived, completed, growth, n, copies)
    if not balanced and lifetimes >= 1 and growth > GROSS_GROWTH * (t_end - mid):
        return Judgement(False, GROWS, *args, detail=f"the median lifetime grows by {growth / 1e9:.3g} s from the window's "
                                                     f"first half to its second ({(t_end - mid) / 1e9:.3g} s)")
    if lifetimes < WINDOW_LIFETIMES:
        return Judgement(None, SHORT, *args, detail=f"under {WINDOW_LIFETIMES} lifetimes")
    if not balanced:
        return Judgement(False, GROWS, *args, detail=f"the median lifetime grows by {growth / 1e9:.3g} s from the window's "
                                                     f"first half to its second ({(t_end - mid) / 1e9:.3g} s)")
    return Judgement(True, STEADY, *args)


def repeat_arrivals(arrival_ns: Any, copies: int) -> Any:
    """``EXTENSION``'s arrivals: copy k shifted by k x (the span plus one mean gap), int64."""
    import numpy as np

    base = np.asarray(arrival_ns, dtype=np.int64)
    n = len(base)
    span = int(base[-1] - base[0]) if n else 0
    period = span + (span // (n - 1) if n > 1 else 0)
    return np.tile(base, copies) + np.repeat(np.arange(copies, dtype=np.int64) * period, n)


def copies_needed(span_ns: int, n: int, lifetime_ns: int, copies: int) -> int:
    """Copies of a trace of ``n`` requests spanning ``span_ns`` (at the probed rate) whose arrivals
    span the warm-up and the window at ``lifetime_ns``: at least twice ``copies``."""
    gap = span_ns / (n - 1) if n > 1 else 0.0
    per_copy = span_ns + gap
    if per_copy <= 0:
        return 0  # every request arrives at once: no arrival statistics to extend
    want = (2 * WARMUP_LIFETIMES + WINDOW_LIFETIMES) * lifetime_ns * 1.25  # p90 ~ 2 medians; a quarter over
    return max(2 * copies, math.ceil(want / per_copy))
