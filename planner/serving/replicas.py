"""Data-parallel replicas of one engine: a round-robin split of the trace, one replay each, one merged result.

Replica k serves requests k, k + dp, k + 2 dp, ... (``--router round-robin``, the default), each
replica an independent engine with its own pool. The merged result keeps every request's
outcome under its own index; the step series is the sum over replicas of what each holds at
every replica's step end (a replica's figures hold from its step's end to its next one), so
units in use, running and waiting are totals over all replicas, against ``dp`` pools.
"""

from __future__ import annotations

from typing import Callable

from csa_plan.planner.replay.protocol import RuntimeTrace
from csa_plan.planner.replay.result import FrozenSeries, RuntimeResult, step_buckets


def split_round_robin(trace: RuntimeTrace, dp: int) -> list[tuple[RuntimeTrace, "object"]]:
    """``dp`` sub-traces (absolute arrival times kept) and the global index of each of their requests."""
    import numpy as np

    out = []
    owner = counts = None
    if trace.block_ids is not None and trace.block_offsets is not None:
        counts = np.diff(np.asarray(trace.block_offsets, dtype=np.int64))
        owner = np.repeat(np.arange(len(trace), dtype=np.int64) % dp, counts)  # each id's replica
    for k in range(dp):
        idx = np.arange(k, len(trace), dp, dtype=np.int64)
        ids = offs = None
        if owner is not None:
            ids = np.asarray(trace.block_ids, dtype=np.int64)[owner == k]
            offs = np.concatenate([[0], np.cumsum(counts[idx])]).astype(np.int64)
        out.append((RuntimeTrace(trace.arrival_ns[idx], trace.prompt_tokens[idx], trace.output_tokens[idx], ids, offs,
                                 trace.id_block_tokens), idx))
    return out


def _summed_series(parts: list[FrozenSeries], n_pools: int) -> FrozenSeries:
    import numpy as np

    ends = np.unique(np.concatenate([p.end_ns for p in parts])) if parts else np.zeros(0, dtype=np.int64)
    used = np.zeros((len(ends), n_pools), dtype=np.int64)
    running = np.zeros(len(ends), dtype=np.int64)
    waiting = np.zeros(len(ends), dtype=np.int64)
    tokens = np.zeros(len(ends), dtype=np.int64)
    prefill = np.zeros(len(ends), dtype=np.int64)
    for p in parts:
        if not p.buckets:
            continue
        at = np.searchsorted(p.end_ns, ends, side="right") - 1  # the replica's latest step at each end
        live = at >= 0
        used[live] += p.used[at[live]]
        running[live] += p.running[at[live]]
        waiting[live] += p.waiting[at[live]]
        own = np.searchsorted(ends, p.end_ns)  # the steps themselves: their tokens at their own ends
        np.add.at(tokens, own, p.tokens)
        np.add.at(prefill, own, p.prefill_tokens)
    return FrozenSeries(ends, used, running, waiting, tokens, prefill)


def replay_replicas(run_one: Callable[[RuntimeTrace], RuntimeResult], trace: RuntimeTrace, dp: int) -> RuntimeResult:
    """One replay per replica (``run_one``), merged; ``dp`` 1 is the plain replay."""
    if dp == 1:
        return run_one(trace)
    split = split_round_robin(trace, dp)
    merged = merge_replicas([run_one(sub) for sub, _ in split], [idx for _, idx in split], trace, dp)
    from dataclasses import replace

    return replace(merged, notes=merged.notes + ("open-loop arrivals: the data-parallel ranks are timed alone, not "
                                                 "in lockstep (their schedules depend on the clock; "
                                                 "planner/serving/lockstep.py)",))


