"""MTP (``--num-speculative-tokens N``) with prefix caching in ``simulate --engine vllm-0.33``.

vLLM 0.33.0 gives DeepSeek-V4's MTP drafter lookahead block hashes, not the EAGLE trailing-block
drop (config/vllm.py:677-690 ``num_hash_lookahead_tokens``; sched/scheduler.py:342-345): the hash
of the block ending at T also covers token T (one MTP module: one lookahead token). The figures
below were captured from vLLM 0.33.0's own ``Scheduler`` / ``AsyncScheduler`` on CPU through
tools/crosscheck_vllm_runtime.py (``build_scheduler`` + ``VllmReference``, V4-Flash,
max_model_len 131,072, 40 GiB, max_num_batched_tokens 2,048, max_num_seqs 8): per admission
step the admitted request, its prefix-hit tokens and the distinct blocks in use per KV cache group.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from csa_plan.planner.engines.registry import get_engine
from csa_plan.planner.engines.settings import EngineSettings
from csa_plan.planner.loaders.model_files import load_model
from csa_plan.planner.replay.loop import replay
from csa_plan.planner.replay.protocol import RuntimeOptions, RuntimeTrace
from csa_plan.planner.steptime.model import StepTime
from helpers.runtime_spy import RuntimeSpy

TIME = StepTime(20.0, 10_000.0)
GiB = 1 << 30

# Three 1,024-token prompts, 10 s apart, sharing their first 512-token id chunk and then diverging
# (ids [0, 1], [0, 2], [0, 3]); 4 output tokens each. Without MTP the third request hits the 512
# tokens the second one cached at its shared-prefix junction; with MTP the block ending at 512 also
# covers token 512 (the diverging chunk), so the junction lands one block lower: 256.
JUNCTION = RuntimeTrace(np.arange(3, dtype=np.int64) * 10_000_000_000, np.full(3, 1024, dtype=np.int64),
                        np.full(3, 4, dtype=np.int64), np.array([0, 1, 0, 2, 0, 3], dtype=np.int64),
                        np.array([0, 2, 4, 6], dtype=np.int64))
NO_MTP = [([0], 0, (16, 16, 4, 256, 128)), ([1], 0, (16, 16, 4, 256, 128)), ([2], 512, (10, 10, 4, 130, 80))]
# MTP: every group also holds the lookahead slots (1,024 + N tokens; the 256-token group 5 blocks, not 4)
MTP = [([0], 0, (17, 17, 5, 257, 129)), ([1], 0, (17, 17, 5, 257, 129)), ([2], 256, (15, 15, 5, 195, 113))]


class Admissions(RuntimeSpy):
    """Logs, for each step that admits, what the capture logged from vLLM's scheduler."""

    def schedule(self):
        step = self.rt.schedule()
        if step.admitted:
            self.log.append((list(step.admitted), step.prefix_hit_tokens, self.rt.used_units()))
        return step


def _plan(model: str, spec: int, async_on: bool = True):
    m = load_model(model, max_seq_len=131072)
    return get_engine("vllm-0.33").configure(m, EngineSettings(max_num_batched_tokens=2048, max_num_seqs=8,
                                                               async_scheduling=async_on,
                                                               num_speculative_tokens=spec or None), 131072)


@pytest.mark.parametrize("async_on", [True, False])
@pytest.mark.parametrize("spec, expected", [(0, NO_MTP), (1, MTP), (3, MTP)])
def test_mtp_moves_the_junction_hit_and_holds_lookahead_blocks_as_vllm_does(spec, expected, async_on):
    plan = _plan("deepseek-v4-flash", spec, async_on)
    rt = plan.runtime(plan.size_pool(40 * GiB), JUNCTION, RuntimeOptions(enable_prefix_caching=True))
    logged = Admissions(rt)
    res = replay(logged, JUNCTION, TIME, compiled=False)
    assert logged.log == expected
    assert res.prefix_hit_tokens == expected[-1][1]
    assert all(f >= 0 for f in res.finished_ns)


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "deepseek-v4-pro"])
@pytest.mark.parametrize("spec", [1, 2, 3])
def test_one_mtp_module_hashes_one_lookahead_token(model, spec):
    """num_hash_lookahead_tokens = num_prefill_lookahead_tokens: 1 for one MTP module whatever N
    (config/vllm.py:654-690); none without caching, none without MTP."""
    plan = _plan(model, spec)
    sizing = plan.size_pool(40 * GiB)
    assert plan.hash_lookahead() == 1
    assert plan.runtime(sizing, JUNCTION, RuntimeOptions(enable_prefix_caching=True)).prefix.lookahead == 1
    assert plan.runtime(sizing, JUNCTION, RuntimeOptions(enable_prefix_caching=False)).prefix is None
    plain = _plan(model, 0)
    assert plain.runtime(plain.size_pool(40 * GiB), JUNCTION, RuntimeOptions()).prefix.lookahead == 0


