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
    import numpy as np

    n = len(trace)
    arrival, admitted, first, finished = (np.full(n, -1, dtype=np.int64) for _ in range(4))
    pre = np.zeros(n, dtype=np.int64)
    refused: dict[int, str] = {}
    parts, results = [], []
    for sub, idx in split_round_robin(trace, dp):
        res = run_one(sub)
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
    return RuntimeResult(label=r0.label, pools=r0.pools, usable_units=sum(r.usable_units for r in results),
                         arrival_ns=arrival, admitted_ns=admitted, first_token_ns=first, finished_ns=finished,
                         preemptions=pre, refused=refused, series=_summed_series(parts, len(r0.pools)),
                         recomputed_tokens=sum(r.recomputed_tokens for r in results),
                         prefix_hit_tokens=sum(r.prefix_hit_tokens for r in results),
                         prefix_query_tokens=sum(r.prefix_query_tokens for r in results),
                         notes=r0.notes + (f"{dp} data-parallel replicas, requests split round-robin; "
                                           "blocks, running and waiting summed over replicas",) + _coarse(parts))


def _coarse(parts: list[FrozenSeries]) -> tuple[str, ...]:
    """A replica past the series' bucket cap sums at its buckets' peaks: said, never silent."""
    width = max((p.width for p in parts), default=1)
    if width == 1:
        return ()
    return (f"a replica ran past {step_buckets():,} steps: the summed series adds each replica's peaks over "
            f"buckets of up to {width:,} steps (docs/limits.md), so its summed peak and means are estimates",)
