"""The one replay loop for every engine runtime (protocol: ``protocol.EngineRuntime``).

Order of one iteration at clock ``t`` (integer ns): add every arrival with
``arrival_ns <= t`` (a request the server refuses is recorded, never added); ask the
engine for a step; a step with tokens lasts ``steptime.batch_ns`` of what it holds and ends at
``t + dt``; with ``pipeline_depth`` 1 its output is applied at its end, with depth 2 the
previous step's output is applied now (it ended at ``t``) and this one's after the next
step is scheduled — vLLM's async scheduling, where step k+1 is scheduled while step k runs.
A step with nothing scheduled waits for the batch in flight, else jumps to the next
arrival (or, with requests waiting, to when the runtime frees memory it holds for a set
time: ``EngineRuntime.release_due``, a disaggregated prefill's blocks until their transfer
ends); with nothing in flight and nothing to come the requests still waiting are
stranded (refused as never fitting) instead of spinning.

``max_concurrency`` C makes the client closed-loop, as ``vllm bench serve --max-concurrency``
and SGLang's ``bench_serving`` run every published row: the trace's order is kept but not its
times; the first C requests are sent at the first arrival, and each request that ends (served,
refused or stranded) sends the next at that moment; the compiled loops do the same.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from csa_plan.planner.replay.early_exit import CHECK_STEPS, StopWatch
from csa_plan.planner.replay.pipeline import PipelineTiming
from csa_plan.planner.replay.protocol import EngineRuntime, RuntimeTrace, Step
from csa_plan.planner.replay.result import RuntimeResult, StepSeries
from csa_plan.planner.errors import BadInput
from csa_plan.planner.steptime.model import StepTime, batch_ns, step_ns
from csa_plan.planner.clock import MAX_CLOCK_NS
from csa_plan.planner.units import NS_PER_S

NEVER = -1
STRANDED = "never fits: nothing running could free enough memory"


def replay(rt: EngineRuntime, trace: RuntimeTrace, time: StepTime,
           progress: Callable[[int, int], None] | None = None, compiled: bool | None = None,
           max_concurrency: int | None = None, on_step: Callable[[Step], None] | None = None,
           pipeline: PipelineTiming | None = None, stop: "StopWatch | None" = None) -> RuntimeResult:
    """The trace through ``rt``: by the engine's compiled loop when it offers one (``compiled=False``
    forces this Python loop, its twin; ``True`` requires the compiled one), else step by step here.
    ``on_step`` sees every step with tokens as it is timed (this loop only: ``tools/fit_steptime.py``).
    ``pipeline`` (``--pp`` above 1, ``replay/pipeline.py``): each step is timed through the stages and
    ``pipeline.in_flight`` batches are in flight; the compiled loops do not take it (this loop runs).
    ``stop`` (``replay/early_exit.py``): raise ``ReplayStopped`` as soon as its rule decides a bound; both
    loops take it (this one every ``CHECK_STEPS`` steps, the compiled ones through their tick). A closed
    loop (``max_concurrency``) does not: its arrivals are not the trace's."""
    if stop is not None and max_concurrency is not None:
        raise RuntimeError("early exit: a closed-loop client's arrivals are set as it runs; replay it in full")
    if pipeline is not None:
        if compiled:
            raise RuntimeError(f"{rt.label or 'this engine'}: the compiled loop does not replay pipeline stages")
        compiled = False
    if on_step is not None:
        compiled = False
    if compiled is not False:
        fast = rt.compiled_replay()
        if fast is not None and stop is not None and not _takes_stop(fast):
            if compiled:
                raise RuntimeError(f"{rt.label or 'this engine'}: the compiled loop does not take the early-exit rule")
            fast = None  # a compiled loop without the early-exit hook: this loop runs, and takes it
        if fast is not None:
            result = fast(trace, time, progress, max_concurrency) if stop is None else \
                fast(trace, time, progress, max_concurrency, stop)
            if progress is not None:
                progress(len(trace), len(trace))
            return result
        if compiled:
            raise RuntimeError(f"{rt.label or 'this engine'}: no compiled loop for these settings (not built?)")
    n = len(trace)
    arrival = trace.arrival_ns.tolist()
    sent = n  # requests whose arrival is set (closed loop: the rest wait for one to end)
    if max_concurrency is not None and n:
        sent = min(n, max_concurrency)
        arrival = [arrival[0]] * sent + [NEVER] * (n - sent)
    admitted = [NEVER] * n
    first_token = [NEVER] * n
    finished = [NEVER] * n
    preemptions = [0] * n
    refused: dict[int, str] = {}
    series = StepSeries.empty(len(rt.pools))
    inflight: deque[tuple[Step, int, int]] = deque()  # (step, its end, when its output is back)
    totals = {"recomputed": 0, "hit": 0, "query": 0}
    t = arrival[0] if n else 0
    nxt = 0
    done = 0
    depth = rt.pipeline_depth if pipeline is None else pipeline.in_flight
    linear = time.linear

    def release(k: int, at: int) -> None:  # a closed loop: k requests ended at ``at``; as many more are sent
        nonlocal sent
        while k > 0 and sent < n:
            arrival[sent] = at
            sent += 1
            k -= 1

    def apply(step: Step, end: int) -> None:
        nonlocal done
        c = rt.complete(step)
        for r in c.first_token:
            if first_token[r] == NEVER:
                first_token[r] = end
        for r in c.finished:
            finished[r] = end
        done += len(c.finished)
        release(len(c.finished), end)

    while True:
        wake = rt.release_due(t)  # memory held for a set time, freed when due (None: none held)
        while nxt < sent and arrival[nxt] <= t:
            reason = rt.refuse(nxt)
            if reason is None:
                rt.add(nxt)
            else:
                refused[nxt] = reason
                done += 1
                release(1, t)
            nxt += 1
        step = rt.schedule()
        for r in step.admitted:
            if admitted[r] == NEVER:
                admitted[r] = t
        for r in step.preempted:
            preemptions[r] += 1
        totals["recomputed"] += step.recomputed_tokens
        totals["hit"] += step.prefix_hit_tokens
        totals["query"] += step.prefix_query_tokens
        if step.tokens:
            if pipeline is None:
                end = t + (step_ns(step.prefill_tokens, time) if linear is None else batch_ns(step.batch, time)) \
                    + step.extra_ns
                back = end
            else:  # through the stages: the next step may start one interval on, the output is back one latency on
                st = pipeline.stage_time
                interval, latency = pipeline.timing(step_ns(step.prefill_tokens, st) if st.linear is None
                                                    else batch_ns(step.batch, st), step.total_tokens)
                end, back = t + interval + step.extra_ns, t + latency + step.extra_ns
            if on_step is not None:
                on_step(step)
            if end > MAX_CLOCK_NS:  # the simulate loops' bound: bad input, never a wrapped (or unstorable) time
                raise BadInput("options", "--tpot-ms / --prefill-tok-s",
                               f"the engine step starting at {t / NS_PER_S:,.0f} s would end past the int64 "
                               "nanosecond clock (about 292 years, MAX_CLOCK_NS): shorten the trace, its token "
                               "counts or the step times")
            if back > MAX_CLOCK_NS:
                raise BadInput("options", "--pp", f"the engine step starting at {t / NS_PER_S:,.0f} s would end "
                               "past the int64 nanosecond clock (MAX_CLOCK_NS)")
            inflight.append((step, end, back))
            waited = end
            while len(inflight) >= depth:  # the queue is full: wait for the oldest batch's output
                s, _, b = inflight.popleft()
                apply(s, b)
                waited = max(waited, b)
                if s is step:
                    break
            t = waited
            series.add(t, rt.used_units(), rt.running(), rt.waiting(), step.total_tokens, step.prefill_tokens)
            if progress is not None and len(series) % 4096 == 0:
                progress(done, n)
            if stop is not None and len(series) % CHECK_STEPS == 0:
                stop.check(arrival, trace.output_tokens, admitted, first_token, finished, len(refused))
            continue
        if inflight:
            s, _, b = inflight.popleft()
            apply(s, b)
            t = max(t, b)
            continue
        if wake is not None and rt.waiting() and (nxt >= sent or wake < arrival[nxt]):
            t = max(t, wake)  # the held memory is freed before anything else happens
            continue
        if nxt < sent:
            t = max(t, arrival[nxt])
            continue
        if rt.running() == 0 and rt.waiting() == 0 and nxt == n:
            break
        for r in rt.stranded():
            refused[r] = STRANDED
            done += 1
        for r in range(nxt, n):  # a closed loop whose requests in flight stranded: the rest are never sent
            refused[r] = STRANDED
            done += 1
        break
    if progress is not None:
        progress(done, n)
    if max_concurrency is not None:
        import numpy as np

        sent_ns = np.array(arrival, dtype=np.int64)  # NEVER: not sent (the loop ended with requests stranded)
    else:
        sent_ns = trace.arrival_ns
    return RuntimeResult(label=rt.label, pools=rt.pools, usable_units=rt.usable_units, arrival_ns=sent_ns,
                         admitted_ns=admitted, first_token_ns=first_token, finished_ns=finished,
                         preemptions=preemptions, refused=refused, series=series.freeze(),
                         recomputed_tokens=totals["recomputed"], prefix_hit_tokens=totals["hit"],
                         prefix_query_tokens=totals["query"], notes=rt.notes(),
                         pool_units=tuple(rt.pool_units), preemption_word=rt.preemption_word)


def _takes_stop(fast: Callable) -> bool:
    """Whether a compiled replay takes the early-exit rule (``stop``; cvllm's and csglang's do)."""
    import inspect

    try:
        return "stop" in inspect.signature(fast).parameters
    except (TypeError, ValueError):
        return False
