"""DeepEP's buffer sizes as DeepEP's own code computes them, and when vLLM / SGLang allocate them.

The expected integers were printed by DeepEP's csrc/legacy/config.hpp itself (deepseek-ai/DeepEP at
dd758caf, compiled on the CPU with its CUDA vector types stubbed to their sizes: ``Config(20, ...)
.get_nvl_buffer_size_hint`` / ``get_rdma_buffer_size_hint`` and ``get_low_latency_rdma_size_hint``),
not by the module under test.
"""

from __future__ import annotations

import pytest

from csa_plan.planner.budget.deepep import (low_latency_rdma_bytes, normal_nvl_bytes, normal_rdma_bytes,
                                            sglang_deepep_buffers, vllm_deepep_buffers)
from csa_plan.planner.units import MiB


@pytest.mark.parametrize(("tokens", "hidden", "experts", "expected"), [
    (8192, 4096, 256, 69_793_220_736),   # vLLM low latency at max_num_batched_tokens 8192, V4-Flash
    (128, 4096, 256, 1_090_521_216),     # SGLang's default 128 tokens a rank, V4-Flash
    (256, 4096, 256, 2_181_040_256),
    (128, 7168, 384, 2_862_615_680),
])
def test_low_latency_rdma_hint_equals_deepeps(tokens, hidden, experts, expected):
    for ranks in (2, 8, 16):  # the layout never reads the rank count
        assert low_latency_rdma_bytes(tokens, hidden, ranks, experts) == expected


@pytest.mark.parametrize(("ranks", "nvl", "rdma"), [
    (2, 52_470_272, 0), (8, 209_880_704, 0), (16, 236_116_224, 57_481_344)])
def test_normal_mode_hints_equal_deepeps(ranks, nvl, rdma):
    # hidden 4096 in bf16: the larger of the dispatch and combine configs, as SGLang takes them
    assert normal_nvl_bytes(8192, ranks) == nvl
    assert normal_rdma_bytes(8192, ranks) == rdma


def test_normal_mode_refuses_a_rank_count_deepep_has_no_config_for():
    with pytest.raises(ValueError, match="no normal-mode config for 3 ranks"):
        normal_nvl_bytes(8192, 3)


def test_vllm_allocates_deepep_only_with_ep_and_dp():
    kw = dict(internode=False, max_num_batched_tokens=8192, hidden=4096, num_experts=256)
    assert vllm_deepep_buffers(None, ep=8, dp=8, **kw) is None
    assert vllm_deepep_buffers("allgather_reducescatter", ep=8, dp=8, **kw) is None
    tp_only = vllm_deepep_buffers("deepep_low_latency", ep=2, dp=1, **kw)  # vllm#51041's TP 2 (+EP)
    assert tp_only is not None and not tp_only.allocated and tp_only.total_bytes == 0
    assert "DP > 1" in tp_only.why and "config.py:1052-1055" in tp_only.why
    ll = vllm_deepep_buffers("deepep_low_latency", ep=8, dp=8, **kw)
    assert ll.allocated and ll.total_bytes == 1024 * MiB + 69_793_220_736
    ht = vllm_deepep_buffers("deepep_high_throughput", ep=8, dp=8, **kw)
    assert ht.total_bytes == 1024 * MiB
    ht2 = vllm_deepep_buffers("deepep_high_throughput", ep=16, dp=16, **{**kw, "internode": True})
    assert ht2.total_bytes == 2 * 1024 * MiB


def test_sglang_deepep_modes():
    normal = sglang_deepep_buffers("normal", ep=8, hidden=4096, num_experts=256)
    assert (normal.nvl_bytes, normal.rdma_bytes) == (209_880_704, 0)
    ll = sglang_deepep_buffers("low_latency", ep=8, hidden=4096, num_experts=256)
    assert (ll.nvl_bytes, ll.rdma_bytes) == (0, 1_090_521_216)
    auto = sglang_deepep_buffers("auto", ep=16, hidden=4096, num_experts=256)
    assert (auto.nvl_bytes, auto.rdma_bytes) == (236_116_224, 1_090_521_216)
    assert auto.total_bytes == 236_116_224 + 1_090_521_216


