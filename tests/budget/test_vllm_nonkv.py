"""vLLM's non-KV start-up terms (planner/budget/vllm_nonkv.py) and SGLang's pre-load and graph terms:
the capture lists the releases build, the estimator's shape, the fits re-derived from their logs, the
options as the engines spell them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from csa_plan.planner.budget.device import BudgetRequest, budget
from csa_plan.planner.budget.startup import SGLANG_PRELOAD_BYTES, sglang_reserved_mib
from csa_plan.planner.budget.stage import StartupSettings
from csa_plan.planner.budget.vllm_nonkv import (FIT_025, activation_token_bytes, capture_descs, capture_sizes,
                                                 fit_for, graph_estimate_bytes)
from csa_plan.planner.cards import card
from csa_plan.planner.errors import BadInput
from csa_plan.planner.placement import Placement
from csa_plan.planner.units import GiB, MiB

ONE_M = 1 << 20
RTX = StartupSettings(gpu="rtx-pro-6000", max_num_batched_tokens=4096, max_num_seqs=64, gpu_memory_utilization=0.95,
                      speculative_tokens=2)


def rtx_budget(settings: StartupSettings = RTX, engine: str = "vllm-0.25"):
    return budget(BudgetRequest(model="deepseek-v4-flash", card_bytes=card("rtx-pro-6000").memory_bytes,
                                max_seq_len=ONE_M, engine=engine, placement=Placement(tp=2), settings=settings))


def step(b, prefix: str):
    found = [s for s in b.binding.steps if s.label.startswith(prefix)]
    assert len(found) == 1, [s.label for s in b.binding.steps]
    return found[0]


def test_capture_list_is_the_logs():
    """The RTX PRO 6000 log's flags (max_num_seqs 64, MTP 2, mnbt 4096): vllm-0.25 prints "Profiling CUDA
    graph memory: PIECEWISE=42 (largest=384), FULL=26 (largest=192)"; csa-plan builds the same list."""
    sizes = capture_sizes("vllm-0.25", max_num_seqs=64, mnbt=4096, spec_tokens=2, sm100=False, sizes=None,
                          max_size=None)
    # the log's own compilation_config: 'cudagraph_capture_sizes': [1, 2, 4, 8, 16, ..., 248, 256, 272, ..., 384]
    assert sizes == (1, 2, 4, *range(8, 256, 8), *range(256, 385, 16))
    descs = capture_descs("FULL_AND_PIECEWISE", sizes, 64, 2)
    assert {m: (len(d), d[0], d[1]) for m, d in descs.items()} == {"PIECEWISE": (42, 384, 369), "FULL": (26, 192, 186)}
    # without speculative decoding: 51 sizes up to 512 (ENGINES.md), FULL decode graphs up to max_num_seqs
    plain = capture_sizes("vllm-0.25", max_num_seqs=1024, mnbt=8192, spec_tokens=0, sm100=False, sizes=None,
                          max_size=None)
    assert len(plain) == 51 and plain[-1] == 512
    assert {m: len(d) for m, d in capture_descs("FULL_AND_PIECEWISE", plain, 1024, 0).items()} == \
        {"PIECEWISE": 51, "FULL": 51}
    assert capture_descs("PIECEWISE", plain, 1024, 0).keys() == {"PIECEWISE"}
    assert capture_descs("FULL_DECODE_ONLY", plain, 1024, 0).keys() == {"FULL"}
    assert capture_descs("NONE", plain, 1024, 0) == {}


def test_release_rules_differ_where_the_code_does():
    """0.33 raises the default ceiling to 1024 on sm_100 (config/vllm.py:2463-2465); 0.25 keeps 512."""
    kw = dict(max_num_seqs=1024, mnbt=8192, spec_tokens=0, sizes=None, max_size=None)
    assert capture_sizes("vllm-0.33", sm100=True, **kw)[-1] == 1024
    assert capture_sizes("vllm-0.25", sm100=True, **kw)[-1] == 512
    assert capture_sizes("vllm-0.33", sm100=False, **kw)[-1] == 512
    given = capture_sizes("vllm-0.25", sizes=(1, 2, 4, 9000), max_num_seqs=64, mnbt=8192, spec_tokens=0,
                          sm100=False, max_size=None)
    assert given == (1, 2, 4)  # sizes above max_num_batched_tokens dropped (config/vllm.py:1742-1747)


def test_vllm_033_runs_model_runner_v2():
    """0.33's default runner for DeepSeek-V4 is Model Runner V2 (config/vllm.py:731-767): no spec-decode
    rounding of the capture sizes; FULL decode graphs are the sizes rounded up to the query length
    (cudagraph_utils.py:256-379); PIECEWISE graphs are measured in one pool, not extrapolated (:922-1010)."""
    sizes = capture_sizes("vllm-0.33", max_num_seqs=64, mnbt=4096, spec_tokens=2, sm100=False, sizes=None,
                          max_size=None)
    descs = capture_descs("FULL_AND_PIECEWISE", sizes, 64, 2, v2=True)
    assert len(descs["PIECEWISE"]) == len(sizes) and descs["PIECEWISE"][0] == 384
    assert all(t % 3 == 0 and t <= 192 for t in descs["FULL"]) and descs["FULL"][0] == 192
    v1 = graph_estimate_bytes({"PIECEWISE": [10_000, 8_000, 4]}, 1000, 1_000_000)
    v2 = graph_estimate_bytes({"PIECEWISE": [10_000, 8_000, 4]}, 1000, 1_000_000, piecewise_measured=True)
    assert (v1, v2) == (10_000_000 + 2 * 8_000_000, 10_000_000 + 2 * MiB)
    g = step(rtx_budget(engine="vllm-0.33"), "CUDA graph estimate")
    assert "Model Runner V2" in g.source


