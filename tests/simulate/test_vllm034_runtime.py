"""``vllm-0.34``'s runtime against vLLM 0.34.0's own Scheduler, step by step.

vLLM 0.34.0 schedules DeepSeek-V4 and V4.1 with 0.33.0's code on this path (docs/vllm-runtime.md, "vLLM
0.34"): its extensible KV cache settles the pool once before the Scheduler is built, and the scheduler's
changes (cache-aware admission, async KV loads, resumed requests sent as new) are off by default or off the
path. The figures in tests/fixtures/vllm034_runtime_expected.json were captured from vLLM 0.34.0's own
``Scheduler`` / ``AsyncScheduler`` and ``KVCacheManager`` on CPU with a fabricated model output
(tools/capture_vllm_runtime_cases.py with vllm==0.34.0 installed): every step's scheduled tokens per
request, running, waiting, preempted, free blocks and prefix-hit tokens (as a digest), and every request's
admission, first token, finish and preemptions; V4-Flash and V4-Pro (preemption, prefix hits, MTP with
lookahead block hashes) and V4.1-Flash on an H200 and a B200 (rings, bounded replay, DSpark drafts).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from csa_plan.planner.engines.registry import get_engine
from csa_plan.planner.engines.settings import EngineSettings
from csa_plan.planner.loaders.model_files import load_model
from csa_plan.planner.replay.protocol import RuntimeOptions
from csa_plan.planner.replay.trace import runtime_trace, slice_trace
from csa_plan.planner.steptime.model import StepTime
from csa_plan.planner.workloads import load_workload
from helpers.runtime_spy import assert_replay_equals_captured

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = json.loads((ROOT / "tests" / "fixtures" / "vllm034_runtime_expected.json").read_text())
TIME = StepTime(20.0, 10_000.0)


def test_the_fixture_is_vllm_034s_own_run():
    assert EXPECTED["release"].startswith("vllm 0.34.0 ")
    cases = EXPECTED["cases"].values()
    assert any(sum(c["preemptions"]) for c in cases) and any(c["prefix_hit_tokens"] for c in cases)
    assert {c["model"] for c in cases} == {"deepseek-v4-flash", "deepseek-v4-pro", "deepseek-v4.1-flash"}


# vLLM 0.34.0's own run (steps, preemptions, prefix-hit tokens); the V4 rows equal the 0.33.0 fixture's
FIGURES = {
    "mooncake40-flash-8g-cache": (972, 12, 177_664),
    "mooncake40-flash-8g-nocache": (999, 0, 0),
    "azure30-flash-40g-seqs8-sync": (913, 0, 0),
    "mooncake30-pro-10g-cache": (1138, 10, 75_008),
    "mooncake60-flash-8g-cache-mtp1": (587, 5, 47_360),
    "mooncake30-pro-10g-cache-mtp3-sync": (297, 0, 7_168),
    "azure30-flash-40g-seqs8-cache-mtp2": (251, 0, 0),
    "mooncake40-v41flash-h200-0.7g-cache": (1774, 1, 31_552),
    "mooncake40-v41flash-b200-0.5g-cache-dspark5-sync": (339, 0, 14_976),
}


def test_the_captured_figures():
    assert {k: (c["steps"], sum(c["preemptions"]), c["prefix_hit_tokens"])
            for k, c in EXPECTED["cases"].items()} == FIGURES


@pytest.mark.parametrize("name", sorted(EXPECTED["cases"]))
def test_steps_equal_vllm_034s_own_scheduler(name):
    case = EXPECTED["cases"][name]
    trace = slice_trace(runtime_trace(load_workload(str(ROOT / case["trace"]))), case["skip"], case["requests"])
    m = load_model(case["model"], max_seq_len=131072)
    spec = case["num_speculative_tokens"]
    plan = get_engine("vllm-0.34").configure(m, EngineSettings(
        max_num_batched_tokens=case["max_num_batched_tokens"], max_num_seqs=case["max_num_seqs"],
        async_scheduling=case["async_scheduling"], num_speculative_tokens=spec or None, gpu=case["gpu"]), 131072)
    sizing = plan.size_pool(int(case["kv_gib"] * (1 << 30)))
    rt = plan.runtime(sizing, trace, RuntimeOptions(enable_prefix_caching=case["prefix_caching"]))
    assert rt.label == "vLLM 0.34.0"
    assert_replay_equals_captured(rt, trace, TIME, case)


def test_simulate_vllm_034_needs_the_pool_given(csa):
    """The replay runs over --kv-memory; the device budget from flags stays refused (the extensible KV cache)."""
    trace = str(ROOT / "examples" / "traces" / "mooncake_conversation_head200.jsonl")
    r = csa("simulate", trace, "--model", "deepseek-v4-flash", "--engine", "vllm-0.34", "--kv-memory", "40GiB",
            "--tp", "4", "--max-seq-len", "128K")
    assert r.code == 0 and "vLLM 0.34.0 would preempt 0 times" in r.out
    assert "vllm-0.34 (vLLM 0.34.0), its scheduler and KV cache manager replayed" in r.out
    r = csa("simulate", trace, "--model", "deepseek-v4-flash", "--engine", "vllm-0.34", "--device-memory", "h200",
            "--tp", "4", "--max-seq-len", "128K")
    assert r.code == 3 and "give the pool with --kv-memory" in r.err
