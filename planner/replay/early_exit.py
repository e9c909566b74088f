"""A replay that stops as soon as its verdict is decided (issue 45 item 5): the one early-exit rule.

Why: a shape that cannot serve the rate costs as much to replay to the end as one that can, yet its
verdict is often certain long before the end. The bounds a point is judged by are p99s over the
whole run (``serving/report.py`` ``_quantiles``: ``np.quantile``'s linear interpolation over the
requests' nanosecond figures) and "nothing refused"; a p99 over ``m`` values is above a limit as
soon as at least ``m - floor(0.99 (m - 1))`` of them are (the interpolation starts at the value of
rank ``floor(0.99 (m - 1))``, and every value above it is larger). So the rule counts, at each check:

* every request already refused (when refusals are a violation, one decides);
* the TTFT, queue wait and TPOT figures already final and over their limit; and, when every request
  must be served (a request never served is itself a violation), the figures already certain to
  end over it: a request waiting for its admission or first token since more than the limit before
  ``now`` (the latest time the loop has recorded: later events happen later), a running request
  whose time since its first token over its remaining tokens already puts its TPOT over;
  (a request never served, refused or not, leaves the point infeasible in the full evaluation: refused at
  the target rate, or unserved in the steady probe, whose ``serve.sustains`` wants every request served --
  SGLang's abort of a request out of memory even alone in the decode batch recurs in the probe's copies);
* ``m`` is the deployment's whole trace (every replica's requests; its requests of two output tokens
  or more for TPOT): the population of the full replay's p99 when all are served, and a p99 over
  fewer values needs no more of them over (the count is monotone in ``m``).

A limit may also be a shape to beat (``beat_tpot_s``: a found shape's TPOT p99; one whose TPOT p99
is already above it cannot be preferred to it): the replay stops and says so, without a verdict.

The verdict of a stopped replay is the full replay's: every count it stops on is of figures the full
replay has too. A replay that does not stop is the full replay, figure for figure. Both loops take the
rule: the Python loop (``loop.replay``) checks it every ``CHECK_STEPS`` steps; the compiled loops
check it through their tick (``replay/loop.h`` ``csa_tick``, every ``CSA_TICK_TURNS`` turns), which
reads the arrays the C loop writes in place, so the C loops are unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

CHECK_STEPS = 4096  # the Python loop's check interval, in steps (the C loops': CSA_TICK_TURNS turns)
CHECK_SHARE = 0.01  # a compiled loop's tick checks once this share of the deployment's requests is done since the last
CHECK_EVERY = 8  # ... or after this many ticks without a check (a queue that grows while nothing finishes)
P99 = 0.99


class ReplayStopped(Exception):
    """A replay ended early by its ``StopRule``: ``reason`` says which bound is decided and by what count;
    ``verdict`` is False (the point breaks a bound) or None (it cannot beat the shape already found)."""

    def __init__(self, reason: str, verdict: bool | None, done: int, requests: int):
        super().__init__(reason)
        self.reason, self.verdict, self.done, self.requests = reason, verdict, done, requests


def over_needed(m: int) -> int:
    """How many of ``m`` values above a limit decide that their p99 (linear interpolation) is above it."""
    if m <= 0:
        return 1 << 62
    return m - math.floor(P99 * (m - 1))


@dataclass(frozen=True)
class StopRule:
    """The bounds a replay may stop on (seconds; None: not bounded) over a deployment's ``requests``
    (``multi_token``: those of two output tokens or more)."""

    requests: int
    multi_token: int
    no_refusals: bool = True
    ttft_max_s: float | None = None
    tpot_max_s: float | None = None
    wait_max_s: float | None = None
    beat_tpot_s: float | None = None  # a found shape's TPOT p99: above it, this one cannot be preferred

    def watch(self) -> "StopWatch":
        return StopWatch(self)


class StopWatch:
    """One replay's (or one deployment's replicas', in turn) counts against its ``StopRule``: ``watch``
    names the arrays a loop writes (the compiled loops' in place; the Python loop's lists at each check),
    ``check`` raises ``ReplayStopped`` once a bound is decided, ``carry`` adds a finished replica's
    final counts (and raises when they decide it: the next replica is not replayed)."""

    def __init__(self, rule: StopRule):
        self.rule = rule
        self.carried = {"refused": 0, "ttft": 0, "tpot": 0, "wait": 0, "beat": 0, "done": 0}
        self._arrays: tuple | None = None

    def watch(self, arrival: Any, output: Any, admitted: Any, first: Any, finished: Any, refused: Any) -> None:
        self._arrays = (arrival, output, admitted, first, finished, refused)

    def ticker(self, progress: Any):
        """The compiled loops' tick: the caller's progress, then the check over the watched arrays once
        another ``CHECK_SHARE`` of the deployment's requests is done, or every ``CHECK_EVERY`` ticks (a
        check reads every request: about 0.3 ms for 5,000, against a C tick's 4,096 turns)."""
        seen = [0, 0]  # requests done at the last check, ticks since it

        def tick(done: int, n: int) -> None:
            if progress is not None:
                progress(done, n)
            seen[1] += 1
            if self._arrays is not None and (done - seen[0] >= CHECK_SHARE * self.rule.requests
                                             or seen[1] >= CHECK_EVERY):
                seen[0], seen[1] = done, 0
                self.check(*self._arrays)
        return tick

    def counts(self, arrival: Any, output: Any, admitted: Any, first: Any, finished: Any, refused: Any,
               final: bool = False) -> dict[str, int]:
        """The counts over one replica's arrays (``refused``: nonzero where refused, or a count)."""
        import numpy as np

        r = self.rule
        arrival = np.asarray(arrival, dtype=np.int64)
        out = np.asarray(output, dtype=np.int64)
        adm = np.asarray(admitted, dtype=np.int64)
        fst = np.asarray(first, dtype=np.int64)
        fin = np.asarray(finished, dtype=np.int64)
        n_refused = int(refused) if np.isscalar(refused) else int(np.count_nonzero(np.asarray(refused)))
        now = max(int(adm.max(initial=-1)), int(fst.max(initial=-1)), int(fin.max(initial=-1)))
        pending = r.no_refusals and not final and now >= 0  # certain to end over only when all must be served
        c = {"refused": n_refused, "ttft": 0, "tpot": 0, "wait": 0, "beat": 0, "done": int((fin >= 0).sum())}
        arrived = arrival <= now

        def over_ns(values_ns: Any, limit_s: float) -> int:
            return int(np.count_nonzero(values_ns / 1e9 > limit_s))

        if r.ttft_max_s is not None:
            c["ttft"] = over_ns((fst - arrival)[fst >= 0], r.ttft_max_s)
            if pending:
                c["ttft"] += over_ns((now - arrival)[(fst < 0) & arrived], r.ttft_max_s)
        if r.wait_max_s is not None:
            c["wait"] = over_ns((adm - arrival)[adm >= 0], r.wait_max_s)
            if pending:
                c["wait"] += over_ns((now - arrival)[(adm < 0) & arrived], r.wait_max_s)
        if r.tpot_max_s is not None or r.beat_tpot_s is not None:
            many = out >= 2
            done = many & (fin >= 0) & (fst >= 0)
            tpot = np.round((fin[done] - fst[done]) / (out[done] - 1)).astype(np.int64)
            running = many & (fin < 0) & (fst >= 0)
            bound = np.round((now - fst[running]) / (out[running] - 1)).astype(np.int64) if pending else None
            for key, limit in (("tpot", r.tpot_max_s), ("beat", r.beat_tpot_s)):
                if limit is not None:
                    c[key] = over_ns(tpot, limit) + (0 if bound is None else over_ns(bound, limit))
        return c

    def check(self, arrival: Any, output: Any, admitted: Any, first: Any, finished: Any, refused: Any) -> None:
        self._decide(self.counts(arrival, output, admitted, first, finished, refused))

    def _decide(self, c: dict[str, int]) -> None:
        total = {k: v + self.carried[k] for k, v in c.items()}
        r = self.rule
        done, n = total["done"], r.requests
        if r.no_refusals and total["refused"]:
            raise ReplayStopped(f"stopped early: {total['refused']:,} refused after {done:,} of {n:,} requests "
                                "finished (refusals are a violation)", False, done, n)
        for key, limit, m, what in (("ttft", r.ttft_max_s, r.requests, "TTFT"),
                                    ("wait", r.wait_max_s, r.requests, "wait"),
                                    ("tpot", r.tpot_max_s, r.multi_token, "TPOT")):
            if limit is not None and total[key] >= over_needed(m):
                raise ReplayStopped(f"stopped early: {total[key]:,} of {m:,} requests' {what} already over "
                                    f"{limit * (1000 if what == 'TPOT' else 1):g} {'ms' if what == 'TPOT' else 's'} "
                                    f"(p99 over {over_needed(m):,} or more decided) after {done:,} finished",
                                    False, done, n)
        if r.beat_tpot_s is not None and total["beat"] >= over_needed(r.multi_token):
            raise ReplayStopped(f"stopped early: TPOT p99 already above the found shape's {r.beat_tpot_s * 1000:.3f} ms "
                                f"({total['beat']:,} of {r.multi_token:,} over, after {done:,} finished): it cannot "
                                "be preferred to it", None, done, n)

    def carry(self, arrival: Any, output: Any, admitted: Any, first: Any, finished: Any, refused: Any,
              more: bool = True) -> None:
        """A replica replayed to its end: its final counts carry into the next replica's checks (``more``:
        another replica follows, not replayed when these counts already decide a bound)."""
        for k, v in self.counts(arrival, output, admitted, first, finished, refused, final=True).items():
            self.carried[k] += v
        if more:
            self._decide(dict.fromkeys(self.carried, 0))  # the replicas so far may decide it