def test_estimator_shape_first_plus_per_graph():
    """first capture + (n - 1) x second capture, at least 1 MiB a graph (gpu_model_runner.py:6560-6590)."""
    assert graph_estimate_bytes({"PIECEWISE": [10, 8, 4]}, 1000, 1_000_000) == 10_000 + 2 * MiB
    assert graph_estimate_bytes({"PIECEWISE": [10_000, 8_000, 4]}, 1000, 1_000_000) == 10_000_000 + 2 * 8_000_000
    assert graph_estimate_bytes({"FULL": [5]}, 1000, 500_000) == 2500


def test_fit_rederived_from_the_rtx_log():
    """The 0.25 fit, re-derived from the log's own figures: graphs = (0.95 - 0.9334) x total memory, and
    "Available KV cache memory: 10.29 GiB" (+-0.005 GiB) is what the budget leaves."""
    b = rtx_budget()
    total = card("rtx-pro-6000").memory_bytes
    graphs = step(b, "CUDA graph estimate")
    assert "PIECEWISE=42 (largest=384), FULL=26 (largest=192)" in graphs.label
    assert abs(graphs.bytes - round(0.0166 * total)) < MiB   # 0.9334 is printed to 4 decimals: +-4.9 MiB
    assert abs(b.kv_memory_bytes - 10.29 * GiB) <= 0.005 * GiB
    assert graphs.estimate and graphs.band_pct == 35 and "fitted for vllm-0.25" in graphs.source


def test_each_term_names_its_source_and_band():
    b = rtx_budget()
    act = step(b, "other profile-run activations")
    # the residual hc stream only: the MoE intermediates are a request in the shared workspace
    assert act.bytes == 4096 * 3 * 4 * 4096 * 2 and act.band_pct == 50 and "profile_run" in act.source
    assert 4096 * 184_320 == act.bytes + 4096 * 6 * (3 * 1024 + 4096) * 2  # the graph unit keeps both
    nt = step(b, "non-torch memory")
    assert nt.bytes == FIT_025.non_torch_tp_bytes and "RTX PRO 6000" in nt.source
    assert not any(s.label.startswith("other activations, NCCL") for s in b.binding.steps)  # the flat 2 GiB is gone


def test_a_fit_is_never_used_silently_for_another_release():
    fit, how, widen = fit_for("vllm-0.33")
    assert fit is FIT_025 and widen == 2 and "vllm-0.33 has no posted log" in how and "not re-fitted" in how
    b = rtx_budget(engine="vllm-0.33")
    graphs = step(b, "CUDA graph estimate")
    assert graphs.band_pct == 70 and "vllm-0.25's fit is used" in graphs.source
    with pytest.raises(BadInput, match="no fitted non-KV figures"):
        fit_for("vllm-0.99")


def test_graph_options_change_the_graph_term():
    full = step(rtx_budget(), "CUDA graph estimate").bytes
    eager = rtx_budget(replace(RTX, enforce_eager=True))
    assert step(eager, "CUDA graphs: none captured").bytes == 0
    assert eager.kv_memory_bytes - rtx_budget().kv_memory_bytes == full
    off = rtx_budget(replace(RTX, estimate_cudagraphs=False))
    assert step(off, "CUDA graphs:").bytes == 0 and "not subtracted" in step(off, "CUDA graphs:").label
    pw = rtx_budget(replace(RTX, cudagraph_mode="PIECEWISE"))
    # PIECEWISE alone: no FULL decode graphs, so no rounding to the decode query length: all 43 sizes
    assert "PIECEWISE=43 (largest=384)" in step(pw, "CUDA graph estimate").label
    assert "FULL=" not in step(pw, "CUDA graph").label
    small = rtx_budget(replace(RTX, max_cudagraph_capture_size=96))
    assert "largest=96" in step(small, "CUDA graph estimate").label
    assert step(small, "CUDA graph estimate").bytes < full
    listed = rtx_budget(replace(RTX, cudagraph_capture_sizes=(3, 6, 9)))
    assert "PIECEWISE=3 (largest=9)" in step(listed, "CUDA graph estimate").label


def test_mnbt_scales_the_activation_term():
    a = step(rtx_budget(replace(RTX, max_num_batched_tokens=8192)), "other profile-run activations").bytes
    assert a == 2 * step(rtx_budget(), "other profile-run activations").bytes


