"""vLLM's shared workspace (planner/budget/vllm_workspace.py): one buffer sized by the largest request, each
request's parts rounded to 256 bytes, and the release-specific request sizes (FlashMLA's gather alone in
0.25/0.26, with the top-k rows in 0.33; the indexer's K-gather rows 40 x max_model_len in 0.25/0.26, the
workspace factor from 0.32)."""

from __future__ import annotations

import pytest

from csa_plan.planner.budget.device import BudgetRequest, budget
from csa_plan.planner.budget.stage import StartupSettings
from csa_plan.planner.budget.vllm_workspace import (WorkspaceRequest, flashmla_request, indexer_request, indexer_rows,
                                                    shared_workspace_step)
from csa_plan.planner.cards import card
from csa_plan.planner.placement import Placement

MIB = 1 << 20
H20 = StartupSettings(gpu="h20", max_num_batched_tokens=8192, max_num_seqs=32, gpu_memory_utilization=0.95,
                      speculative_tokens=1)


def test_parts_round_to_256_bytes_and_requests_do_not_add():
    """get_simultaneous rounds each part up to 256 bytes and sums them (workspace.py:103-105); the buffer is
    only ever grown to the largest single request (:119-191)."""
    assert WorkspaceRequest("a", (1, 255, 257), "x").bytes == 256 + 256 + 512
    small, big = WorkspaceRequest("small", (1000,), "s"), WorkspaceRequest("big", (5000,), "b")
    step = shared_workspace_step("vllm-0.26", (small, big))
    assert step.bytes == 5120 and "big 5,120 B" in step.label and "small 1,024 B" in step.label
    assert "vllm-0.26.0 v1/worker/workspace.py:92-117" in step.source and not step.estimate


@pytest.mark.parametrize("release, extra", [("vllm-0.25", 0), ("vllm-0.26", 0),
                                            ("vllm-0.27", 8192 * 640 * 4 + 8192 * 4),  # 0.27.0 flashmla.py:89-106
                                            ("vllm-0.28", 8192 * 640 * 4 + 8192 * 4),  # 0.28.0 :107-128
                                            ("vllm-0.33", 8192 * 640 * 4 + 8192 * 4)])
def test_flashmla_request_per_release(release, extra):
    """0.25/0.26 flashmla.py:86-101 ask for the bf16 gather only; 0.33 :105-131 adds [mnbt, round_up(top_k + 128,
    128)] and [mnbt] int32 to the same call."""
    m = 236_352
    assert flashmla_request(release, m, 8192, 512).bytes == 4 * m * 512 * 2 + extra


@pytest.mark.parametrize("release, length, rows", [
    ("vllm-0.25", 1 << 20, (1 << 20) * 10),   # 40 x max_model_len // 4 (indexer.py:227-237)
    ("vllm-0.26", 912_128, 9_121_280),         # the preview run of vllm#51041
    ("vllm-0.26", 121_344, 1_213_440),
    ("vllm-0.27", 912_128, 9_121_280),         # still 40 x max_model_len (0.27.0 indexer.py:442-452)
    ("vllm-0.28", 121_344, 1_213_440),         # and in 0.28.0 (:475-485): the factor arrives in 0.32
    ("vllm-0.33", 912_128, 912_128 * 8 * 2 // 4),   # factor 2 above 256K (config/vllm.py:1866-1874)
    ("vllm-0.33", 121_344, 121_344 * 8 * 5 // 4),   # factor 5 up to 256K
])
def test_indexer_rows_per_release(release, length, rows):
    assert indexer_rows(release, length, 4) == rows
    assert indexer_request(release, rows).bytes == rows * 128 + rows * 4 + MIB


def _h20(max_seq_len: int):
    return budget(BudgetRequest(model="deepseek-v4-flash", card_bytes=card("h20").memory_bytes,
                                max_seq_len=max_seq_len, engine="vllm-0.26", placement=Placement(tp=2), settings=H20))


def test_h20_budget_charges_the_largest_request_once():
    """vllm#51041's preview flags (0.26, TP 2, mnbt 8192, 912,128 tokens): the indexer's 9,121,280 K rows
    (1,205,057,536 B with the radix scratch) outgrow FlashMLA's gather (968,097,792 B) and the Marlin MoE workspace
    (805,306,368 B: the H20 is sm_90); one step charges that figure, where the sum would have been 2,978,461,696 B."""
    steps = [s for s in _h20(912_128).binding.steps if s.label.startswith("shared workspace")]
    assert len(steps) == 1
    ws = steps[0]
    indexer, flashmla, moe = 9_121_280 * 132 + MIB, 4 * 236_352 * 1024, 2 * 8192 * 6 * 4096 * 2
    assert ws.bytes == indexer == 1_205_057_536 and not ws.estimate
    for size in (indexer, flashmla, moe):
        assert f"{size:,} B" in ws.label
    labels = [s.label for s in _h20(912_128).binding.steps]
    assert not any(lab.startswith(("FlashMLA sparse-prefill workspace", "indexer K-gather workspace")) for lab in labels)


def test_at_short_length_the_moe_request_is_the_buffer():
    """At 121,344 tokens (the 0731 run) the gathers shrink below the MoE request: on the H20 (sm_90) 0.26's oracle
    picks MarlinExperts, whose workspace_shapes give [M x 6, 4,096] + [M x 6 x 4,096] bf16 at M = 8,192 -- exact,
    no band (tests/budget/test_vllm_moe_workspace.py checks it against vLLM's own code)."""
    ws = next(s for s in _h20(121_344).binding.steps if s.label.startswith("shared workspace"))
    assert ws.bytes == 805_306_368 and not ws.estimate and ws.band_pct is None
    assert "modular_kernel.py:1105" in ws.source and "MarlinExperts" in ws.label


def test_v41_dspark_drafter_has_its_own_lane_on_033():
    """0.33's Model Runner V2 gives a DSpark drafter a second workspace lane (gpu_worker.py:122-128): a second
    step, the larger of the drafter's sliding-window gather and its MoE intermediates."""
    b = budget(BudgetRequest(model="deepseek-v4.1-flash", card_bytes=card("h200").memory_bytes, max_seq_len=1 << 20,
                             engine="vllm-0.33", placement=Placement(tp=8),
                             settings=StartupSettings(speculative_tokens=3)))
    lanes = [s for s in b.binding.steps if s.label.startswith("shared workspace")]
    assert [s.label.split(":")[0] for s in lanes] == ["shared workspace", "shared workspace (DSpark draft lane)"]
    assert "gpu_worker.py:122-128" in lanes[1].source
