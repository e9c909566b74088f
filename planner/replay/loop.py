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
stranded (refused as never fitting) instead of spinning. With SGLang's pipeline micro-batches
(``PipelineTiming.micro_batch_turns``) every scheduling call is a micro-batch's turn, and after each
turn, idle or not, the batch launched ``in_flight - 1`` turns earlier is applied (``settle``).

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
    return Replayer(rt, trace, time, progress, max_concurrency, on_step, pipeline, stop).run()


class Replayer:
    """The one replay loop over one runtime, in parts a caller can step (``run`` is the whole loop).

    ``run`` is what ``replay`` runs. ``serving/balanced.py`` steps several at once (data-parallel ranks
    in lockstep, each request handed to the rank the engine's load balancer picks when it arrives):
    ``handed=True`` starts with no request sent; ``hand(r, at)`` sends request ``r`` at ``at``, and
    ``on_release(k, at)`` hears of every request that ends (served, refused), where a closed loop's
    client sends the next. The parts, in the loop's order: ``intake`` (arrivals up to ``t``),
    ``next_step`` (the engine's step, its admissions and preemptions recorded), ``timing`` (when the
    step ends and its output is back), ``commit`` (in flight, outputs applied, the clock moved, the
    step recorded), ``drain`` (the oldest batch in flight applied), ``strand``, ``result``."""

    def __init__(self, rt: EngineRuntime, trace: RuntimeTrace, time: StepTime,
                 progress: Callable[[int, int], None] | None = None, max_concurrency: int | None = None,
                 on_step: Callable[[Step], None] | None = None, pipeline: PipelineTiming | None = None,
                 stop: "StopWatch | None" = None, handed: bool = False) -> None:
        n = len(trace)
        self.rt, self.trace, self.time, self.n = rt, trace, time, n
        self.progress, self.on_step, self.pipeline, self.stop = progress, on_step, pipeline, stop
        self.closed = max_concurrency is not None
        self.arrival = trace.arrival_ns.tolist()
        self.order: "range | list[int]" = range(n)  # the requests in the order they are sent
        self.sent = n  # requests whose arrival is set (closed loop: the rest wait for one to end)
        self.on_release: Callable[[int, int], None] | None = None
        if handed:
            self.arrival = [NEVER] * n
            self.order = []
            self.sent = 0
        elif max_concurrency is not None and n:
            self.sent = min(n, max_concurrency)
            self.arrival = [self.arrival[0]] * self.sent + [NEVER] * (n - self.sent)
        self.admitted = [NEVER] * n
        self.first_token = [NEVER] * n
        self.finished = [NEVER] * n
        self.preemptions = [0] * n
        self.refused: dict[int, str] = {}
        self.series = StepSeries.empty(len(rt.pools))
        self.inflight: deque[tuple[Step, int, int, int]] = deque()  # (step, its end, when its output is back, turn)
        self.totals = {"recomputed": 0, "hit": 0, "query": 0}
        self.t = self.arrival[0] if n and not handed else 0
        self.nxt = 0
        self.done = 0
        self.depth = rt.pipeline_depth if pipeline is None else pipeline.in_flight
        # SGLang's micro-batches (replay/pipeline.py): each scheduling call is the next micro-batch's turn, and
        # after every turn the batch launched depth - 1 turns earlier (the next micro-batch's) is applied
        self.turns = pipeline is not None and pipeline.micro_batch_turns
        self.turn = 0  # scheduling calls so far (the step next_step returns is turn self.turn - 1)
        self.linear = time.linear
        self.wake: int | None = None  # when the runtime next frees memory it holds (release_due)

    def hand(self, r: int, at: int) -> None:
        """Request ``r`` sent to this runtime at ``at`` (``handed``: a dispatcher's choice)."""
        self.arrival[r] = at
        self.order.append(r)  # type: ignore[union-attr]
        self.sent += 1

    def release(self, k: int, at: int) -> None:
        """``k`` requests ended at ``at``: a closed loop sends as many more (a dispatcher hears of them)."""
        if self.on_release is not None:
            self.on_release(k, at)
            return
        while k > 0 and self.sent < self.n:
            self.arrival[self.sent] = at
            self.sent += 1
            k -= 1

    def apply(self, step: Step, end: int) -> None:
        c = self.rt.complete(step)
        first_token, finished = self.first_token, self.finished
        for r in c.first_token:
            if first_token[r] == NEVER:
                first_token[r] = end
        for r in c.finished:
            finished[r] = end
        self.done += len(c.finished)
        if c.finished:
            self.release(len(c.finished), end)

    def intake(self) -> None:
        """Memory the runtime holds for a set time freed when due (``wake``: when it next frees some; None:
        none held), then every request sent by ``t`` added (or refused, and recorded)."""
        rt, arrival, order, t = self.rt, self.arrival, self.order, self.t
        self.wake = rt.release_due(t)
        while self.nxt < self.sent and arrival[order[self.nxt]] <= t:
            r = order[self.nxt]
            reason = rt.refuse(r)
            if reason is None:
                rt.add(r)
            else:
                self.refused[r] = reason
                self.done += 1
                self.release(1, t)
            self.nxt += 1

    def next_step(self) -> Step:
        """The engine's next step at ``t``, its admissions, preemptions and prefix counts recorded."""
        step = self.rt.schedule()
        self.turn += 1
        t = self.t
        for r in step.admitted:
            if self.admitted[r] == NEVER:
                self.admitted[r] = t
        for r in step.preempted:
            self.preemptions[r] += 1
        self.totals["recomputed"] += step.recomputed_tokens
        self.totals["hit"] += step.prefix_hit_tokens
        self.totals["query"] += step.prefix_query_tokens
        return step

    def timing(self, step: Step) -> tuple[int, int]:
        """When ``step`` (with tokens), started at ``t``, ends and when its output is back."""
        t, time, pipeline = self.t, self.time, self.pipeline
        if pipeline is None:
            end = t + (step_ns(step.prefill_tokens, time) if self.linear is None else batch_ns(step.batch, time)) \
                + step.extra_ns
            back = end
        else:  # through the stages: the next step may start one interval on, the output is back one latency on
            st = pipeline.stage_time
            interval, latency = pipeline.timing(step_ns(step.prefill_tokens, st) if st.linear is None
                                                else batch_ns(step.batch, st), step.total_tokens)
            end, back = t + interval + step.extra_ns, t + latency + step.extra_ns
        if end > MAX_CLOCK_NS:  # the simulate loops' bound: bad input, never a wrapped (or unstorable) time
            raise BadInput("options", "--tpot-ms / --prefill-tok-s",
                           f"the engine step starting at {t / NS_PER_S:,.0f} s would end past the int64 "
                           "nanosecond clock (about 292 years, MAX_CLOCK_NS): shorten the trace, its token "
                           "counts or the step times")
        if back > MAX_CLOCK_NS:
            raise BadInput("options", "--pp", f"the engine step starting at {t / NS_PER_S:,.0f} s would end "
                           "past the int64 nanosecond clock (MAX_CLOCK_NS)")
        return end, back

    def commit(self, step: Step, end: int, back: int) -> None:
        """``step`` in flight until ``end`` (its output back at ``back``): with the queue full, the oldest
        batch's output is applied and the clock moves to when it is back; the step is recorded."""
        if self.on_step is not None:
            self.on_step(step)
        inflight = self.inflight
        inflight.append((step, end, back, self.turn - 1))
        waited = end
        if self.turns:  # the next micro-batch's batch, launched depth - 1 turns ago, is processed now
            self.t = waited
            self.settle()
            waited = self.t
        while len(inflight) >= self.depth:  # the queue is full: wait for the oldest batch's output
            s, _, b, _ = inflight.popleft()
            self.apply(s, b)
            waited = max(waited, b)
            if s is step:
                break
        self.t = waited
        rt, series = self.rt, self.series
        series.add(waited, rt.used_units(), rt.running(), rt.waiting(), step.total_tokens, step.prefill_tokens)
        if self.progress is not None and len(series) % 4096 == 0:
            self.progress(self.done, self.n)
        if self.stop is not None and len(series) % CHECK_STEPS == 0:
            self.stop.check(self.arrival, self.trace.output_tokens, self.admitted, self.first_token, self.finished,
                            len(self.refused))

    def drain(self) -> bool:
        """The oldest batch in flight applied, the clock at its output (False: nothing in flight)."""
        if not self.inflight:
            return False
        s, _, b, _ = self.inflight.popleft()
        self.apply(s, b)
        self.t = max(self.t, b)
        return True

    def settle(self) -> bool:
        """Micro-batch turns (``turns``): after turn k, the batch launched at turn k + 1 - depth (the next
        micro-batch's, ``process_batch_result`` of ``next_mb_id``, sglang-0.5.23
        ``srt/managers/scheduler_pp_mixin.py:137,188-204``) applied, the clock at its output (a synchronous
        receive from the last stage). False: that micro-batch has nothing in flight."""
        inflight = self.inflight
        if not inflight or inflight[0][3] > self.turn - self.depth:
            return False
        return self.drain()

    def held_memory_first(self) -> bool:
        """With requests waiting, the clock moved to when held memory is freed (a disaggregated prefill's
        blocks until their transfer ends), when that comes before the next arrival (False: it does not)."""
        wake = self.wake
        if wake is None or not self.rt.waiting():
            return False
        if self.nxt < self.sent and wake >= self.arrival[self.order[self.nxt]]:
            return False
        self.t = max(self.t, wake)
        return True

    def strand(self) -> None:
        """Nothing runs, nothing is in flight and nothing arrives: the requests still waiting never fit
        (refused); a closed loop's requests not yet sent are never sent."""
        for r in self.rt.stranded():
            self.refused[r] = STRANDED
            self.done += 1
        if self.on_release is None:
            for r in range(self.nxt, self.n):  # a closed loop whose requests in flight stranded: the rest never sent
                self.refused[r] = STRANDED
                self.done += 1

    def run(self) -> RuntimeResult:
        """The whole loop (the module docstring's order)."""
        rt = self.rt
        while True:
            self.intake()
            step = self.next_step()
            if step.tokens:
                self.commit(step, *self.timing(step))
                continue
            if self.turns and self.inflight:  # an idle turn: the next micro-batch's result, else its turn at once
                self.settle()
                continue
            if self.drain():
                continue
            if self.held_memory_first():
                continue
            if self.nxt < self.sent:
                self.t = max(self.t, self.arrival[self.order[self.nxt]])
                continue
            if rt.running() == 0 and rt.waiting() == 0 and self.nxt == self.n:
                break
            self.strand()
            break
        if self.progress is not None:
            self.progress(self.done, self.n)
        return self.result()

    def result(self) -> RuntimeResult:
        rt = self.rt
        if self.closed or self.on_release is not None:
            import numpy as np

            sent_ns = np.array(self.arrival, dtype=np.int64)  # NEVER: not sent (the loop ended with requests stranded)
        else:
            sent_ns = self.trace.arrival_ns
        return RuntimeResult(label=rt.label, pools=rt.pools, usable_units=rt.usable_units, arrival_ns=sent_ns,
                             admitted_ns=self.admitted, first_token_ns=self.first_token, finished_ns=self.finished,
                             preemptions=self.preemptions, refused=self.refused, series=self.series.freeze(),
                             recomputed_tokens=self.totals["recomputed"], prefix_hit_tokens=self.totals["hit"],
                             prefix_query_tokens=self.totals["query"], notes=rt.notes(),
                             pool_units=tuple(rt.pool_units), preemption_word=rt.preemption_word)


def _takes_stop(fast: Callable) -> bool:
    """Whether a compiled replay takes the early-exit rule (``stop``; cvllm's and csglang's do)."""
    import inspect

    try:
        return "stop" in inspect.signature(fast).parameters
    except (TypeError, ValueError):
        return False
