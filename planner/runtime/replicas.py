"""Data-parallel replicas of one engine: a round-robin split of the trace, one replay each, one merged result.

Replica k serves requests k, k + dp, k + 2 dp, ... (``--router round-robin``, the default), each
replica an independent engine with its own pool. The merged result keeps every request's
outcome under its own index; the step series is the sum over replicas of what each holds at
every replica's step end (a replica's figures hold from its step's end to its next one), so
units in use, running and waiting are totals over all replicas, against ``dp`` pools.
"""

from __future__ import annotations

from typing import Callable

from csa_plan.planner.runtime.protocol import RuntimeTrace
from csa_plan.planner.runtime.result import FrozenSeries, RuntimeResult, step_buckets


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
    return merge_replicas([run_one(sub) for sub, _ in split], [idx for _, idx in split], trace, dp)


def _with_rests(series: FrozenSeries, rests: list) -> FrozenSeries:
    """``series`` with a row (no tokens) at each moment the replica fell idle, holding what it held then, for
    summing only: without it a replica's last step's running count held on past the step (a closed loop
    of 1 over 4 replicas summed to 4 running)."""
    import numpy as np

    if not rests:
        return series
    n_pools = series.used.shape[1]
    ends = np.concatenate([series.end_ns, np.array([r[0] for r in rests], dtype=np.int64)])
    order = np.argsort(ends, kind="stable")  # a rest after the step that ended at the same moment
    cat = lambda a, col: np.concatenate([a, np.array(col, dtype=np.int64).reshape((len(rests),) + a.shape[1:])])  # noqa: E731
    used = cat(series.used, [r[1] for r in rests]) if n_pools else np.zeros((len(ends), 0), dtype=np.int64)
    return FrozenSeries(ends[order], used[order], cat(series.running, [r[2] for r in rests])[order],
                        cat(series.waiting, [r[3] for r in rests])[order], cat(series.tokens, [0] * len(rests))[order],
                        cat(series.prefill_tokens, [0] * len(rests))[order], width=series.width)


def merge_replicas(per_replica: list[RuntimeResult], owners: list, trace: RuntimeTrace, dp: int,
                   arrival_ns: "object | None" = None, rests: list | None = None) -> RuntimeResult:
    """The replicas' results under the requests' own indices (``owners[k]``: replica k's requests);
    ``arrival_ns``: when each request was sent, where a closed-loop client set it (else the trace's)."""
    import numpy as np

    n = len(trace)
    admitted, first, finished = (np.full(n, -1, dtype=np.int64) for _ in range(3))
    pre = np.zeros(n, dtype=np.int64)
    refused: dict[int, str] = {}
    parts, results = [], []
    for res, idx in zip(per_replica, owners):
        results.append(res)
        admitted[idx] = np.asarray(res.admitted_ns, dtype=np.int64)
        first[idx] = np.asarray(res.first_token_ns, dtype=np.int64)
        finished[idx] = np.asarray(res.finished_ns, dtype=np.int64)
        pre[idx] = np.asarray(res.preemptions, dtype=np.int64)
        for j, reason in res.refused.items():
            refused[int(idx[j])] = reason
        parts.append(res.series)
    r0 = results[0]
    return RuntimeResult(label=r0.label, pools=r0.pools, usable_units=sum(r.usable_units for r in results),
                         arrival_ns=trace.arrival_ns if arrival_ns is None else arrival_ns, admitted_ns=admitted, first_token_ns=first, finished_ns=finished,
                         preemptions=pre, refused=refused, series=_summed(parts, rests, len(r0.pools)),
                         recomputed_tokens=sum(r.recomputed_tokens for r in results),
                         prefix_hit_tokens=sum(r.prefix_hit_tokens for r in results),
                         prefix_query_tokens=sum(r.prefix_query_tokens for r in results),
                         notes=r0.notes + (f"{dp} data-parallel replicas, requests split round-robin; "
                                           "blocks, running and waiting summed over replicas",) + _coarse(parts))


def _summed(parts: list[FrozenSeries], rests: list | None, n_pools: int) -> FrozenSeries:
    """The summed series; with ``rests`` (per replica, the moments it fell idle) sampled with them, its rows
    kept at the steps' own ends."""
    if not rests or not any(rests):
        return _summed_series(parts, n_pools)
    import numpy as np

    summed = _summed_series([_with_rests(p, r) for p, r in zip(parts, rests)], n_pools)
    keep = np.isin(summed.end_ns, np.concatenate([p.end_ns for p in parts]))
    return FrozenSeries(summed.end_ns[keep], summed.used[keep], summed.running[keep], summed.waiting[keep],
                        summed.tokens[keep], summed.prefill_tokens[keep])


