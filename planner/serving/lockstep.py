"""Data-parallel ranks that step together (issue 44, item 2): vLLM's DP engine cores and SGLang's DP-attention
workers run every forward pass at once, because the MoE layer's collective (the all-to-all under EP, the
all-reduce or all-gather otherwise) spans all of them; a rank with nothing to run runs a dummy batch
(vLLM ``execute_dummy_batch``) so the others are not left waiting in the collective. A step of the
deployment therefore lasts as long as its slowest rank's step.

Why re-timing is exact here: behind a closed-loop client (``--max-concurrency``, how every published
row was measured) each rank's schedule does not depend on how long its steps last (a request is sent
when one ends; the order of events is the same whatever the clock says), so each rank is replayed
alone by the one replay loop (compiled where it can be) and its steps are then put on the shared
clock: step i of every rank ends when the slowest rank's step i ends (a rank past its last step
runs dummy batches of one token). Every time a replay records (a request's send, admission, first
token, end) is a step end or the run's start, so each maps to its step's end on the shared clock.
With open-loop arrivals the schedule does depend on the clock, so the ranks are not put in lockstep
and the replay says so.

Where it is used: ``replicas.replay_closed_replicas`` (each rank alone with its pinned share of the
connections), which ``serve`` now runs only where the ranks cannot be replayed together in time
(``--pp`` with round-robin); everywhere else a closed loop over DP ranks, and every load-aware
balancer, steps the ranks together from the start (``serving/balanced.py``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from csa_plan.planner.replay.result import RuntimeResult
    from csa_plan.planner.steptime.model import StepTime


def dummy_ns(time: "StepTime") -> int:
    """One dummy batch: a single token at position 1 (what an idle rank runs to join the collective)."""
    from csa_plan.planner.steptime.model import StepBatch, batch_ns

    b = StepBatch()
    b.add_decode(1, 1)
    return batch_ns(b, time)


def step_durations(res: "RuntimeResult", start_ns: int) -> Any:
    """Each step's duration (int64 ns), from the series' step ends (one row a step), or None where the
    series merged steps into buckets (a replay past ``STEP_BUCKETS`` steps)."""
    import numpy as np

    s = res.series
    if s.width != 1 or s.buckets != s.steps:
        return None
    ends = np.asarray(s.end_ns, dtype=np.int64)
    return np.diff(np.concatenate([[start_ns], ends]))


def lockstep(results: list["RuntimeResult"], start_ns: "int | list[int]", time: "StepTime") \
        -> tuple[list["RuntimeResult"], str]:
    """The ranks' results on the shared clock (from the earliest rank's start), and the line the replay's
    notes carry; ``start_ns``: when each rank's run began (its first send), or one time for all."""
    import numpy as np

    from csa_plan.planner.replay.result import FrozenSeries

    starts = [int(start_ns)] * len(results) if isinstance(start_ns, int) else [int(x) for x in start_ns]
    durations = [step_durations(r, s0) for r, s0 in zip(results, starts)]
    if any(d is None for d in durations):
        return results, ("data-parallel ranks not put in lockstep: a rank ran past the series' step buckets "
                         "(docs/limits.md), each rank is timed alone")
    longest = max((len(d) for d in durations), default=0)
    idle = dummy_ns(time)
    grid = np.full((len(durations), longest), idle, dtype=np.int64)
    for k, d in enumerate(durations):
        grid[k, :len(d)] = d
    t0 = min(starts) if starts else 0
    shared = t0 + np.cumsum(grid.max(axis=0)) if longest else np.zeros(0, dtype=np.int64)
    out = []
    for r, d, s0 in zip(results, durations, starts):
        old_ends = np.asarray(r.series.end_ns, dtype=np.int64)
        new_ends = shared[:len(d)]

        def remap(values: Any, old_ends=old_ends, new_ends=new_ends, s0=s0) -> Any:
            v = np.asarray(values, dtype=np.int64)
            v = np.where(v == s0, t0, v)  # the rank's start is the deployment's
            if not len(old_ends):
                return v
            at = np.clip(np.searchsorted(old_ends, v), 0, len(old_ends) - 1)
            return np.where(old_ends[at] == v, new_ends[at], v)

        s = r.series
        series = FrozenSeries(new_ends.copy(), s.used, s.running, s.waiting, s.tokens, s.prefill_tokens,
                              width=s.width, n_steps=s.n_steps, pool_peak=s.pool_peak, sums=s.sums)
        out.append(replace(r, arrival_ns=remap(r.arrival_ns), admitted_ns=remap(r.admitted_ns),
                           first_token_ns=remap(r.first_token_ns), finished_ns=remap(r.finished_ns), series=series))
    slow = int((grid.max(axis=0) > grid.min(axis=0)).sum()) if longest else 0
    return out, (f"{len(results)} data-parallel ranks step together (the MoE collective spans them): each shared "
                 f"step lasts as long as the slowest rank's, an idle rank runs a one-token dummy batch "
                 f"({idle:,} ns); {slow:,} of {longest:,} steps waited on a slower rank")
