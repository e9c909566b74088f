"""Data-parallel ranks replayed together in time, each request sent to the rank the engine's load balancer
picks when it arrives (``serving/balancer.py``): vLLM's DP coordinator, SGLang's ``--load-balance-method``.

Why together: a load-aware balancer reads the ranks' state at the moment a request arrives, and that
state depends on every earlier choice and on the clock, so the ranks cannot be replayed one by one as
``replicas.py`` does for round-robin. Here one ``loop.Replayer`` per rank (the one replay loop, in parts)
is stepped on one shared clock, as the ranks run (``serving/lockstep.py``: the MoE collective spans
them): at each shared step start the requests that arrived since the last one are dispatched in
arrival order, each with the state its rank published by then; every rank takes its requests and
schedules; a rank with tokens runs its batch, an idle one a one-token dummy batch (only while some
rank has work, as vLLM's DP wave does); the shared step ends when the slowest rank's does. Behind a
closed-loop client (``--max-concurrency C``) there is one pool of C connections for the deployment,
not pinned to ranks: the next request is sent when any request ends and goes where the balancer
sends it. Python loop only (the compiled loops replay one rank alone); ``--pp`` is not taken (``serve``
replays those ranks alone, round-robin, and says so).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from csa_plan.planner.replay.loop import NEVER, STRANDED, Replayer
from csa_plan.planner.serving.balancer import Balancer, Method, SglangLoad, VllmLoad, dispatcher

if TYPE_CHECKING:
    from csa_plan.planner.replay.protocol import EngineRuntime, RuntimeTrace
    from csa_plan.planner.replay.result import RuntimeResult
    from csa_plan.planner.steptime.model import StepTime


def _engine(rt: Any) -> Any:
    """The engine's own runtime under any layer (a host KV tier)."""
    while hasattr(rt, "inner"):
        rt = rt.inner
    return rt


def vllm_load(rt: "EngineRuntime") -> VllmLoad:
    """``get_request_counts`` and ``get_kv_cache_usage`` (v1/core/sched/scheduler.py:2920-2926, 0.33.0): the
    block pool's blocks in use over its usable blocks (block_pool.py:921-932, the null block left out)."""
    used = sum(rt.used_units())
    return VllmLoad(rt.waiting(), rt.running(), used / rt.usable_units if rt.usable_units else 0.0)


def sglang_load(rt: "EngineRuntime") -> SglangLoad:
    """``get_loads`` (scheduler_components/load_inquirer.py:109-148): running, waiting, and the KV tokens
    in use (the larger of the full and SWA pools', pool_stats_observer.py:84-93) plus the waiting
    requests' lengths."""
    eng = _engine(rt)
    return SglangLoad(rt.running(), rt.waiting(), eng.load_tokens())