def _coarse(parts: list[FrozenSeries]) -> tuple[str, ...]:
    """A replica past the series' bucket cap sums at its buckets' peaks: said, never silent."""
    width = max((p.width for p in parts), default=1)
    if width == 1:
        return ()
    return (f"a replica ran past {step_buckets():,} steps: the summed series adds each replica's peaks over "
            f"buckets of up to {width:,} steps (docs/limits.md), so its summed peak and means are estimates",)


def replay_closed_replicas(runtimes: list, trace: RuntimeTrace, dp: int, time: "object", max_concurrency: int,
                           progress: Callable[[int, int], None] | None = None) -> RuntimeResult:
    """``dp`` replicas behind one closed-loop client of ``max_concurrency`` (``vllm bench serve
    --max-concurrency`` against a data-parallel deployment: one client pool for the deployment, not one a
    replica). The trace's order is kept, not its times: the first C requests are sent at its first arrival,
    and each request that ends anywhere (served, refused or stranded) sends the next at that moment, to its
    replica (round-robin: request i to replica i mod dp). The replicas run in lockstep, the one with the
    earliest clock first, so a replica never schedules before a request sent to it by then has arrived.
    ``runtimes[k]``: replica k's runtime over its requests (``split_round_robin``). The Python loop's
    rules (``loop.replay``) apply to each replica; every time kept is a send, an admission or an end at
    or after it, so no wait or latency is negative."""
    import heapq

    import numpy as np

    from csa_plan.planner.errors import BadInput
    from csa_plan.planner.runtime.loop import NEVER, STRANDED
    from csa_plan.planner.runtime.result import StepSeries
    from csa_plan.planner.runtime.steptime import batch_ns, step_ns
    from csa_plan.planner.simulate.scenario import MAX_CLOCK_NS
    from csa_plan.planner.units import NS_PER_S

    n = len(trace)
    owners = [np.arange(k, n, dp, dtype=np.int64) for k in range(dp)]
    send = [NEVER] * n
    start = int(trace.arrival_ns[0]) if n else 0
    state = {"sent": min(n, max_concurrency), "done": 0}
    for g in range(state["sent"]):
        send[g] = start
    wake: list[tuple[int, int]] = []  # (replica, send time): replicas that may have a request sent to them since they last looked
    ends: list[int] = []  # ends not yet turned into sends: the k-th earliest end sends request C + k
    heap: list[tuple[int, int]] = []  # (clock, replica) of the replicas that can act
    running = [start]  # the clock of the replica in its iteration

    def flush(limit: int) -> None:
        """Turn every end at or before ``limit`` into a send, earliest first: no replica at a clock at
        or after ``limit`` can still record an earlier end."""
        while ends and ends[0] <= limit and state["sent"] < n:
            at = heapq.heappop(ends)
            g = state["sent"]
            send[g] = at
            state["sent"] += 1
            wake.append((g % dp, at))

    def release(k: int, at: int) -> None:
        for _ in range(k):
            heapq.heappush(ends, at)
        flush(min(running[0], heap[0][0]) if heap else running[0])

    rests: list[list] = [[] for _ in range(dp)]  # per replica: (time, used, running, waiting) as it fell idle

    def run(k: int):  # one replica's loop (loop.replay's), yielding its clock before each iteration
        rt, own = runtimes[k], owners[k].tolist()
        m = len(own)
        admitted, first_token, finished, preempt = [NEVER] * m, [NEVER] * m, [NEVER] * m, [0] * m
        refused: dict[int, str] = {}
        series = StepSeries.empty(len(rt.pools))
        inflight: list = []
        totals = {"recomputed": 0, "hit": 0, "query": 0}
        depth, linear = rt.pipeline_depth, time.linear
        t, nxt = start, 0

        def apply(step, end: int) -> None:
            c = rt.complete(step)
            for r in c.first_token:
                if first_token[r] == NEVER:
                    first_token[r] = end
            for r in c.finished:
                finished[r] = end
            state["done"] += len(c.finished)
            release(len(c.finished), end)

        while True:
            t = yield t
            while nxt < m and send[own[nxt]] != NEVER and send[own[nxt]] <= t:
                reason = rt.refuse(nxt)
                if reason is None:
                    rt.add(nxt)
                else:
                    refused[nxt] = reason
                    state["done"] += 1
                    release(1, t)
                nxt += 1
            step = rt.schedule()
            for r in step.admitted:
                if admitted[r] == NEVER:
                    admitted[r] = t
            for r in step.preempted:
                preempt[r] += 1
            totals["recomputed"] += step.recomputed_tokens
            totals["hit"] += step.prefix_hit_tokens
            totals["query"] += step.prefix_query_tokens
            if step.tokens:
                end = t + (step_ns(step.prefill_tokens, time) if linear is None else batch_ns(step.batch, time))
                if end > MAX_CLOCK_NS:
                    raise BadInput("options", "--tpot-ms / --prefill-tok-s",
                                   f"the engine step starting at {t / NS_PER_S:,.0f} s would end past the int64 "
                                   "nanosecond clock (about 292 years, MAX_CLOCK_NS): shorten the trace, its token "
                                   "counts or the step times")
                inflight.append((step, end))
                while len(inflight) >= depth:
                    s_, e_ = inflight.pop(0)
                    apply(s_, e_)
                    if s_ is step:
                        break
                t = end
                series.add(t, rt.used_units(), rt.running(), rt.waiting(), step.total_tokens, step.prefill_tokens)
                continue
            if inflight:
                s_, e_ = inflight.pop(0)
                apply(s_, e_)
                t = max(t, e_)
                continue
            if nxt < m and send[own[nxt]] != NEVER:
                t = max(t, send[own[nxt]])
                continue
            stranded = list(rt.stranded()) if (rt.running() or rt.waiting()) else []
            for r in stranded:
                refused[r] = STRANDED
                state["done"] += 1
            if stranded:
                release(len(stranded), t)
                continue
            rests[k].append((t, tuple(rt.used_units()), rt.running(), rt.waiting()))
            if nxt == m:
                break
            t = yield None  # nothing to do until the client sends this replica a request
        result = RuntimeResult(label=rt.label, pools=rt.pools, usable_units=rt.usable_units,
                               arrival_ns=np.array([send[g] for g in own], dtype=np.int64), admitted_ns=admitted,
                               first_token_ns=first_token, finished_ns=finished, preemptions=preempt,
                               refused=refused, series=series.freeze(), recomputed_tokens=totals["recomputed"],
                               prefix_hit_tokens=totals["hit"], prefix_query_tokens=totals["query"], notes=rt.notes(),
                               pool_units=tuple(rt.pool_units), preemption_word=rt.preemption_word)
        yield result

    gens = [run(k) for k in range(dp)]
    clock = [next(g) for g in gens]  # each at the first arrival
    results: list = [None] * dp
    heap.extend((clock[k], k) for k in range(dp))
    heapq.heapify(heap)
    idle: set[int] = set()
    ticks = 0

    def woken() -> None:
        while wake:
            j, at = wake.pop(0)
            if j in idle:
                idle.discard(j)
                clock[j] = max(clock[j], at)
                heapq.heappush(heap, (clock[j], j))

    while heap or ends:
        flush(heap[0][0] if heap else ends[0] if ends else 0)
        woken()
        if not heap:
            if ends and state["sent"] < n:
                continue
            break
        t, k = heapq.heappop(heap)
        running[0] = t
        out = gens[k].send(t)
        if isinstance(out, RuntimeResult):
            results[k] = out
        elif out is None:
            idle.add(k)
        else:
            clock[k] = out
            heapq.heappush(heap, (out, k))
        woken()
        ticks += 1
        if progress is not None and ticks % 4096 == 0:
            progress(state["done"], n)
    for k in idle:  # a replica left waiting for requests never sent (every slot held by stranded ones): refused
        gens[k].close()
        raise BadInput("options", "--max-concurrency", "the closed loop stopped with requests never sent "
                       "(every request in flight stranded): lower the load or raise the memory")
    if progress is not None:
        progress(n, n)
    if dp == 1:
        return results[0]
    arrival = np.array(send, dtype=np.int64)
    merged = merge_replicas(results, owners, trace, dp, arrival_ns=arrival, rests=rests)
    from dataclasses import replace

    return replace(merged, notes=merged.notes + (f"one closed-loop client of {max_concurrency:,} for the {dp} "
                                                 "replicas (the deployment's client pool)",))