def test_a_prompts_last_block_is_hashed_one_token_later_with_mtp():
    """kv_cache_utils.py:974-983: hashes stop at num_tokens - L, so a 1,024-token prompt has 1,020
    hashed tokens under MTP (its last 4-token hash block waits for the first output token), 1,024 without."""
    for spec, hashed in ((0, 1024), (1, 1020)):
        plan = _plan("deepseek-v4-flash", spec)
        rt = plan.runtime(plan.size_pool(40 * GiB), JUNCTION, RuntimeOptions())
        rt.add(0)
        req = rt.reqs[0]
        assert rt.prefix.hashed_tokens(req) == hashed
        req.num_output = 1
        assert rt.prefix.hashed_tokens(req) == 1024  # 1,025 tokens: both have all 256 full hash blocks


@pytest.mark.parametrize("spec", [1, 3])
def test_mtp_with_caching_compiled_equals_the_python_twin(spec):
    """The compiled loop (``cvllm``) models lookahead hashes too: it takes MTP with prefix caching and
    equals the Python runtime (tests/simulate/test_vllm_compiled.py checks it under Hypothesis)."""
    from csa_plan.planner.engines.vllm.compiled import compiled_module

    if compiled_module() is None:
        pytest.skip("the cvllm extension is not built")
    plan = _plan("deepseek-v4-flash", spec)
    make = lambda: plan.runtime(plan.size_pool(40 * GiB), JUNCTION, RuntimeOptions(enable_prefix_caching=True))
    rt = make()
    assert rt.prefix is not None and rt.num_spec > 0 and rt.prefix.lookahead > 0
    assert rt.compiled_replay() is not None
    a, b = replay(make(), JUNCTION, TIME, compiled=False), replay(rt, JUNCTION, TIME, compiled=True)
    assert a.same_as(b) and a.prefix_hit_tokens == b.prefix_hit_tokens > 0


@pytest.fixture(scope="module")
def two_module_model(tmp_path_factory):
    """V4-Flash with two MTP modules (``num_nextn_predict_layers`` 2): multi-module MTP, so the prefill
    lookahead, the hash lookahead and every window's extra_retained_tokens follow N."""
    from csa_plan.planner import presets
    from csa_plan.planner.loaders.model_files import PRESETS

    cfg = json.loads((Path(presets.__file__).parent / PRESETS["deepseek-v4-flash"]).read_text())
    cfg["num_nextn_predict_layers"] = 2
    cfg["compress_ratios"] = list(cfg["compress_ratios"]) + [0]
    d = tmp_path_factory.mktemp("v4flash-2mtp")
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


@pytest.mark.parametrize("async_on", [True, False])
@pytest.mark.parametrize("spec", [2, 3])
def test_multi_module_mtp_hashes_n_lookahead_tokens_and_matches_vllm(two_module_model, spec, async_on):
    """The same junction through vLLM 0.33.0's own scheduler with two MTP modules (captured the same way)."""
    m = load_model(two_module_model, max_seq_len=131072)
    plan = get_engine("vllm-0.33").configure(m, EngineSettings(max_num_batched_tokens=2048, max_num_seqs=8,
                                                               async_scheduling=async_on,
                                                               num_speculative_tokens=spec), 131072)
    assert plan.hash_lookahead() == spec
    # kv_cache_planning.py:1634-1641: every SlidingWindowSpec (SWA and compressor state) keeps N - 1 more tokens
    assert {g.first.extra_retained_tokens for g in plan.groups if g.first.sliding_window} == {spec - 1}
    rt = plan.runtime(plan.size_pool(40 * GiB), JUNCTION, RuntimeOptions(enable_prefix_caching=True))
    logged = Admissions(rt)
    replay(logged, JUNCTION, TIME, compiled=False)
    assert logged.log == MTP
