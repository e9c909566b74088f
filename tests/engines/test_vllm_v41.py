"""vllm-0.33 / vllm-0.34 on DeepSeek-V4.1-Flash: the start-up pool and the replay, equal to vLLM's own code.

Every figure below was computed by vLLM 0.33.0's (and 0.34.0's: the same on every row) own code on the CPU,
not by csa-plan: the specs from the model's own ``get_kv_cache_spec`` methods, the groups, bytes per block,
blocks per request, num_blocks and log line from ``v1/core/kv_cache_planning.py`` / ``kv_cache_utils.py``:

    PYTHONPATH=<vllm-0.33.0 wheel> python -c "import sys; sys.path.insert(0, 'tools'); \
        import crosscheck_engines as c; [print(l) for _, l in c.run_vllm_v41(False, 'vllm-0.33')]"

(tools/crosscheck_engines.py ``vllm_v41_case``; 396 cases, all equal, in 0.33.0 and 0.34.0). The replay
figures come from vLLM 0.33.0's own ``Scheduler`` stepped over the same trace
(``python tools/crosscheck_vllm_runtime.py --only deepseek-v4.1``: 18 cases, every step equal).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from csa_plan.planner.engines.engine import EngineRefused
from csa_plan.planner.engines.registry import get_engine
from csa_plan.planner.engines.settings import EngineSettings
from csa_plan.planner.loaders.model_files import load_model
from csa_plan.planner.units import GiB

from helpers import EXAMPLES

V41 = load_model("deepseek-v4.1-flash")
MOONCAKE = str(EXAMPLES / "traces" / "mooncake_conversation_head200.jsonl")


def plan(engine="vllm-0.33", length=1_048_576, **settings):
    base = dict(max_num_batched_tokens=16384)
    base.update(settings)
    return get_engine(engine).configure(V41, EngineSettings(**base), length)


# (gpu, dspark drafts, extra settings) -> (group sizes, page sums, bytes per block, blocks per request at 1M,
# num_blocks of 40 GiB, the log line): vLLM 0.33.0's own figures (crosscheck_engines.vllm_v41_case)
VLLM_FIGURES = [
    ("h200", 0, {}, [6, 6, 6, 6, 6, 5, 5, 8, 3], 116_928, 23_588, 367_317,
     "GPU KV cache size: 16,328,632 tokens, Maximum concurrency for 1,048,576 tokens per request: 15.57x"),
    ("h200", 5, {}, [6, 6, 6, 5, 5, 5, 5, 5, 8, 3], 116_928, 24_617, 367_317,
     "GPU KV cache size: 15,646,089 tokens, Maximum concurrency for 1,048,576 tokens per request: 14.92x"),
    ("b200", 0, {}, [8, 8, 8, 8, 8, 8, 3], 136_224, 13_338, 315_287,
     "GPU KV cache size: 24,786,503 tokens, Maximum concurrency for 1,048,576 tokens per request: 23.64x"),
    ("b200", 5, {}, [8, 7, 7, 7, 7, 7, 8, 3], 136_224, 14_367, 315_287,
     "GPU KV cache size: 23,011,232 tokens, Maximum concurrency for 1,048,576 tokens per request: 21.95x"),
    ("b200", 0, {"indexer_kv_dtype": "mxfp4"}, [6, 6, 6, 6, 6, 5, 5, 8, 3], 117_216, 15_396, 366_414,
     "GPU KV cache size: 24,955,373 tokens, Maximum concurrency for 1,048,576 tokens per request: 23.80x"),
    ("b200", 5, {"block_size": 512}, [22, 21, 8, 3], 6_893_568, 4_107, 6_230,
     "GPU KV cache size: 1,590,608 tokens, Maximum concurrency for 1,048,576 tokens per request: 1.52x"),
]


@pytest.mark.parametrize("engine", ["vllm-0.33", "vllm-0.34"])
@pytest.mark.parametrize("gpu, drafts, extra, sizes, bpb, per_request, blocks, line", VLLM_FIGURES)
def test_start_up_pool_equals_vllms_own_planning(engine, gpu, drafts, extra, sizes, bpb, per_request, blocks, line):
    p = plan(engine, gpu=gpu, num_speculative_tokens=drafts or None, **extra)
    assert [len(g.specs) for g in p.groups] == sizes
    assert p.block_bytes == bpb
    assert p.startup_budget().units == per_request
    sizing = p.size_pool(40 * GiB)
    assert sizing.total_units == blocks
    assert sizing.log_lines == (line,)


def test_owners_records_keys_windows_and_rings_as_the_model_code_registers_them():
    h200, b200 = plan(gpu="h200"), plan(gpu="b200")
    for p, rec, key, window, block, align in ((h200, 584, 132, 584, 64, 576), (b200, 288, 132, 528, 128, 512)):
        owners = [s for s in p.specs if s.role.endswith("records")]
        assert [s.layer_id for s in owners] == [2, 8, 14, 20]
        assert {s.state_content_bytes for s in owners} == {rec}
        assert [s.tokens_per_state for s in owners] == [2, 2, 2, 1]
        keys = [s for s in p.specs if s.role.endswith("index keys")]
        assert [s.layer_id for s in keys] == [2, 8, 14, 20] and {s.state_content_bytes for s in keys} == {key}
        windows = [s for s in p.specs if s.role == "SWA cache"]
        assert len(windows) == 40 and {(s.block_size, s.state_content_bytes) for s in windows} == {(32, window)}
        rings = [s for s in p.specs if s.role == "C2 carry ring"]
        assert [s.layer_id for s in rings] == [2, 8, 14] and {s.page_bytes for s in rings} == {8 * 4096}
        assert {s.block_size for s in owners} == {block} and {s.alignment for s in owners} == {align}
    # DEEPSEEK_V41.md §4: 1,790 B/token on H200 (584 + 132), 1,050 on B200 (288 NVFP4 + 132)
    assert h200.shared_bytes_per_token()[0] == 1_790 and b200.shared_bytes_per_token()[0] == 1_050
    # three DSpark draft windows with drafting; rings of max(8, pow2 >= drafts + 2) rows
    drafting = plan(gpu="h200", num_speculative_tokens=7)
    assert sum(s.is_draft for s in drafting.specs) == 3
    assert {s.block_size for s in drafting.specs if s.role == "C2 carry ring"} == {16}


@pytest.mark.parametrize("settings, rule", [
    ({"gpu": "h200", "kv_cache_dtype": "nvfp4_ds_mla"}, "attention.py:532-536"),
    ({"gpu": "h200", "indexer_kv_dtype": "mxfp4"}, "dsa_indexer_uses_fp4"),
    ({"gpu": "h200", "kv_cache_dtype": "bfloat16"}, "_resolve_dsv4_kv_cache_dtype"),
    ({"gpu": "h200", "block_size": 96}, "get_supported_kernel_block_sizes"),
    ({"gpu": "b200", "block_size": 64}, "get_supported_kernel_block_sizes"),
    ({"gpu": "h200", "max_num_batched_tokens": 256, "max_num_seqs": 512}, "config/scheduler.py"),
])
def test_what_vllm_refuses_is_a_typed_refusal(settings, rule):
    with pytest.raises(EngineRefused) as exc:
        plan(**settings)
    assert rule in exc.value.refusal.rule


def test_ratios_other_than_0_1_2_are_refused_as_the_model_code_does():
    bad = replace(V41, layers=tuple(d.with_(compression_ratio=4) if d.layer_id == 5 else d for d in V41.layers))
    with pytest.raises(EngineRefused) as exc:
        get_engine("vllm-0.33").configure(bad, EngineSettings(gpu="h200"), 65_536)
    assert "attention.py:326-331" in exc.value.refusal.rule and "compress_ratio=4" in exc.value.refusal.message


@pytest.mark.parametrize("engine", ["vllm-0.26", "vllm-0.25"])
def test_releases_before_v41_refuse_typed(engine):
    with pytest.raises(EngineRefused) as exc:
        plan(engine, gpu="h200")
    assert "0.30.0" in exc.value.refusal.rule


def test_check_pp_split_inside_a_group_is_vllms_typed_refusal(csa):
    r = csa("check", "deepseek-v4.1-flash", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "4", "--pp", "3",
            "--engine", "vllm-0.33")
    assert r.code == 3 and "SharingGroupSplit" in r.err


def test_check_shows_the_shared_state_and_the_engine_log(csa):
    r = csa("check", "deepseek-v4.1-flash", "--max-seq-len", "1M", "--device-memory", "b200", "--tp", "8",
            "--engine", "vllm-0.33", "--json")
    assert r.code == 0
    doc = r.json()
    structures = doc["engine"]["structures"]
    assert structures["shared_state_bytes_per_token"]["unpadded"] == 1_050
    assert structures["bytes_per_block"] == 136_224


@pytest.mark.parametrize("gpu, kv_gib, peak_running, hits, preemptions", [
    ("h200", 4, 85, 38_016, 0),
    ("h200", 0.7, 20, 54_592, 1),
    ("b200", 0.7, 32, 103_936, 3),
])
def test_replay_equals_vllms_scheduler_on_the_mooncake_head(gpu, kv_gib, peak_running, hits, preemptions):
    """100 Mooncake requests, max_model_len 131,072, max_num_batched_tokens 8,192, prefix caching on: vLLM
    0.33.0's Scheduler gave these (tools/crosscheck_vllm_runtime.py, mooncake-head@h200 / -tight@h200 /
    -tight@b200), a hit rewound by the 128-token window it replays, rings one block per running request."""
    from csa_plan.planner.replay.loop import replay
    from csa_plan.planner.replay.protocol import RuntimeOptions
    from csa_plan.planner.replay.trace import runtime_trace, slice_trace
    from csa_plan.planner.steptime.model import StepTime
    from csa_plan.planner.workloads import load_workload

    model = load_model("deepseek-v4.1-flash", max_seq_len=131_072)
    trace = slice_trace(runtime_trace(load_workload(MOONCAKE)), 0, 100)
    p = get_engine("vllm-0.33").configure(model, EngineSettings(gpu=gpu, max_num_batched_tokens=8192,
                                                                max_num_seqs=1024), 131_072)
    sizing = p.size_pool(int(kv_gib * GiB))
    rt = p.runtime(sizing, trace, RuntimeOptions(enable_prefix_caching=True))
    assert rt.compiled_replay() is None  # rings / uncached windows run in the Python replay
    result = replay(rt, trace, StepTime(20.0, 10_000.0), compiled=False)
    assert int(result.series.running.max()) == peak_running
    assert result.prefix_hit_tokens == hits and sum(result.preemptions) == preemptions
    assert not result.refused


def test_simulate_refuses_a_release_without_v41_typed(csa):
    r = csa("simulate", MOONCAKE, "--model", "deepseek-v4.1-flash", "--device-memory", "h200", "--tp", "8",
            "--engine", "vllm-0.26", "--step-time", "fixed", "--json")
    assert r.code == 3
    doc = r.json()
    assert "EngineReleaseUnsupported" in doc["engine_refusal"]["rule"] and doc.get("runtime") is None


def test_compare_takes_v41_under_vllm_and_names_the_refused_release(csa):
    r = csa("compare", "deepseek-v4.1-flash", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "8",
            "--engine", "vllm-0.33", "--engine", "vllm-0.26", "--json")
    doc = r.json()
    rows = {row["profile"]: row for row in doc["profiles"]}
    c = csa("check", "deepseek-v4.1-flash", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "8",
            "--engine", "vllm-0.33", "--json")
    # the same engine model and budget as check: its 'Maximum concurrency' on 8 x H200 at 1M
    assert rows["vllm-0.33"]["requests_that_fit"] == c.json()["fit"]["requests_that_fit"] > 0
    assert [e["engine"] for e in doc["engine_refusals"]] == ["vllm-0.26"]
    assert "EngineReleaseUnsupported" in doc["engine_refusals"][0]["message"]
    assert r.code == 3  # a named engine refuses: the comparison is not all-admitted


def test_sweep_skips_a_release_without_v41_as_plan_refused(csa, tmp_path):
    trace = tmp_path / "head20.jsonl"
    trace.write_text("".join(open(MOONCAKE).readlines()[:20]))
    spec = tmp_path / "v41.yaml"
    spec.write_text(f"name: v41\nworkload: {trace}\ngrid:\n  model: deepseek-v4.1-flash\n  device: h200\n  tp: 8\n"
                    "  engine: [vllm-0.26, vllm-0.25]\nobjective: rate_per_device\n"
                    "constraints: {ttft_p99_max_s: 60}\n")
    r = csa("sweep", str(spec), "--step-time", "fixed")
    assert r.code == 3
    assert "skipped PlanRefused: 2" in " ".join(r.out.split())


@pytest.mark.parametrize("named", ["vllm-0.30", "vllm-0.32.1", "vllm==0.31.0"])
def test_v030_to_v032_are_refused_by_their_own_name_not_sized_with_033s_rules(csa, named):
    """The release map hands 0.30-0.32 to vllm-0.33's V4 rules; their V4.1 rules differ (528 / 584 B records
    only, no bounded replay, no mega attention: DEEPSEEK_V41.md §5), so V4.1 under them is refused, typed."""
    r = csa("check", "deepseek-v4.1-flash", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "8",
            "--engine", named, "--json")
    assert r.code == 3
    refusal = r.json()["all_refusals"][0]
    assert refusal["type"] == "EngineRefused" and named.replace("==", "-") in refusal["message"]
    ok = csa("check", "deepseek-v4-flash", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "8",
             "--engine", named, "--json")
    assert ok.code == 0  # V4 under the same name: 0.33's rules, as the release map says


# --- start-up reserves: what vLLM 0.33.0's models/deepseek_v41/ allocates (H200, TP 8, mnbt 8,192, 1M) ------

V41_RESERVES = {  # label prefix -> bytes, each from the release's shapes (file:line in the step's source)
    "top-k index buffer [8192, 512] int32": 8192 * 512 * 4,                        # nvidia/model.py:758-763
    "candidate-block buffer [8192, 2048] int32": 8192 * 2048 * 4,                 # nvidia/model.py:765-779
    "RoPE cos/sin tables, 2 x fp32 [1048576, 64]": 2 * 1_048_576 * 64 * 4,        # YaRN (ratio > 0) + plain
    "hc_attn_fn_broadcast [24, 5120] fp32": 24 * 5120 * 4,
    "sparse-indexer logits dummy (transient)": 512 << 20,
    # TP 8, FULL_AND_PIECEWISE (mixed mode PIECEWISE): 2 x the top-k buffer's rows x width x 4
    "top-k row-shard exchange (transient, TP > 1)": 2 * 8192 * 512 * 4,
}


def _v41_budget(csa, *extra):
    r = csa("check", "deepseek-v4.1-flash", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "8",
            "--engine", "vllm-0.33", *extra, "--json")
    assert r.code == 0, r.err
    return r.json()["budget"]


def test_v41_start_up_buffers_are_the_releases_own_shapes(csa):
    b = _v41_budget(csa)
    steps = {s["label"]: s for s in b["stages"][0]["steps"]}
    assert not any("not modelled" in label for label in steps)
    for label, size in V41_RESERVES.items():
        assert steps[label]["bytes"] == size and steps[label]["estimate"] is False, label
    assert steps["top-k index buffer [8192, 512] int32"]["bytes"] == 16_777_216
    # the profile run's requests share one buffer, the largest (v1/worker/workspace.py:181-280):
    # ratio-1 layers: N = max_model_len; M = N + window 128 + mnbt; chunk 4 x M x 512 bf16 + topk/lens int32
    flashmla = 4 * 1_056_896 * 512 * 2 + 8192 * 640 * 4 + 8192 * 4
    # T = max_model_len x (1152 // 132) x factor 2 (> 256K) // ratio 1; fp8 [T, 128] + uint8 [T, 4] + radix 1 MiB
    indexer = 16_777_216 * 132 + (1 << 20)
    ws = [s for label, s in steps.items() if label.startswith("shared workspace")]
    assert len(ws) == 1 and ws[0]["bytes"] == max(flashmla, indexer) == flashmla and ws[0]["estimate"] is False
    assert f"(M = 1,056,896) {flashmla:,} B" in ws[0]["label"] and f"{indexer:,} B" in ws[0]["label"]
    assert steps["candidate-block buffer [8192, 2048] int32"]["bytes"] == 67_108_864
    assert "deepseek_v41/nvidia/model.py:765-779" in steps["candidate-block buffer [8192, 2048] int32"]["source"]
    fitted = [s for s in b["stages"][0]["steps"] if s["estimate"] and s["kind"] == "reserve"]
    assert {s["label"].split(" (")[0].split(" at ")[0] for s in fitted} >= {"other profile-run activations",
                                                                          "non-torch memory"}
    assert all("V4's band, carried" in s["source"] for s in fitted)


def test_v41_pool_takes_every_reserve(csa):
    b = _v41_budget(csa)
    assert b["usable_bytes"] - b["weights_bytes"] - b["reserve_bytes"] == b["kv_memory_bytes"]
    # 86,314,753,433 with the three requests added (not one buffer); 98,646,501,873 with no reserve modelled
    assert b["kv_memory_bytes"] == 88_494_742_937
    named = sum(V41_RESERVES.values()) + 4 * 1_056_896 * 512 * 2 + 8192 * 640 * 4 + 8192 * 4
    assert b["reserve_bytes"] >= named + 24 * (1 << 20)  # + the Engram staging buffers and the fitted terms


def test_v41_model_dims_read_text_config():
    import json

    from csa_plan.planner.budget.stage import model_dims

    from helpers import ROOT

    presets = ROOT / "planner" / "presets"
    data = json.loads((presets / "deepseek-v4.1-flash.json").read_text())
    d = model_dims(data, "preset")
    assert d is not None and d.shared and d.index_layers == (2, 8, 14, 20, 24, 28, 32, 36)
    assert (d.hidden, d.index_topk, d.candidate_topk_blocks, d.num_main, len(d.compress_ratios)) == \
        (5120, 512, 2048, 40, 43)
    v4 = json.loads((presets / "deepseek-v4-flash.json").read_text())
    d4 = model_dims(v4, "preset")
    assert d4 is not None and not d4.shared and d4.candidate_topk_blocks == 0
