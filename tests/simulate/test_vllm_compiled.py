"""The compiled vLLM 0.33.0 replay (``cvllm``) against its Python twin (``loop.replay`` over ``VllmRuntime``).

Every per-request outcome and every per-step count equal (``RuntimeResult.same_as``, plus the
prefix-query and recomputation totals and the refusals with their reasons, in order), on random
traces and settings: both V4 models' real KV cache groups and random small ones (block sizes
that do and do not divide the 256-token alignment, windows, retained tokens, admission caps),
pools from a handful of blocks (preemption storms, stranded requests) to roomy, token budgets and
max_num_seqs small and large, async scheduling on and off, MTP drafts, prefix caching on and off
with full prefix reuse (every request the same ids) and random ids, prompts beyond max_model_len.
Plus fixed cases on the bundled traces. Skipped (with the reason) where the extension is not built;
CI builds it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from csa_plan.planner.engines.registry import get_engine
from csa_plan.planner.engines.settings import EngineSettings
from csa_plan.planner.engines.vllm.kv_cache_manager import GroupSpec
from csa_plan.planner.engines.vllm.compiled import compiled_module, refusal
from csa_plan.planner.engines.vllm.prefix_caching import PrefixCache
from csa_plan.planner.engines.vllm.scheduler import VllmRuntime
from csa_plan.planner.engines.vllm.compiled import compiled_replay
from csa_plan.planner.loaders.model_files import load_model
from csa_plan.planner.replay.loop import replay
from csa_plan.planner.replay.protocol import RuntimeOptions, RuntimeTrace
from csa_plan.planner.steptime.model import StepTime
from csa_plan.planner.replay.trace import runtime_trace, slice_trace
from csa_plan.planner.workloads.load import load_workload
from helpers.vllm_runtimes import drawn_trace, vllm_runtime_factory

needs_cvllm = pytest.mark.skipif(compiled_module() is None,
                                 reason="the cvllm extension is not built (pip install -e . builds it; CI does)")

ROOT = Path(__file__).resolve().parents[2]
TIME = StepTime(20.0, 10_000.0)
MAX_MODEL_LEN = 8192


def assert_twins(make, trace, time=TIME):
    """The compiled replay of a fresh runtime equals the Python loop over another fresh one."""
    py, c = make(), make()
    assert c.compiled_replay() is not None, refusal(c)
    a = replay(py, trace, time, compiled=False)
    b = replay(c, trace, time, compiled=True)
    assert isinstance(b.admitted_ns, np.ndarray)  # it did run compiled
    assert a.same_as(b)
    assert (a.prefix_query_tokens, a.recomputed_tokens) == (b.prefix_query_tokens, b.recomputed_tokens)
    assert list(a.refused.items()) == list(b.refused.items())
    assert np.array_equal(a.series.prefill_tokens, b.series.prefill_tokens)
    assert (a.label, a.pools, a.usable_units, a.notes, a.pool_units) == (b.label, b.pools, b.usable_units, b.notes,
                                                                         b.pool_units)
    return a, b


@st.composite
def traces(draw, max_requests=16):
    n = draw(st.integers(1, max_requests))
    shared = draw(st.booleans())  # every request the same ids: full prefix reuse
    gaps = draw(st.lists(st.integers(0, 300_000_000), min_size=n, max_size=n))
    prompts = draw(st.lists(st.one_of(st.integers(1, 3000), st.integers(MAX_MODEL_LEN - 300, MAX_MODEL_LEN + 2)),
                            min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 400), min_size=n, max_size=n))
    chunk = draw(st.sampled_from([512, 512, 64, 1000]))
    with_ids = draw(st.booleans()) or shared
    return drawn_trace(draw, gaps, prompts, outputs, shared=shared, max_id=4, chunk=chunk, partial=True,
                       with_ids=with_ids)


def _plan_runtime(model, trace, mnbt, seqs, async_on, caching, spec, spare):
    return vllm_runtime_factory(model, trace, mnbt, seqs, async_on, caching, spec, spare, MAX_MODEL_LEN)


@needs_cvllm
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces(), mnbt=st.sampled_from([64, 256, 2048, 8192]), seqs=st.sampled_from([1, 3, 64, 1024]),
       async_on=st.booleans(), mode=st.sampled_from(["cache", "nocache", "mtp1", "mtp2", "mtp1-cache", "mtp2-cache"]),
       spare=st.sampled_from([0, 5, 40, 300, 5000]), model=st.sampled_from(["deepseek-v4-flash", "deepseek-v4-pro"]))
def test_compiled_equals_python_on_the_v4_groups(trace, mnbt, seqs, async_on, mode, spare, model):
    spec = {"mtp1": 1, "mtp2": 2}.get(mode.split("-")[0], 0)
    seqs = min(seqs, mnbt)  # vLLM refuses max_num_batched_tokens < max_num_seqs (SchedulerConfig; issue 47)
    assert_twins(_plan_runtime(model, trace, mnbt, seqs, async_on, mode.endswith("cache") and mode != "nocache",
                               spec, spare), trace)


@st.composite
def group_specs(draw):
    out = [GroupSpec(draw(st.sampled_from([4, 16, 64, 256])), None)]  # a full-attention group
    for _ in range(draw(st.integers(0, 4))):
        b = draw(st.sampled_from([1, 4, 8, 12, 16, 64, 96, 256]))
        window = draw(st.integers(1, 600))
        # an admission cap that binds can admit a request that then never fits alone (it preempts itself
        # forever, in vLLM and in both twins alike): caps here are at or above a whole sequence's blocks
        cap = draw(st.one_of(st.none(), st.integers(-(-(MAX_MODEL_LEN + 8) // b), 10_000)))
        out.append(GroupSpec(b, window, draw(st.sampled_from([0, 0, 1, 3])), cap))
    if draw(st.booleans()):
        out.append(out[-1])  # equal specs share one lookup
    draw(st.randoms()).shuffle(out)
    return tuple(out)


@needs_cvllm
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces(), specs=group_specs(), spare=st.sampled_from([-10**6, 0, 3, 20, 200, 5000]),
       mnbt=st.sampled_from([16, 256, 2048, 8192]), seqs=st.sampled_from([1, 4, 1024]), async_on=st.booleans(),
       caching=st.booleans(), spec=st.sampled_from([0, 0, 1, 3]), pl=st.sampled_from([0, 1, 2]),
       hash_lookahead=st.sampled_from([0, 0, 1, 3]))
def test_compiled_equals_python_on_random_groups_and_tiny_pools(trace, specs, spare, mnbt, seqs, async_on, caching,
                                                                spec, pl, hash_lookahead):
    """Random group specs straight into ``VllmRuntime`` (MTP with caching and lookahead hashes too). The pool:
    what one longest request needs alone plus ``spare`` blocks (a preemption storm at 0), or 2 blocks (-10**6:
    nothing fits, every request stranded)."""
    alone = sum(-(-(MAX_MODEL_LEN + spec + 1) // s.block_size) for s in specs) + 1
    blocks = max(2, alone + spare)

    def make():
        prefix = PrefixCache(trace, specs, hash_lookahead_tokens=hash_lookahead) if caching else None
        return VllmRuntime(trace, specs, tuple(f"g{i}" for i in range(len(specs))), blocks, MAX_MODEL_LEN, mnbt,
                           seqs, async_on, spec, spec, pl if spec else 0, prefix=prefix, compiled=compiled_replay)

    assert_twins(make, trace)


@needs_cvllm
def test_a_storm_preempts_and_hits_in_both():
    """60 long requests sharing their prompt, a pool at the start-up minimum: preemptions and hits every step."""
    n, prompt, output = 60, 1100, 4000
    k = -(-prompt // 512)
    trace = RuntimeTrace(np.arange(n, dtype=np.int64) * 10_000_000, np.full(n, prompt, dtype=np.int64),
                         np.full(n, output, dtype=np.int64),
                         np.array([j for _ in range(n) for j in range(k)], dtype=np.int64),
                         np.arange(0, k * n + 1, k, dtype=np.int64))
    for async_on in (True, False):
        a, _ = assert_twins(_plan_runtime("deepseek-v4-flash", trace, 2048, 64, async_on, True, 0, 0), trace)
        assert sum(a.preemptions) > 0 and a.prefix_hit_tokens > 0


@needs_cvllm
def test_stranded_and_refused_in_order():
    """A pool too small for any request: all stranded (after the refused one), the same reasons in the same order."""
    trace = RuntimeTrace(np.array([0, 5, 9], dtype=np.int64), np.array([3000, 9000, 2000], dtype=np.int64),
                         np.array([10, 10, 10], dtype=np.int64))
    specs = (GroupSpec(16, None), GroupSpec(4, 8, 0, 40))
    a, b = assert_twins(lambda: VllmRuntime(trace, specs, ("a", "b"), 10, MAX_MODEL_LEN, 2048, 8, True, 0, 0, compiled=compiled_replay),
                        trace)
    assert list(b.refused) == [1, 0, 2] and "max_model_len" in b.refused[1]


@needs_cvllm
def test_clock_overflow_is_the_same_bad_input():
    from csa_plan.planner.errors import BadInput

    trace = RuntimeTrace(np.array([(1 << 63) - 10], dtype=np.int64), np.array([100], dtype=np.int64),
                         np.array([3], dtype=np.int64))
    specs = (GroupSpec(16, None),)
    make = lambda: VllmRuntime(trace, specs, ("a",), 100, MAX_MODEL_LEN, 2048, 8, True, 0, 0, compiled=compiled_replay)
    with pytest.raises(BadInput) as py:
        replay(make(), trace, TIME, compiled=False)
    with pytest.raises(BadInput) as c:
        replay(make(), trace, TIME, compiled=True)
    assert str(py.value) == str(c.value)


def test_settings_outside_int32_run_in_python():
    trace = RuntimeTrace(np.zeros(1, dtype=np.int64), np.ones(1, dtype=np.int64), np.ones(1, dtype=np.int64))
    rt = VllmRuntime(trace, (GroupSpec(16, None),), ("a",), 100, (1 << 30) + 1, 2048, 8, True, 0, 0, compiled=compiled_replay)
    assert rt.compiled_replay() is None and "max_model_len" in refusal(rt)
    rt = VllmRuntime(trace, (GroupSpec(16, None),), ("a",), 100, 4096, 10 ** 10, 8, True, 0, 0, compiled=compiled_replay)
    assert rt.compiled_replay() is None and "max_num_batched_tokens" in refusal(rt)
    assert replay(rt, trace, TIME).finished_ns[0] > 0  # the Python loop takes it


BUNDLED = [
    # (trace, skip, requests, model, KV GiB, max_num_batched_tokens, max_num_seqs, caching)
    ("examples/traces/azure_llm_inference_2023_conv.csv", 0, 1500, "deepseek-v4-flash", 8, 8192, 1024, True),
    ("examples/traces/azure_llm_inference_2023_conv.csv", 3000, 1500, "deepseek-v4-pro", 40, 2048, 8, False),
    ("examples/traces/mooncake_conversation_head200.jsonl", 0, 200, "deepseek-v4-flash", 8, 2048, 1024, True),
    ("examples/traces/mooncake_conversation_head200.jsonl", 0, 200, "deepseek-v4-pro", 10, 8192, 8, False),
]


@needs_cvllm
@pytest.mark.parametrize("case", BUNDLED, ids=lambda c: f"{Path(c[0]).stem}-{c[3]}-{c[4]}GiB-{c[7]}")
def test_compiled_equals_python_on_bundled_traces(case):
    path, skip, count, model, gib, mnbt, seqs, caching = case
    trace = slice_trace(runtime_trace(load_workload(str(ROOT / path))), skip, count)
    m = load_model(model, max_seq_len=131072)
    plan = get_engine("vllm-0.33").configure(m, EngineSettings(max_num_batched_tokens=mnbt, max_num_seqs=seqs),
                                             131072)
    sizing = plan.size_pool(gib << 30)
    a, _ = assert_twins(lambda: plan.runtime(sizing, trace, RuntimeOptions(enable_prefix_caching=caching)), trace)
    assert a.series.steps > 100


def test_a_stale_compiled_replay_is_set_aside(monkeypatch):
    """cvllm carries its calling convention's version; vllm_compiled takes only its own, so an extension
    built from an older cvllm.c (an editable install not rebuilt) is never called: the Python loop runs."""
    import re
    import sys
    import types

    from csa_plan.planner.engines.vllm import compiled as vllm_compiled

    source = (ROOT / "planner" / "engines" / "vllm" / "cvllm.c").read_text()
    assert int(re.search(r"#define CVLLM_ABI (\d+)", source).group(1)) == vllm_compiled.CVLLM_ABI
    stale = types.ModuleType("csa_plan.planner.engines.vllm.cvllm")
    stale.ABI = vllm_compiled.CVLLM_ABI - 1
    monkeypatch.setitem(sys.modules, "csa_plan.planner.engines.vllm.cvllm", stale)
    monkeypatch.setattr(sys.modules["csa_plan.planner.engines.vllm"], "cvllm", stale, raising=False)
    monkeypatch.setattr(vllm_compiled.CVLLM, "_module", False)
    assert vllm_compiled.compiled_module() is None
    trace = RuntimeTrace(np.zeros(1, dtype=np.int64), np.ones(1, dtype=np.int64), np.ones(1, dtype=np.int64))
    rt = VllmRuntime(trace, (GroupSpec(16, None),), ("a",), 100, 4096, 2048, 8, True, 0, 0, compiled=compiled_replay)
    assert rt.compiled_replay() is None
    assert replay(rt, trace, TIME).finished_ns[0] > 0


@needs_cvllm
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=traces(), mnbt=st.sampled_from([256, 2048, 8192]), seqs=st.sampled_from([3, 1024]),
       async_on=st.booleans(), spec=st.sampled_from([1, 2, 3]), caching=st.booleans(),
       acceptance=st.sampled_from([0.05, 0.3, 0.65, 0.9]), spare=st.sampled_from([0, 40, 5000]))
def test_compiled_equals_python_with_drafts_rejected(trace, mnbt, seqs, async_on, spec, caching, acceptance, spare):
    """MTP with a draft acceptance below 1 (--spec-acceptance): rejected drafts roll back num_computed and the
    placeholders in both loops alike (tools/crosscheck_vllm_runtime.py --acceptance checks vLLM's own)."""
    from helpers.vllm_runtimes import vllm_runtime_factory

    assert_twins(vllm_runtime_factory("deepseek-v4-flash", trace, mnbt, min(seqs, mnbt), async_on, caching, spec,
                                      spare, MAX_MODEL_LEN, acceptance), trace)  # seqs <= mnbt: vLLM's own check


def test_fewer_drafts_accepted_mean_more_steps():
    from csa_plan.planner.replay.draft_acceptance import accept, milli_table
    from helpers.vllm_runtimes import vllm_runtime_factory

    milli = milli_table(0.5, 3)
    assert milli == (0, 500, 750, 875)  # 0.5, 0.5 + 0.25, + 0.125
    credit, got = 0, []
    for _ in range(8):
        a, credit = accept(credit, 3, milli)
        got.append(a)
    assert sum(got) == 7 and credit == 0 and max(got) <= 3  # 8 x 0.875 = 7 drafts accepted
    trace = RuntimeTrace(np.zeros(4, dtype=np.int64), np.full(4, 300, dtype=np.int64), np.full(4, 200, dtype=np.int64))
    steps = [replay(vllm_runtime_factory("deepseek-v4-flash", trace, 8192, 1024, True, False, 3, 5000, MAX_MODEL_LEN,
                                         p)(), trace, TIME).series.steps for p in (1.0, 0.5)]
    assert steps[1] > steps[0]