def _steps(csa, *args):
    r = csa("check", "deepseek-v4-flash", *args, "--json")
    assert r.code in (0, 3), r.err
    d = r.json()
    return d, {s["label"]: s for s in d["budget"]["stages"][0]["steps"]}


def test_vllm_51041_deepep_variant_allocates_nothing_at_tp2(csa):
    """vllm#51041 ran TP 2 on 2x H20 "with and without --all2all-backend deepep_low_latency" (and
    --enable-expert-parallel): vLLM 0.26 builds no DeepEP buffer there (no DP), so the printed pools
    (7.01 / 7.71 GiB) are not explained by DeepEP, and the prediction is the same with and without it."""
    common = ("--engine", "vllm-0.26", "--gpu", "h20", "--tp", "2", "--ep", "2", "--max-seq-len", "912128",
              "--max-num-batched-tokens", "8192", "--max-num-seqs", "32", "--num-speculative-tokens", "1",
              "--no-async-scheduling", "--gpu-memory-utilization", "0.95")
    without, _ = _steps(csa, *common)
    with_ll, steps = _steps(csa, *common, "--all2all-backend", "deepep_low_latency")
    assert with_ll["budget"]["kv_memory_bytes"] == without["budget"]["kv_memory_bytes"]
    step = steps["DeepEP buffers (deepep_low_latency): none allocated (ep 2, dp 1)"]
    assert step["bytes"] == 0 and "DP > 1" in step["source"]


def test_vllm_deepep_buffers_come_off_the_pool_under_dp(csa):
    common = ("--engine", "vllm-0.26", "--device-memory", "h200", "--dp", "8", "--ep", "8", "--max-seq-len", "1M",
              "--max-num-batched-tokens", "256")
    base, _ = _steps(csa, *common)
    ll, steps = _steps(csa, *common, "--all2all-backend", "deepep_low_latency")
    rdma = low_latency_rdma_bytes(256, 4096, 8, 256)
    assert rdma == 2_181_040_256
    assert steps[f"DeepEP buffers (deepep_low_latency): NVLink {1024 * MiB:,} B + RDMA {rdma:,} B"]["bytes"] \
        == 1024 * MiB + rdma
    assert base["budget"]["kv_memory_bytes"] - ll["budget"]["kv_memory_bytes"] == 1024 * MiB + rdma


def test_vllm_all2all_backend_not_modelled_is_refused_not_ignored(csa):
    r = csa("check", "deepseek-v4-flash", "--engine", "vllm-0.26", "--device-memory", "h200", "--dp", "8", "--ep",
            "8", "--max-seq-len", "1M", "--all2all-backend", "deepep_v2")
    assert r.code == 2 and "--all2all-backend: deepep_v2: its buffers are not modelled" in r.err
    assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err
    r = csa("check", "deepseek-v4-flash", "--engine", "sglang-0.5.23", "--kv-memory", "40GiB",
            "--all2all-backend", "deepep_low_latency")
    assert r.code == 2 and "it is vLLM's option" in r.err


def test_sglang_deepep_buffers_are_shown_inside_the_reserve_not_taken_from_the_pool(csa):
    common = ("--engine", "sglang-0.5.23", "--device-memory", "h200", "--tp", "8", "--max-seq-len", "1M")
    d, steps = _steps(csa, *common, "--moe-a2a-backend", "deepep")
    label = ("DeepEP buffers (auto, ep 8): NVLink 209,880,704 B + RDMA 1,090,521,216 B, inside the 2,048 MiB "
             "reserved for them")
    assert steps[label]["bytes"] == 0 and "token_dispatcher/deepep.py:441" in steps[label]["source"]
    plain, plain_steps = _steps(csa, *common)
    assert not any(k.startswith("DeepEP") for k in plain_steps)
    # the pool differs by SGLang's own 2 GiB widening of the reserve (memory_hook.py:402-414), nothing more
    assert plain["budget"]["kv_memory_bytes"] > d["budget"]["kv_memory_bytes"]