def merge_replicas(per_replica: list[RuntimeResult], owners: list, trace: RuntimeTrace, dp: int,
                   arrival_ns: "object | None" = None, idle: int = 0, routing: str = "round-robin") -> RuntimeResult:
    """The replicas' results under the requests' own indices (``owners[k]``: replica k's requests);
    ``arrival_ns``: when each request was sent, where a closed-loop client set it (else the trace's);
    ``idle``: replicas beyond these that received no request (their pools still count); ``routing``: how
    the requests were split (the notes say)."""
    import numpy as np

    n = len(trace)
    arrival, admitted, first, finished = (np.full(n, -1, dtype=np.int64) for _ in range(4))
    pre = np.zeros(n, dtype=np.int64)
    refused: dict[int, str] = {}
    parts, results = [], []
    for res, idx in zip(per_replica, owners):
        results.append(res)
        arrival[idx] = np.asarray(res.arrival_ns, dtype=np.int64)  # a closed-loop client's send times, not the trace's
        admitted[idx] = np.asarray(res.admitted_ns, dtype=np.int64)
        first[idx] = np.asarray(res.first_token_ns, dtype=np.int64)
        finished[idx] = np.asarray(res.finished_ns, dtype=np.int64)
        pre[idx] = np.asarray(res.preemptions, dtype=np.int64)
        for j, reason in res.refused.items():
            refused[int(idx[j])] = reason
        parts.append(res.series)
    r0 = results[0]
    return RuntimeResult(label=r0.label, pools=r0.pools,
                         usable_units=sum(r.usable_units for r in results) + idle * r0.usable_units,
                         arrival_ns=arrival if arrival_ns is None else arrival_ns, admitted_ns=admitted,
                         first_token_ns=first, finished_ns=finished,
                         preemptions=pre, refused=refused, series=_summed_series(parts, len(r0.pools)),
                         recomputed_tokens=sum(r.recomputed_tokens for r in results),
                         prefix_hit_tokens=sum(r.prefix_hit_tokens for r in results),
                         prefix_query_tokens=sum(r.prefix_query_tokens for r in results),
                         notes=r0.notes + (f"{dp} data-parallel replicas, requests split {routing}; "
                                           "blocks, running and waiting summed over replicas",) + _coarse(parts))


def _coarse(parts: list[FrozenSeries]) -> tuple[str, ...]:
    """A replica past the series' bucket cap sums at its buckets' peaks: said, never silent."""
    width = max((p.width for p in parts), default=1)
    if width == 1:
        return ()
    return (f"a replica ran past {step_buckets():,} steps: the summed series adds each replica's peaks over "
            f"buckets of up to {width:,} steps (docs/limits.md), so its summed peak and means are estimates",)


def closed_shares(max_concurrency: int, dp: int) -> list[int]:
    """The deployment's one client pool of ``max_concurrency`` connections spread over the replicas, as
    evenly as they go (a replica's share differs from another's by at most one; they sum to C): only
    ``min(dp, C)`` replicas hold any."""
    active = min(dp, max_concurrency)
    return [max_concurrency // active + (1 if k < max_concurrency % active else 0) for k in range(active)]


def replay_closed_replicas(run_one: Callable[[RuntimeTrace, int], RuntimeResult], trace: RuntimeTrace, dp: int,
                           max_concurrency: int, lockstep_time: "object | None" = None) -> RuntimeResult:
    """(``serve`` runs this only where the ranks cannot be replayed together, ``serving/balanced.py``: with
    ``--pp``.) ``dp`` replicas behind one closed-loop client of ``max_concurrency`` connections for the deployment
    (``vllm bench serve --max-concurrency C`` against it): the connections are spread over the replicas
    (``closed_shares``: C in all, never C per replica nor ``ceil(C / dp)`` each), each pinned to its
    replica, and the requests dealt round-robin over the replicas that hold connections; each replica
    sends its next request when one of its own ends (``run_one(sub_trace, share)``: the engine's closed
    loop, compiled where it has one). Every request's time is its send, never the trace's arrival, so no
    wait is negative; at most C requests are in flight at any moment."""
    import numpy as np

    shares = closed_shares(max_concurrency, dp)
    active = len(shares)
    split = split_round_robin(trace, active)
    results = [run_one(sub, share) for (sub, _), share in zip(split, shares)]
    owners = [idx for _, idx in split]
    step_note: tuple[str, ...] = ()
    if lockstep_time is not None and active > 1:  # the ranks step together (serving/lockstep.py)
        from csa_plan.planner.serving.lockstep import lockstep

        results, line = lockstep(results, [int(sub.arrival_ns[0]) for sub, _ in split], lockstep_time)
        step_note = (line,)
    sent = np.full(len(trace), -1, dtype=np.int64)
    for res, idx in zip(results, owners):
        sent[idx] = np.asarray(res.arrival_ns, dtype=np.int64)
    merged = merge_replicas(results, owners, trace, dp, arrival_ns=sent, idle=dp - active)
    from dataclasses import replace

    spread = "/".join(map(str, shares)) + ("" if active == dp else f" (the other {dp - active} replicas get none)")
    return replace(merged, notes=merged.notes + (f"one closed-loop client of {max_concurrency:,} connections for "
                                                 f"the {dp} replicas, spread {spread}",) + step_note)
