"""Start-up logs people posted for DeepSeek-V4, reproduced by the vLLM release that printed them.

Each test names its source. A log that prints "Available KV cache memory" (or a KV pool size) starts
from that figure: the figure is rounded to 0.01 GiB, so every budget that rounds to it is tried and
the log's own lines must be among what the release prints for them (and the newest release's figures,
which differ, must not be). A log that shows only its flags starts from csa-plan's device budget, and
the test states the difference.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from csa_plan.planner.budget.device import BudgetRequest, budget
from csa_plan.planner.budget.stage import StartupSettings
from csa_plan.planner.engines.engine import EngineRefused
from csa_plan.planner.engines.registry import get_engine
from csa_plan.planner.engines.settings import EngineSettings
from csa_plan.planner.cards import card
from csa_plan.planner.placement import Placement
from csa_plan.planner.units import GiB

ONE_M = 1_048_576
STEP = 1 << 20  # budgets tried across a rounding interval: 1 MiB apart (a block is ~1 MB)


def printed(engine: str, model, settings: EngineSettings, max_model_len: int, gib: float) -> set[str]:
    """Every line ``engine`` prints for a KV budget that its log would show as ``gib`` GiB."""
    plan = get_engine(engine).configure(model, settings, max_model_len)
    lo, hi = int((gib - 0.005) * GiB), int((gib + 0.005) * GiB)
    out: set[str] = set()
    for kv in range(lo, hi, STEP):
        try:
            out.update(plan.size_pool(kv).log_lines)
        except EngineRefused as exc:
            out.add(exc.refusal.message)
    return out


def test_vllm_51041_flash_0731_h20_tp2(flash):
    """vllm-project/vllm#51041 ("0731"): vLLM 0.26.0, 2x H20, TP 2, MTP, --max-num-batched-tokens 8192,
    --max-num-seqs 32, max_model_len 121,344, a 7.71 GiB KV pool: "GPU KV cache size: 150,992 tokens",
    "Maximum concurrency for 121,344 tokens per request: 1.24x". vLLM 0.33's rules give 140,064 / 1.15x."""
    settings = EngineSettings(gpu="h20", max_num_batched_tokens=8192, max_num_seqs=32, num_speculative_tokens=1)
    lines = printed("vllm-0.26", flash, settings, 121_344, 7.71)
    assert "GPU KV cache size: 150,992 tokens" in lines
    assert "Maximum concurrency for 121,344 tokens per request: 1.24x" in lines
    newest = printed("vllm-0.33", flash, settings, 121_344, 7.71)
    assert not any("150,992 tokens" in line for line in newest)
    assert any("140,064 tokens" in line and "1.15x" in line for line in newest)