def replay_balanced(make_rt: Callable[[], "EngineRuntime"], trace: "RuntimeTrace", time: "StepTime", dp: int,
                    balancer: Balancer, max_concurrency: int | None = None,
                    assignment: list[int] | None = None,
                    progress: Callable[[int, int], None] | None = None) -> "RuntimeResult":
    """``trace`` over ``dp`` ranks (``make_rt()`` each, over the whole trace) under ``balancer``; the merged
    result (``replicas.merge_replicas``) with the shared clock and the balancer in its notes.
    ``assignment`` (a list, when given) receives each request's rank, -1 for one never sent; ``progress``
    hears (requests done, requests) every 4,096 shared steps and at the end."""
    from csa_plan.planner.serving.lockstep import dummy_ns

    n = len(trace)
    arrival = trace.arrival_ns.tolist()
    sent = n
    if max_concurrency is not None and n:
        sent = min(n, max_concurrency)
        arrival = [arrival[0]] * sent + [NEVER] * (n - sent)
    start = arrival[0] if n else 0
    policy = dispatcher(balancer, dp, start)
    load = sglang_load if balancer.method in (Method.TOTAL_REQUESTS, Method.TOTAL_TOKENS) else vllm_load
    watch_start, watch_end = policy.reads_start_load, policy.reads_end_load  # a load only where one is read
    ranks = [Replayer(make_rt(), trace, time, handed=True) for _ in range(dp)]
    owner = [-1] * n
    state = {"sent": sent}

    def released(k: int) -> Callable[[int, int], None]:
        def on_release(count: int, at: int) -> None:
            policy.finished(k, count)
            while count > 0 and state["sent"] < n:  # one client pool: the next request is sent now
                arrival[state["sent"]] = at
                state["sent"] += 1
                count -= 1
        return on_release

    for k, rank in enumerate(ranks):
        rank.on_release = released(k)
    idle = dummy_ns(time)
    nxt = 0
    now = start
    waited = steps = 0
    while True:
        while nxt < state["sent"] and arrival[nxt] <= now:  # dispatched as they arrived, in order
            k = policy.choose(arrival[nxt], int(trace.prompt_tokens[nxt]))
            owner[nxt] = k
            ranks[k].hand(nxt, arrival[nxt])
            nxt += 1
        steps_now: list = []
        for k, rank in enumerate(ranks):
            rank.t = now
            while True:  # a rank with no tokens applies what it has in flight and tries again (the loop's order)
                rank.intake()
                if watch_start:
                    policy.step_start(k, now, load(rank.rt))
                step = rank.next_step()
                if step.tokens or not rank.drain():
                    break
            steps_now.append(step if step.tokens else None)
        busy = [(k, s) for k, s in enumerate(steps_now) if s is not None]
        if busy:
            ends = {k: ranks[k].timing(s) for k, s in busy}
            longest = max(end - now for end, _ in ends.values())
            if len(busy) < dp:
                longest = max(longest, idle)
            shared = now + longest
            if len(set(end for end, _ in ends.values())) > 1 or len(busy) < dp:
                waited += 1
            steps += 1
            for k, s in busy:
                ranks[k].commit(s, shared, shared)
            for k, rank in enumerate(ranks):
                rank.t = shared
                if steps_now[k] is None:  # its dummy batch: what it holds now (its last output applied) is recorded
                    rt = rank.rt
                    rank.series.add(shared, rt.used_units(), rt.running(), rt.waiting(), 0, 0)
                if watch_end:
                    s, rt = steps_now[k], rank.rt
                    policy.step_end(k, shared, s is not None and s.prefill_tokens > 0,
                                    rt.running() == 0 and rt.waiting() == 0, lambda rt=rt: load(rt))
            now = shared
            if progress is not None and steps % 4096 == 0:
                progress(sum(r.done for r in ranks), n)
            continue
        # with requests waiting, a rank's held memory (a disaggregated prefill's blocks until their transfer
        # ends, ``EngineRuntime.release_due``) is freed before the next arrival when it comes first
        wakes = [r.wake for r in ranks if r.wake is not None and r.rt.waiting()]
        if wakes and (nxt >= state["sent"] or min(wakes) < arrival[nxt]):
            now = max(now, min(wakes))
            continue
        if nxt < state["sent"]:
            now = max(now, arrival[nxt])
            continue
        if nxt == n and all(r.rt.running() == 0 and r.rt.waiting() == 0 for r in ranks):
            break
        for rank in ranks:
            rank.strand()
        for r in range(nxt, n):  # a closed loop whose requests in flight stranded: the rest are never sent
            owner[r] = -1
        break
    if assignment is not None:
        assignment[:] = owner
    if progress is not None:
        progress(n, n)
    return _merged(ranks, owner, trace, dp, balancer, max_concurrency, arrival, (waited, steps, idle))


def _merged(ranks: list[Replayer], owner: list[int], trace: "RuntimeTrace", dp: int, balancer: Balancer,
            max_concurrency: int | None, arrival: list[int], counts: tuple[int, int, int]) -> "RuntimeResult":
    """The ranks' results under the requests' own indices; never-sent requests refused as stranded."""
    import numpy as np
    from dataclasses import replace

    from csa_plan.planner.serving.replicas import merge_replicas

    own = np.asarray(owner, dtype=np.int64)
    owners = [np.flatnonzero(own == k) for k in range(dp)]
    parts = [_restricted(rank.result(), idx) for rank, idx in zip(ranks, owners)]
    sent = np.asarray(arrival, dtype=np.int64) if max_concurrency is not None else None
    merged = merge_replicas(parts, owners, trace, dp, arrival_ns=sent, routing=f"by {balancer.method.value}")
    never = np.flatnonzero(own < 0)
    if len(never):
        refused = dict(merged.refused)
        refused.update({int(r): STRANDED for r in never})
        merged = replace(merged, refused=refused)
    waited, steps, idle = counts
    spread = "/".join(str(len(i)) for i in owners)
    client = "" if max_concurrency is None else f"; one closed-loop client of {max_concurrency:,} connections"
    return replace(merged, notes=merged.notes + (
        f"requests sent by {balancer.label}: {spread} over the {dp} ranks{client} (serving/balanced.py)",
        f"{dp} data-parallel ranks replayed together and stepping together (the MoE collective spans them): "
        f"each shared step lasts as long as the slowest rank's, an idle rank runs a one-token dummy batch "
        f"({idle:,} ns); {waited:,} of {steps:,} steps waited on a slower rank"))


def _restricted(res: "RuntimeResult", idx: Any) -> "RuntimeResult":
    """A rank's result (over the whole trace) kept to its own requests ``idx``, in that order."""
    import numpy as np
    from dataclasses import replace

    at = {int(r): j for j, r in enumerate(idx)}
    pick = lambda v: np.asarray(v, dtype=np.int64)[idx]  # noqa: E731
    return replace(res, arrival_ns=pick(res.arrival_ns), admitted_ns=pick(res.admitted_ns),
                   first_token_ns=pick(res.first_token_ns), finished_ns=pick(res.finished_ns),
                   preemptions=pick(res.preemptions),
                   refused={at[int(r)]: why for r, why in res.refused.items() if int(r) in at})
