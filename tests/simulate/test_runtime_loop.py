"""The engine-neutral replay loop (planner/replay): clock, arrivals, step time, pipelining."""

from __future__ import annotations

import numpy as np

from csa_plan.planner.replay.loop import replay
from csa_plan.planner.replay.protocol import Completion, EngineRuntime, RuntimeTrace, Step
from csa_plan.planner.steptime.model import StepTime, step_ns


class OneAtATime(EngineRuntime):
    """A toy engine: one request at a time, its whole prompt in one step, then one token a step."""

    pools = ("slots",)
    usable_units = 1

    def __init__(self, trace: RuntimeTrace, depth: int = 1) -> None:
        self.trace, self.queue, self.cur, self.left, self.pipeline_depth = trace, [], None, 0, depth
        self.prefilled = False

    def refuse(self, r):
        return "too long" if self.trace.prompt_tokens[r] > 1000 else None

    def add(self, r):
        self.queue.append(r)

    def schedule(self):
        s = Step()
        if self.cur is None and self.queue:
            self.cur, self.left, self.prefilled = self.queue.pop(0), int(self.trace.output_tokens[0]), False
            s.admitted.append(self.cur)
        if self.cur is not None and self.left > 0:
            n = 1 if self.prefilled else int(self.trace.prompt_tokens[self.cur])
            s.requests, s.tokens, s.prefill_tokens = [self.cur], [n], (0 if self.prefilled else n)
            self.prefilled = True
            self.left -= 1
        return s

    def complete(self, step):
        c = Completion()
        if step.requests and step.prefill_tokens:
            c.first_token.append(step.requests[0])
        if step.requests and self.left == 0:
            c.finished.append(self.cur)
            self.cur = None
        return c

    def used_units(self):
        return (int(self.cur is not None),)

    def running(self):
        return int(self.cur is not None)

    def waiting(self):
        return len(self.queue)


def test_step_time_is_the_larger_of_tpot_and_prefill():
    t = StepTime(tpot_ms=20.0, prefill_tok_s=10_000.0)
    assert step_ns(0, t) == 20_000_000
    assert step_ns(100, t) == 20_000_000
    assert step_ns(1_000, t) == 100_000_000


def test_loop_clock_waits_and_refusals():
    trace = RuntimeTrace(np.array([0, 0, 5_000_000_000], dtype=np.int64), np.array([1000, 2000, 500], dtype=np.int64),
                         np.array([3, 3, 3], dtype=np.int64))
    res = replay(OneAtATime(trace), trace, StepTime(20.0, 10_000.0))
    assert res.refused == {1: "too long"}
    # request 0: prefill 1000 tokens = 100 ms, then two decode steps of 20 ms
    assert res.admitted_ns[0] == 0 and res.first_token_ns[0] == 100_000_000 and res.finished_ns[0] == 140_000_000
    # request 2 arrives at 5 s into an idle engine: the clock jumps to it
    assert res.admitted_ns[2] == 5_000_000_000 and res.finished_ns[2] == 5_000_000_000 + 50_000_000 + 40_000_000
    assert res.series.steps == 6 and res.series.used.shape == (6, 1)