def test_vllm_51041_flash_preview_h20_tp2_async_off(flash):
    """vllm-project/vllm#51041 (the description's table, the "preview" column): vLLM 0.26.0, the
    DeepSeek-V4-Flash preview checkpoint on 2x H20, TP 2, fp8, block 256, 0.95, MTP, the thread's
    --max-num-batched-tokens 8192 / --max-num-seqs 32, async scheduling off, max_model_len 912,128,
    a 7.01 GiB KV pool: "GPU KV cache size 1,009,661 tokens", 1.11x. Both lines come from one budget
    in the 7.01 GiB interval. With async scheduling on, 0.26 sizes the windows for 2 x 8192 tokens and
    refuses the same pool (10.04 GiB needed), so the log ran with it off; vLLM 0.33's rules give
    989,534-990,984 tokens / 1.08-1.09x."""
    settings = EngineSettings(gpu="h20", max_num_batched_tokens=8192, max_num_seqs=32, num_speculative_tokens=1,
                              async_scheduling=False)
    plan = get_engine("vllm-0.26").configure(flash, settings, 912_128)
    lo, hi = int(7.005 * GiB), int(7.015 * GiB)
    pairs = {tuple(plan.size_pool(kv).log_lines) for kv in range(lo, hi, STEP // 16)}
    assert ("GPU KV cache size: 1,009,661 tokens", "Maximum concurrency for 912,128 tokens per request: 1.11x") in pairs
    on = printed("vllm-0.26", flash, replace(settings, async_scheduling=True), 912_128, 7.01)
    assert on and all("10.04 GiB KV cache is needed" in line for line in on)
    newest = printed("vllm-0.33", flash, settings, 912_128, 7.01)
    assert not any("1,009,661" in line for line in newest)
    assert all("1.08x" in line or "1.09x" in line for line in newest)


def test_vllm_44376_flash_gh200_llm_class(flash):
    """vllm-project/vllm#44376 (comment of 2026-06-03): vLLM ~0.22-0.24 (before 0.26 sized windows for
    the in-flight batches: vllm-0.25's rules), Flash on 2x GH200, ``LLM(...)`` (usage llm: 16,384
    batched tokens on a 96 GB card), max_model_len 30,000, block 256: "(6.66 GiB KV cache is needed,
    which is larger than the available KV cache memory (5.44 GiB). Based on the available memory, the
    estimated maximum model length is 13528." vLLM 0.33's rules need 11.49 GiB."""
    settings = EngineSettings(gpu="gh200", usage="llm", block_size=256)
    assert get_engine("vllm-0.25").configure(flash, settings, 30_000).resolved.max_num_batched_tokens == 16_384
    lines = printed("vllm-0.25", flash, settings, 30_000, 5.44)
    want = ("To serve at least one request with the model's max seq len (30000), (6.66 GiB KV cache is needed, "
            "which is larger than the available KV cache memory (5.44 GiB). Based on the available memory, the "
            "estimated maximum model length is 13528.")
    assert any(want in line for line in lines)
    assert all("6.66 GiB KV cache is needed" not in line for line in printed("vllm-0.33", flash, settings, 30_000, 5.44))


def test_rtx_pro_6000_flash_v0250_full_startup_log(flash):
    """A public full start-up log, "DeepSeek-V4-Flash on stock vLLM v0.25.0 (SM120 / RTX PRO 6000
    Blackwell)": vLLM 0.25.0, 2x RTX PRO 6000 96 GB, TP 2, fp8, 1M, --max-num-seqs 64,
    --max-num-batched-tokens 4096, MTP 2, "Available KV cache memory: 10.29 GiB":
    "GPU KV cache size: 1,993,100 tokens", "Maximum concurrency for 1,048,576 tokens per request: 1.90x".
    vLLM 0.33's rules at the same 10.29 GiB: 1,551,610 tokens / 1.48x."""
    settings = EngineSettings(gpu="rtx-pro-6000", max_num_batched_tokens=4096, max_num_seqs=64,
                              num_speculative_tokens=2)
    lines = printed("vllm-0.25", flash, settings, ONE_M, 10.29)
    assert "GPU KV cache size: 1,993,100 tokens" in lines
    assert "Maximum concurrency for 1,048,576 tokens per request: 1.90x" in lines
    assert "GPU KV cache size: 1,993,100 tokens" not in printed("vllm-0.26", flash, settings, ONE_M, 10.29)


@pytest.mark.parametrize("placement, logged, ours", [
    (Placement(tp=8, ep=8), 20.43, 20.43),        # TP 8 + EP: the mega-MoE buffer's fit
    (Placement(tp=1, dp=8, ep=8), 156.9 / 8, 19.53),  # DP 8: 156.9x for the 8 ranks together (held out)
])
def test_vllm_51454_flash_0731_b200_from_the_device_budget(flash, placement, logged, ours):
    """vllm-project/vllm#51454 + vllm-project/recipes#762: vLLM 0.25.0, 8x B200, --gpu-memory-utilization
    0.95, fp8, --max-num-batched-tokens 8192, --max-num-seqs 256, --moe-backend deep_gemm_mega_moe, 1M:
    "Maximum concurrency for 1,048,576 tokens per request: 20.43x" (TP 8 + EP) and 156.9x for DP 8 (19.61x a
    rank). The log's KV figure is not shown, so the pool comes from csa-plan's device budget (weights, vLLM's
    buffers and its non-KV terms, planner/budget/vllm_nonkv.py): 20.43x (the deep_gemm_mega_moe buffer was
    fitted on it) / 19.53x a rank (-0.4 %). With the flat 2 GiB estimate they were 21.39x / 20.49x, 4.7 % /
    4.5 % above the log. vLLM 0.33's rules on the same budgets stay far below (< 0.75 x the log)."""
    b = budget(BudgetRequest(model="deepseek-v4-flash", card_bytes=card("b200").memory_bytes, max_seq_len=ONE_M,
                             engine="vllm-0.25", placement=placement,
                             settings=StartupSettings(max_num_batched_tokens=8192, gpu_memory_utilization=0.95,
                                                      gpu="b200", max_num_seqs=256,
                                                      moe_backend="deep_gemm_mega_moe")))
    settings = EngineSettings(gpu="b200", max_num_batched_tokens=8192, max_num_seqs=256, gpu_memory_utilization=0.95)
    sizing = get_engine("vllm-0.25").configure(flash, settings, ONE_M).size_pool(b.kv_memory_bytes)
    assert sizing.log_lines[1] == f"Maximum concurrency for 1,048,576 tokens per request: {ours:.2f}x"
    assert abs(sizing.concurrency / logged - 1) < 0.01
    newest = get_engine("vllm-0.33").configure(flash, settings, ONE_M).size_pool(b.kv_memory_bytes)
    assert newest.concurrency < 0.75 * logged


def test_block_sizes_per_release(flash):
    """Block sizes as each release's own code decides them (tools/crosscheck_engines.py drives it):
    0.33 plans 128 and 512 (870,912 / 2,021,760 B a block: the 512 stride kept whole 256-token kernel
    blocks) and fails at 64 (ZeroDivisionError: a C128 page of 0 records); 0.26 plans 512 (2,067,840 B)
    and fails its grouping assertion at 128 and 64 (the SWA page outgrows every full-attention page)."""
    def bpb(engine, block):
        return get_engine(engine).configure(flash, EngineSettings(block_size=block), 65_536).block_bytes

    assert (bpb("vllm-0.33", 128), bpb("vllm-0.33", 256), bpb("vllm-0.33", 512)) == (870_912, 1_002_240, 2_021_760)
    assert (bpb("vllm-0.26", 256), bpb("vllm-0.26", 512)) == (1_039_680, 2_067_840)
    for engine, block, reason in (("vllm-0.33", 64, "ZeroDivisionError"), ("vllm-0.26", 64, "AssertionError"),
                                  ("vllm-0.26", 128, "AssertionError"), ("vllm-0.25", 128, "AssertionError")):
        with pytest.raises(EngineRefused) as exc:
            bpb(engine, block)
        assert reason in exc.value.refusal.message and exc.value.refusal.engine == engine


def test_block_sizes_off_the_128_grid_per_release(flash, pro):
    """A block that is not a multiple of 128 is decided by vLLM 0.25/0.26's own grouping, driven on CPU by
    tools/crosscheck_engines.py: 192 and 200 fail its assertion max(sm_page_sizes) <= max(all_page_sizes)
    (kv_cache_utils.py:1659, AssertionError) and 320 plans (Flash 1,303,488 B a block, 32,949 blocks in
    40 GiB at 65,536 / 8,192 / async / MTP 1; Pro 1,846,080 B, 23,265 blocks). vLLM 0.33 keeps csa-plan's
    not-modelled refusal (its packed grouping is not cross-checked there)."""
    for engine in ("vllm-0.25", "vllm-0.26"):
        for block in (192, 200):
            with pytest.raises(EngineRefused) as exc:
                get_engine(engine).configure(flash, EngineSettings(block_size=block), 65_536)
            assert "AssertionError" in exc.value.refusal.message and "not modelled" not in exc.value.refusal.message
    settings = EngineSettings(block_size=320, max_num_batched_tokens=8192, num_speculative_tokens=1)
    for model, bpb, blocks in ((flash, 1_303_488, 32_949), (pro, 1_846_080, 23_265)):
        plan = get_engine("vllm-0.26").configure(model, settings, 65_536)
        assert plan.block_bytes == bpb and plan.size_pool(40 * GiB).total_units == blocks
    with pytest.raises(EngineRefused) as exc:
        get_engine("vllm-0.33").configure(flash, EngineSettings(block_size=320), 65_536)
    assert "not modelled" in exc.value.refusal.rule


def test_every_output_names_its_release(csa):
    """The start-up note and the log lines of every release say which release's rules they are."""
    for engine in ("vllm-0.25", "vllm-0.26", "vllm-0.33"):
        r = csa("check", "deepseek-v4-flash", "--engine", engine, "--kv-memory", "40GiB", "--json")
        assert r.code == 0, r.err
        e = r.json()["engine"]
        assert e["name"] == engine and e["structures"]["release"] == engine
        assert e["structures"]["startup_note"].startswith(f"{engine}: ")
        assert e["pool"]["release"] == engine


def test_sglang_23933_pro_16x_h20_marlin_is_planned(pro):
    """sgl-project/sglang#23933 (SGLang ~0.5.10, the DeepSeek-V4 branch, with PR #23911): Pro on 16x H20,
    ``SGLANG_SHARED_EXPERT_TP1=1 sglang serve --tp 16 --dp-size 2 --enable-dp-attention`` (csa-plan: --tp 8
    --dp 2 --shared-expert-tp1), ``--moe-runner-backend marlin``, ``--mem-fraction-static 0.9``,
    ``--max-running-requests 16``: "support 1M max_total_num_tokens=1059584".

    The default runner (flashinfer_mxfp4) needs 128-column multiples per rank and refuses 3072 / 16 = 192.
    Marlin takes whole groups of 32 (padded to 64 on sm_90), but SGLang 0.5.23's
    check_quantized_moe_compatibility (moe_ep_setup.py:167-176, driven on CPU: ValueError at tp 16 / ep 1,
    none at ep 2 or with the variable set) still needs 192 % 128 == 0 unless SGLANG_SHARED_EXPERT_TP1=1,
    which the log sets: without --shared-expert-tp1 the deployment is refused with SGLang's reason, with it
    the shared expert is replicated (4,030,661,376 B a rank instead of 251,936,832) and it is planned.

    What is not modelled, and by how much: the pool is sized by SGLang 0.5.23's rules from csa-plan's device
    budget (15,158,066,650 B of KV memory a rank, SGLang's pre-load usage x 0.9 taken; 17,573,985,754 B before
    that term), each DP-attention worker sized for 16 // 2 = 8 requests (pool_configurator.py:956): 2,396,928
    tokens, 2.26x the log (2,224,128 and 2.10x when every rank was sized for all 16). 0.5.23's own pool rules
    give the log's 1,059,584 tokens only at 7.15-7.17 GiB of KV memory, 6.96 GiB less than the budget; the post
    prints no memory line (no "avail mem", no KV allocation size) to tell whether the ~0.5.10 branch's pool
    rules or its memory left for the pool differ, and that release's source is not on PyPI."""
    def request(runner, tp1=False):
        return BudgetRequest(model="deepseek-v4-pro", card_bytes=card("h20").memory_bytes, max_seq_len=ONE_M,
                             engine="sglang-0.5.23", placement=Placement(tp=8, dp=2),
                             settings=StartupSettings(mem_fraction_static=0.9, moe_runner_backend=runner, gpu="h20",
                                                      shared_expert_tp1=tp1))

    from csa_plan.planner.errors import BadInput
    from csa_plan.planner.weights.sharding import Part

    with pytest.raises(BadInput, match="flashinfer_mxfp4 MoE runner needs a multiple of 128 .* got 192"):
        budget(request(None, tp1=True))
    with pytest.raises(BadInput, match=r"moe_tp_size=16\) % weight_block_size_n=128 must be 0, got 192 .*"
                                       r"SGLANG_SHARED_EXPERT_TP1=1 \(--shared-expert-tp1\)"):
        budget(request("marlin"))
    b = budget(request("marlin", tp1=True))
    assert b.fits
    shared = dict(b.device_weights.stages[0].by_part)[Part.SHARED_EXPERTS]
    assert shared == 4_030_661_376  # whole on every rank (251,936,832 B split over the 16 ranks)
    assert b.stages[0].kv_memory_bytes == 15_158_066_650
    default_ep = budget(replace(request(None), placement=Placement(tp=8, dp=2, ep=16)))
    assert b.binding.weights_bytes > default_ep.binding.weights_bytes  # every expert on every rank, split over TP
    settings = EngineSettings(gpu="h20", mem_fraction_static=0.9, max_running_requests=16,
                              moe_runner_backend="marlin", shared_expert_tp1=True, dp_attention_size=2)
    plan = get_engine("sglang-0.5.23").configure(pro, settings, ONE_M)
    sizing = plan.size_pool(b.kv_memory_bytes)
    assert sizing.tokens == 2_396_928 and "max_running_requests=8," in sizing.log_lines[-1]  # 16 // 2 a worker
    assert 2.26 < sizing.tokens / 1_059_584 < 2.27
    near_log = {plan.size_pool(kv).tokens for kv in range(int(7.15 * GiB), int(7.17 * GiB), STEP)}
    assert 1_059_584 in near_log  # the KV memory 0.5.23's rules need for the log's figure: 7.15-7.17 GiB


def test_shared_expert_tp1_is_sglangs_option(csa):
    """--shared-expert-tp1 plans the #23933 deployment from the command line; vLLM refuses the option."""
    args = ("check", "deepseek-v4-pro", "--engine", "sglang-0.5.23", "--gpu", "h20", "--tp", "8", "--dp", "2",
            "--moe-runner-backend", "marlin", "--mem-fraction-static", "0.9", "--max-running-requests", "16",
            "--max-seq-len", "1M")
    refused = csa(*args)
    assert refused.code == 2 and "SGLANG_SHARED_EXPERT_TP1=1 (--shared-expert-tp1)" in refused.err
    r = csa(*args, "--shared-expert-tp1", "--json")
    assert r.code == 0, r.err
    bad = csa("check", "deepseek-v4-flash", "--engine", "vllm-0.33", "--kv-memory", "40GiB", "--shared-expert-tp1")
    assert bad.code == 2 and "--shared-expert-tp1" in bad.err


def test_marlin_pads_a_ranks_expert_width():
    """Marlin pads a rank's intermediate width to 64 on sm_90 (marlin_utils_fp4.py:366-374) and to 128
    elsewhere (mxfp4_marlin_moe.py:83-89): at moe tp 32 Pro's 96 columns become 128 on an H20 (4/3 of the
    bytes of an unpadded split) and stay 128 on an RTX PRO 6000 (sm_120)."""
    from csa_plan.planner.weights.measured import model_weights
    from csa_plan.planner.weights.rules import sglang_runner_rules
    from csa_plan.planner.weights.sharding import _expert_bytes
    from csa_plan.planner.weights.tensors import Role

    inv = model_weights("deepseek-v4-pro").inventory
    w2 = next(w for w in inv.weights if w.role is Role.EXPERT_W2)
    w13 = next(w for w in inv.weights if w.role is Role.EXPERT_W13)
    sm90 = sglang_runner_rules("marlin", (9, 0)).groups(Placement(tp=16, dp=2), 384)
    assert (sm90.moe_tp, sm90.expert_inter_multiple) == (32, 64)
    unpadded = replace(sm90, expert_inter_multiple=1)
    for w in (w2, w13):
        assert 3 * _expert_bytes(w, sm90) == 4 * _expert_bytes(w, unpadded)
    assert sglang_runner_rules("marlin", (12, 0)).groups(Placement(tp=16, dp=2), 384).expert_inter_multiple == 128


def test_marlin_needs_sm90_or_sm120(pro):
    """mxfp4_marlin_moe.py process_weights_after_loading: "MXFP4 Marlin requires SM90 or SM120" — a typed
    refusal naming the card and the capability."""
    with pytest.raises(EngineRefused) as exc:
        get_engine("sglang-0.5.23").configure(pro, EngineSettings(gpu="b200", moe_runner_backend="marlin"), ONE_M)
    r = exc.value.refusal
    assert r.setting == "--moe-runner-backend" and "sm_100" in r.actual and "b200" in r.actual
    assert "sm_90 or sm_120" in r.expected
    for ok in ("h20", "rtx-pro-6000"):
        get_engine("sglang-0.5.23").configure(pro, EngineSettings(gpu=ok, moe_runner_backend="marlin"), ONE_M)