def test_activation_bytes_follow_the_model_shapes():
    """Flash at moe tp 2: 3 x 4 x 4096 x 2 + 6 x (3 x 1024 + 4096) x 2 = 184,320 B a token."""
    b = rtx_budget()
    d = b.facts.dims
    assert activation_token_bytes(d, 2) == 184_320
    assert activation_token_bytes(d, 1) == 3 * 4 * 4096 * 2 + 6 * (3 * 2048 + 4096) * 2


def test_mega_moe_buffer_only_with_its_backend():
    base = rtx_budget()
    mega = rtx_budget(replace(RTX, moe_backend="deep_gemm_mega_moe"))
    buf = step(mega, "deep_gemm_mega_moe symmetric buffer")
    assert buf.bytes > 0 and "#51454" in buf.source
    assert base.kv_memory_bytes - mega.kv_memory_bytes == buf.bytes


def sglang_req(**kw):
    return BudgetRequest(model="deepseek-v4-flash", card_bytes=card("l40s").memory_bytes, max_seq_len=65_536,
                         engine="sglang-0.5.23", placement=Placement(tp=8),
                         settings=StartupSettings(gpu="l40s", **kw))


def test_sglang_graph_and_a2a_terms_follow_memory_hook():
    """memory_hook.py:357-414: --disable-cuda-graph drops the decode graph term (max_bs x 2 MiB), DeepEP
    adds 2048 MiB after the floor. On a 48 GB card (no 10 GiB floor) both show in the fraction."""
    from csa_plan.planner.budget.device import _context

    def reserved(**kw):
        req = sglang_req(**kw)
        return sglang_reserved_mib(_context(req, 0, (), None))[0]

    base = reserved()
    assert base - reserved(disable_cuda_graph=True) == 2 * 160  # tier max_bs 160 at tp 8 (35-60 GiB)
    assert reserved(moe_a2a_backend="deepep") - base == 2048
    assert reserved(moe_a2a_backend="deepep", disable_cuda_graph=True) == reserved(disable_cuda_graph=True)


def test_sglang_preload_usage_is_a_step():
    b = budget(sglang_req(mem_fraction_static=0.85))
    pre = step(b, "memory in use before the weights load")
    assert pre.bytes == SGLANG_PRELOAD_BYTES * 85 // 100 and "InferenceX#2128" in pre.source and pre.band_pct == 30


def test_the_waterfall_names_each_term_with_its_source_and_band(csa, tmp_path):
    """Text (label, band, source), --json (source, band_pct) and --budget-plot all carry the terms."""
    args = ("check", "deepseek-v4-flash", "--engine", "vllm-0.25", "--device-memory", "rtx-pro-6000", "--tp", "2",
            "--max-seq-len", "1M", "--max-num-batched-tokens", "4096", "--max-num-seqs", "64",
            "--num-speculative-tokens", "2", "--gpu-memory-utilization", "0.95")
    out = csa(*args).out
    for part in ("CUDA graph estimate: PIECEWISE=42 (largest=384),", "FULL=26 (largest=192) (est. ±35 %)",
                 "(est. ±60 %)", "(est. ±50 %)", "profile_cudagraph_memory"):
        assert part in out, part
    path = tmp_path / "budget.png"
    r = csa(*args, "--budget-plot", str(path))
    assert r.code == 0 and path.stat().st_size > 1000


def test_vllm_027_and_028_capture_lists_and_runners_as_their_code():
    """0.27.0 caps the default capture list at 512 on every card (config/vllm.py:1832-1835) and runs DeepSeek-V4
    on the V1 runner; 0.28.0 raises the cap to 1024 on sm_100 (:1937-1939) without 0.29's uniform decode sizes,
    and runs it on Model Runner V2 (DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES, config/vllm.py:72)."""
    kw = dict(max_num_seqs=1024, mnbt=8192, spec_tokens=0, sizes=None, max_size=None)
    assert capture_sizes("vllm-0.27", sm100=True, **kw)[-1] == 512
    assert capture_sizes("vllm-0.28", sm100=True, **kw)[-1] == 1024
    mtp = dict(max_num_seqs=64, mnbt=4096, spec_tokens=2, sm100=False, sizes=None, max_size=None)
    assert capture_sizes("vllm-0.28", **mtp) == capture_sizes("vllm-0.25", **mtp) != capture_sizes("vllm-0.33", **mtp)
    old = rtx_budget(engine="vllm-0.27")
    assert step(old, "CUDA graph estimate").bytes == step(rtx_budget(engine="vllm-0.26"), "CUDA graph estimate").bytes


def test_vllm_028_subtracts_no_graph_estimate():
    """0.28.0's Model Runner V2 returns 0 from profile_cudagraph_memory (v1/worker/gpu/model_runner.py:843-845):
    determine_available_memory subtracts nothing for graphs, so the pool is larger by 0.27's estimate."""
    b27, b28 = rtx_budget(engine="vllm-0.27"), rtx_budget(engine="vllm-0.28")
    graphs = step(b28, "CUDA graphs:")
    assert graphs.bytes == 0 and "not subtracted" in graphs.label and "model_runner.py:843-845" in graphs.source
    assert b28.kv_memory_bytes - b27.kv_memory_bytes == step(b27, "CUDA graph estimate").bytes
