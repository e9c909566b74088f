"""``vllm-0.33``'s runtime (scheduler + KV cache manager) against vLLM 0.33.0's own Scheduler.

The expected figures in tests/fixtures/vllm_runtime_expected.json were captured from vLLM
0.33.0's own ``Scheduler`` / ``AsyncScheduler`` and ``KVCacheManager`` run on CPU with a
fabricated model output (tools/capture_vllm_runtime_cases.py, release vllm==0.33.0): every
step's scheduled tokens per request, running, waiting, preempted, free blocks and
prefix-hit tokens (as a digest) and every request's admission, first token, finish and
preemptions; with and without MTP draft tokens (MTP with prefix caching: lookahead block
hashes). The Hypothesis properties check invariants on random traces and settings,
preemption storms and full prefix reuse included.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from csa_plan.planner.engines.registry import get_engine
from csa_plan.planner.engines.settings import EngineSettings
from csa_plan.planner.loaders.model_files import load_model
from csa_plan.planner.replay.loop import replay
from csa_plan.planner.replay.protocol import RuntimeOptions, RuntimeTrace
from csa_plan.planner.steptime.model import StepTime
from csa_plan.planner.replay.trace import runtime_trace, slice_trace
from csa_plan.planner.workloads import load_workload
from helpers.runtime_spy import RuntimeSpy, assert_replay_equals_captured
from helpers.vllm_runtimes import drawn_trace

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = json.loads((ROOT / "tests" / "fixtures" / "vllm_runtime_expected.json").read_text())
TIME = StepTime(20.0, 10_000.0)
GiB = 1 << 30


def _runtime(model: str, trace, kv_bytes: int, mnbt: int, seqs: int, caching: bool, async_on: bool,
             max_model_len: int = 131072, spec: int = 0):
    m = load_model(model, max_seq_len=max_model_len)
    plan = get_engine("vllm-0.33").configure(m, EngineSettings(max_num_batched_tokens=mnbt, max_num_seqs=seqs,
                                                               async_scheduling=async_on,
                                                               num_speculative_tokens=spec or None),
                                             max_model_len)
    sizing = plan.size_pool(kv_bytes)
    return plan, sizing, plan.runtime(sizing, trace, RuntimeOptions(enable_prefix_caching=caching))


@pytest.mark.parametrize("name", sorted(EXPECTED["cases"]))
def test_steps_equal_vllm_own_scheduler(name):
    case = EXPECTED["cases"][name]
    trace = slice_trace(runtime_trace(load_workload(str(ROOT / case["trace"]))), case["skip"], case["requests"])
    _, _, rt = _runtime(case["model"], trace, case["kv_gib"] * GiB, case["max_num_batched_tokens"],
                        case["max_num_seqs"], case["prefix_caching"], case["async_scheduling"],
                        spec=case.get("num_speculative_tokens", 0))
    assert_replay_equals_captured(rt, trace, TIME, case)


def test_a_captured_case_preempts_and_hits_the_prefix_cache():
    """The fixtures exercise what matters: preemption by recompute and prefix-cache hits."""
    assert any(sum(c["preemptions"]) for c in EXPECTED["cases"].values())
    assert any(c["prefix_hit_tokens"] for c in EXPECTED["cases"].values())
    mtp_cached = [c for c in EXPECTED["cases"].values() if c.get("num_speculative_tokens") and c["prefix_caching"]]
    assert any(sum(c["preemptions"]) and c["prefix_hit_tokens"] for c in mtp_cached)  # MTP + caching, preempting


class Checked(RuntimeSpy):
    """Invariants after every step: blocks never negative, pool never exceeded, caps held."""

    def __init__(self, rt, seqs: int, mnbt: int):
        super().__init__(rt)
        self.seqs, self.mnbt = seqs, mnbt

    def _check(self):
        pool = self.rt.kv.pool
        assert all(u >= 0 for u in pool.in_use)
        assert min(pool.ref) >= 0
        assert sum(pool.in_use) + pool.num_free() == self.rt.usable_units
        assert self.rt.running() <= self.seqs

    def schedule(self):
        step = self.rt.schedule()
        assert step.total_tokens <= self.mnbt
        self._check()
        return step

    def complete(self, step):
        c = self.rt.complete(step)
        self._check()
        return c


@st.composite
def traces(draw):
    n = draw(st.integers(1, 14))
    shared = draw(st.booleans())  # every request the same ids: full prefix reuse
    gaps = draw(st.lists(st.integers(0, 400_000_000), min_size=n, max_size=n))
    prompts = draw(st.lists(st.integers(1, 5000), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    return drawn_trace(draw, gaps, prompts, outputs, shared=shared, max_id=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces(), mnbt=st.sampled_from([256, 512, 2048]), seqs=st.sampled_from([1, 3, 64]),
       async_on=st.booleans(), caching=st.booleans(), spare=st.integers(0, 300),
       model=st.sampled_from(["deepseek-v4-flash", "deepseek-v4-pro"]))
def test_invariants_on_random_traces(trace, mnbt, seqs, async_on, caching, spare, model):
    max_model_len = 8192
    m = load_model(model, max_seq_len=max_model_len)
    plan = get_engine("vllm-0.33").configure(m, EngineSettings(max_num_batched_tokens=mnbt, max_num_seqs=seqs,
                                                               async_scheduling=async_on), max_model_len)
    kv = plan.needed_bytes(max_model_len) + (spare + 1) * plan.block_bytes  # just above the start-up minimum
    sizing = plan.size_pool(kv)
    rt = plan.runtime(sizing, trace, RuntimeOptions(enable_prefix_caching=caching))
    res = replay(Checked(rt, seqs, mnbt), trace, TIME, compiled=False)  # the Python loop: checked step by step
    for r in range(len(trace)):  # every request finishes or is refused, never both
        assert (res.finished_ns[r] >= 0) != (r in res.refused)
        if res.finished_ns[r] >= 0:
            assert res.arrival_ns[r] <= res.admitted_ns[r] <= res.first_token_ns[r] <= res.finished_ns[r]
    assert sum(rt.kv.pool.in_use) == 0 and rt.kv.pool.num_free() == sizing.usable_units  # all returned
    assert int(res.series.total_used.max(initial=0)) <= sizing.usable_units
    again = plan.runtime(sizing, trace, RuntimeOptions(enable_prefix_caching=caching))
    assert replay(again, trace, TIME).same_as(res)  # deterministic


def test_request_longer_than_max_model_len_is_refused_and_output_clamped():
    trace = RuntimeTrace(np.array([0, 0], dtype=np.int64), np.array([9000, 8000], dtype=np.int64),
                         np.array([10, 5000], dtype=np.int64))
    plan, sizing, rt = _runtime("deepseek-v4-flash", trace, 40 * GiB, 2048, 8, True, True, max_model_len=8192)
    res = replay(rt, trace, TIME, compiled=False)  # rt.reqs read below: the Python loop
    assert list(res.refused) == [0] and "max_model_len" in res.refused[0]
    assert res.finished_ns[1] > 0 and rt.reqs[1].num_output == 8192 - 8000


def test_prefix_caching_off_shares_nothing_and_on_reuses_equal_ids():
    ids = np.arange(8, dtype=np.int64)
    trace = RuntimeTrace(np.array([0, 10_000_000_000], dtype=np.int64), np.array([4096, 4096], dtype=np.int64),
                         np.array([4, 4], dtype=np.int64), np.concatenate([ids, ids]), np.array([0, 8, 16]))
    on = replay(_runtime("deepseek-v4-flash", trace, 40 * GiB, 2048, 8, True, True)[2], trace, TIME)
    off = replay(_runtime("deepseek-v4-flash", trace, 40 * GiB, 2048, 8, False, True)[2], trace, TIME)
    assert off.prefix_hit_tokens == 0
    assert on.prefix_hit_tokens == 3840  # vLLM 0.33.0's own Scheduler on this trace: 15 aligned blocks of 4,095 looked up
