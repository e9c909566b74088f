"""The vLLM runtime's fast paths against its step-by-step twin (``KvCacheManager(fast=False)``).

The fast runtime skips work it can prove changes nothing: the running loop's inlined
``allocate_slots`` with per-group block thresholds (only groups whose window edge or table
end a step crosses are touched), and ``cache_blocks`` calls whose aligned token count did
not move. The twin walks every group on every call, as vLLM 0.33.0's own code does. Both
must agree on every step and every request — the free-block queue's order and the cached
hashes included, which prefix-cache eviction depends on — on random traces: preemption
storms (a pool just above the start-up minimum), full prefix reuse, MTP drafts with and
without prefix caching (lookahead block hashes), async and sync scheduling, prompts at
max_model_len and at block boundaries.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from csa_plan.planner.replay.loop import replay
from csa_plan.planner.replay.protocol import RuntimeTrace
from csa_plan.planner.steptime.model import StepTime
from helpers.runtime_spy import RuntimeSpy
from helpers.vllm_runtimes import drawn_trace, vllm_runtime_factory

TIME = StepTime(20.0, 10_000.0)
MAX_MODEL_LEN = 8192


class Logged(RuntimeSpy):
    """A runtime that logs, after every schedule and complete, what the twin must match."""

    def _state(self):
        pool = self.rt.kv.pool
        return (pool.num_free(), tuple(pool.in_use), tuple(pool.queue()[:64]), len(pool.cached))

    def schedule(self):
        step = self.rt.schedule()
        self.log.append((tuple(step.requests), tuple(step.tokens), tuple(step.preempted), step.prefill_tokens,
                         step.prefix_hit_tokens, self._state()))
        return step

    def complete(self, step):
        c = self.rt.complete(step)
        self.log.append((tuple(c.first_token), tuple(c.finished), self._state()))
        return c


@st.composite
def traces(draw):
    n = draw(st.integers(1, 16))
    shared = draw(st.booleans())  # every request the same ids: full prefix reuse
    gaps = draw(st.lists(st.integers(0, 300_000_000), min_size=n, max_size=n))
    prompts = draw(st.lists(st.one_of(st.integers(1, 3000), st.integers(MAX_MODEL_LEN - 300, MAX_MODEL_LEN + 2),
                                      st.integers(1, 12).map(lambda k: k * 256)),  # lookahead hashes lag here
                            min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 400), min_size=n, max_size=n))
    return drawn_trace(draw, gaps, prompts, outputs, shared=shared, max_id=4)


def _pair(model, trace, mnbt, seqs, async_on, caching, spec, spare):
    make = vllm_runtime_factory(model, trace, mnbt, seqs, async_on, caching, spec, spare, MAX_MODEL_LEN)
    fast, twin = make(), make()
    twin.kv.fast = False
    return fast, twin


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces(), mnbt=st.sampled_from([64, 256, 2048, 8192]), seqs=st.sampled_from([1, 3, 64]),
       async_on=st.booleans(), mode=st.sampled_from(["cache", "nocache", "mtp1", "mtp2", "mtp1-cache", "mtp3-cache"]),
       spare=st.sampled_from([0, 5, 40, 300, 5000]), model=st.sampled_from(["deepseek-v4-flash", "deepseek-v4-pro"]))
def test_fast_paths_equal_the_step_by_step_twin(trace, mnbt, seqs, async_on, mode, spare, model):
    spec = {"mtp1": 1, "mtp2": 2, "mtp1-cache": 1, "mtp3-cache": 3}.get(mode, 0)
    fast, twin = _pair(model, trace, mnbt, seqs, async_on, mode.endswith("cache") and mode != "nocache", spec, spare)
    assert fast.kv.fast and not twin.kv.fast
    a, b = Logged(fast), Logged(twin)
    ra, rb = replay(a, trace, TIME, compiled=False), replay(b, trace, TIME, compiled=False)
    assert a.log == b.log
    assert ra.same_as(rb)
    assert ra.prefix_query_tokens == rb.prefix_query_tokens and ra.recomputed_tokens == rb.recomputed_tokens
    pa, pb = fast.kv.pool, twin.kv.pool
    assert pa.queue() == pb.queue() and pa.cached == pb.cached and pa.hash == pb.hash


@pytest.mark.parametrize("async_on", [True, False])
def test_a_storm_preempts_and_hits_in_both_twins(async_on):
    """A pool at the start-up minimum and 60 long requests sharing their prompt: preemptions (and, with
    caching, prefix hits) in every step of the storm, and the twins still agree step by step."""
    n, prompt, output = 60, 1100, 4000
    k = -(-prompt // 512)
    trace = RuntimeTrace(np.arange(n, dtype=np.int64) * 10_000_000, np.full(n, prompt, dtype=np.int64),
                         np.full(n, output, dtype=np.int64), np.array([j for _ in range(n) for j in range(k)],
                                                                       dtype=np.int64),
                         np.arange(0, k * n + 1, k, dtype=np.int64))
    fast, twin = _pair("deepseek-v4-flash", trace, 2048, 64, async_on, True, 0, 0)
    a, b = Logged(fast), Logged(twin)
    ra, rb = replay(a, trace, TIME, compiled=False), replay(b, trace, TIME, compiled=False)
    assert sum(ra.preemptions) > 0 and ra.prefix_hit_tokens > 0
    assert a.log == b.log and ra.same_as(rb)
