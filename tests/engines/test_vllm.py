"""vllm-0.33: DeepSeek-V4 specs, vLLM's packed grouping, per-request blocks, the pool and its log line.

Expected numbers are rebuilt from the release's arithmetic (cited beside each); the same
figures are checked against vLLM's own planning functions by tools/crosscheck_engines.py.
"""

from __future__ import annotations

import pytest

from csa_plan.planner.engines.engine import EngineRefused, Phase
from csa_plan.planner.engines.registry import get_engine
from csa_plan.planner.engines.settings import EngineSettings
from csa_plan.planner.engines.vllm.kv_cache_utils import KvSpec, SpecKind, approximate_gcd
from csa_plan.planner.loaders.model_files import load_model
from csa_plan.planner.units import GiB, ceil_div

ONE_M = 1 << 20
VLLM = get_engine("vllm-0.33")


def plan(model, length=ONE_M, **settings):
    return VLLM.configure(model, EngineSettings(**settings), length)


def pad(n: int) -> int:
    return -(-n // 576) * 576


# --- specs: page = heads x (block // tokens_per_state) x content, padded to 576 -----------

@pytest.mark.parametrize("role, raw, padded", [
    ("C4 attention", 64 * 584, 37_440),  # 37,376 -> 65 x 576
    ("C128 attention", 2 * 584, 1_728),  # 1,168 -> 3 x 576
    ("C4 indexer keys", 64 * 132, 8_640),  # 8,448 -> 15 x 576
    ("C4 state", 4 * 2 * 2 * 512 * 4, 32_832),  # block 4 x state_dim 2048 fp32
    ("C128 state", 8 * 2 * 1 * 512 * 4, 32_832),  # block 8 x state_dim 1024 fp32
    ("C4 indexer state", 4 * 2 * 2 * 128 * 4, 8_640),
    ("SWA cache", 64 * 584, 37_440),
])
def test_spec_pages(pro, role, raw, padded):
    spec = next(s for s in plan(pro).specs if s.role == role)
    assert spec.unpadded_page_bytes == raw and spec.page_bytes == padded == pad(raw)


def test_mxfp4_indexer_page(pro):
    spec = next(s for s in plan(pro, gpu="b200", indexer_kv_dtype="mxfp4").specs if s.role == "C4 indexer keys")
    assert spec.unpadded_page_bytes == 64 * 68 and spec.page_bytes == 4_608


def test_spec_counts_follow_the_layer_types(pro, flash):
    for model, c4, c128, swa_only in ((pro, 30, 31, 0), (flash, 21, 20, 2)):
        roles = [s.role for s in plan(model).specs]
        assert roles.count("C4 attention") == roles.count("C4 indexer keys") == roles.count("C4 state") == c4
        assert roles.count("C4 indexer state") == c4
        assert roles.count("C128 attention") == roles.count("C128 state") == c128
        assert roles.count("SWA cache") == c4 + c128 + swa_only  # every main layer; MTP is no target layer
        assert "MTP SWA cache" not in roles


# --- grouping: _get_packed_kv_cache_groups ---------------------------------------------------

def test_approximate_gcd_minimises_padding_and_prefers_larger():
    assert approximate_gcd([61, 30, 31], lower_bound=30) == 31  # pads 1 + 1 + 0
    assert approximate_gcd([43, 21, 20], lower_bound=21) == 22  # pads 1 + 1 + 2
    assert approximate_gcd([4, 8], lower_bound=1) == 4 and approximate_gcd([6], lower_bound=9) == 9


@pytest.mark.parametrize("name, table, bpb, repeats", [
    ("deepseek-v4-pro", [(31, 1_160_640), (30, 1_123_200), (91, 1_435_968), (31, 1_017_792), (60, 1_244_160)],
     1_435_968, 31),
    ("deepseek-v4-flash", [(22, 823_680), (21, 786_240), (62, 1_002_240), (42, 870_912), (20, 656_640)],
     1_002_240, 22),
])
def test_groups_as_vllm_builds_them(name, table, bpb, repeats):
    p = plan(load_model(name))
    assert sorted((len(g.specs), g.page_sum_bytes) for g in p.groups) == sorted(table)
    assert p.block_bytes == bpb and p.repeats_per_group == repeats


def test_pro_full_group_is_the_largest_page_sum(pro):
    assert plan(pro).block_bytes == 30 * 37_440 + 30 * 8_640 + 31 * 1_728
    assert plan(pro, gpu="b200", indexer_kv_dtype="mxfp4").block_bytes == 30 * 37_440 + 30 * 4_608 + 31 * 1_728
    assert plan(load_model("deepseek-v4-flash"), gpu="b200", indexer_kv_dtype="mxfp4").block_bytes == 917_568


def test_grouping_is_the_algorithm_not_constants(tmp_path):
    """A 10-layer model: C128 x4, C4 x4, SWA-only x2 -> its own repeats and groups."""
    spec = tmp_path / "m.yaml"
    spec.write_text("num_heads: 16\nindex_num_heads: 16\nindex_head_dim: 128\nindex_topk: 64\nmax_seq_len: 8192\n"
                    "layers:\n  - {compression_ratio: 0, repeat: 2}\n  - {compression_ratio: 4, repeat: 4}\n"
                    "  - {compression_ratio: 128, repeat: 4}\n")
    p = plan(load_model(str(spec)), length=8192)
    # buckets: SWA (10, one page size), full (4 x 37,440, 4 x 8,640, 4 x 1,728: balanced), C4 states
    # (4 x 32,832 + 4 x 8,640: balanced), C128 states (4 x 32,832); repeats = approximate_gcd([10, 4, 4, 4], 4):
    # d = 4 pads 2 (10 -> 12), d = 5 pads 3, so 4; the SWA bucket splits into cdiv(10, 4) = 3 groups (i::3).
    assert p.repeats_per_group == approximate_gcd([10, 4, 4, 4], lower_bound=4) == 4
    sizes = sorted((len(g.specs), g.page_sum_bytes) for g in p.groups)
    assert sizes == sorted([(4, 4 * 37_440), (3, 3 * 37_440), (3, 3 * 37_440), (12, 4 * (37_440 + 8_640 + 1_728)),
                            (8, 4 * (32_832 + 8_640)), (4, 4 * 32_832)])
    assert p.block_bytes == 4 * (37_440 + 8_640 + 1_728) == 191_232


# --- per request --------------------------------------------------------------------------

def windowed_blocks(window: int, block: int, in_flight: int, length: int) -> int:
    return ceil_div(min(window - 1 + in_flight, length), block) + 1  # max_admission_blocks_per_request


@pytest.mark.parametrize("name, bpb", [("deepseek-v4-pro", 1_435_968), ("deepseek-v4-flash", 1_002_240)])
@pytest.mark.parametrize("length", [ONE_M, 65_536, 4_097])
def test_startup_budget_decode_and_prefill(name, bpb, length):
    p = plan(load_model(name), length=length)
    q = 2 * 8192  # async scheduling: 2 concurrent batches x max_num_batched_tokens 8192
    full = ceil_div(length, 256)
    budget = full + 2 * windowed_blocks(128, 64, q, length) + windowed_blocks(8, 4, q, length) \
        + windowed_blocks(128, 8, q, length)
    assert p.startup_budget().units == budget and p.startup_budget().total_bytes == budget * bpb
    decode = full + 2 * 3 + 3 + 17  # 26 fixed blocks with one token in flight
    assert p.footprint(length, Phase.DECODE).units == decode
    assert p.footprint(length, Phase.DECODE).total_bytes == decode * bpb
    # prefill: each windowed group holds min(cdiv(L, block), its in-flight bound) (the admission gate)
    held = full + sum(min(ceil_div(length, b), windowed_blocks(w, b, q, length)) for w, b in ((128, 64), (128, 64),
                                                                                            (8, 4), (128, 8)))
    assert p.footprint(length, Phase.PREFILL).units == held
    if length == ONE_M:
        assert held == budget


def test_decode_fixed_part_matches_engines_md(pro, flash):
    assert (plan(flash).footprint(ONE_M).total_bytes - 4096 * 1_002_240) == 26_058_240
    assert (plan(pro).footprint(ONE_M).total_bytes - 4096 * 1_435_968) == 37_335_168


def test_short_request_holds_only_what_it_has(pro):
    p = plan(pro)
    # 100 tokens: 1 full block, SWA min(cdiv(100, 64), cap) = 2, C4 state min(25, 3) = 3, C128 state min(13, 17) = 13
    assert p.footprint(100, Phase.DECODE).units == 1 + 2 + 2 + 3 + 13


@pytest.mark.parametrize("settings, in_flight", [
    ({}, 16_384), ({"async_scheduling": False}, 8192), ({"max_num_batched_tokens": 2048}, 4096),
    ({"usage": "llm"}, 32_768), ({"gpu": "b200"}, 32_768),
])
def test_in_flight_tokens_move_the_budget(pro, settings, in_flight):
    p = plan(pro, **settings)
    assert p.resolved.max_in_flight_tokens == in_flight
    assert p.startup_budget().units == 4096 + 2 * windowed_blocks(128, 64, in_flight, ONE_M) \
        + windowed_blocks(8, 4, in_flight, ONE_M) + windowed_blocks(128, 8, in_flight, ONE_M)


def test_speculative_decoding_adds_the_draft_swa_layer(pro, flash):
    p = plan(pro, num_speculative_tokens=2)
    assert [s.role for s in p.specs].count("MTP SWA cache") == 1
    swa = sorted(g.page_sum_bytes for g in p.groups if g.first.block_size == 64)
    assert swa == [31 * 37_440, 31 * 37_440]  # 62 SWA layers -> two groups of 31
    assert p.block_bytes == 1_435_968
    # a decode step carries 1 + 2 tokens: SWA cdiv(130, 64) + 1 = 4, C4 state cdiv(10, 4) + 1 = 4,
    # C128 state cdiv(130, 8) + 1 = 18
    assert p.footprint(ONE_M, Phase.DECODE).units == 4096 + 2 * 4 + 4 + 18


# --- the pool and the log line --------------------------------------------------------------

def test_worked_example_pro_40_gib(pro):
    sizing = plan(pro).size_pool(40 * GiB)
    assert sizing.total_units == 40 * GiB // 1_435_968 == 29_909  # the null block included
    assert sizing.usable_units == 29_908 and sizing.budget_units_per_request == 10_778
    assert sizing.tokens == int(29_909 / 10_778 * ONE_M) == 2_909_803
    assert sizing.log_lines == ("GPU KV cache size: 2,909,803 tokens, Maximum concurrency for 1,048,576 tokens per "
                                "request: 2.78x",)


def test_worked_example_cli(csa):
    r = csa("check", "deepseek-v4-pro", "--engine", "vllm-0.33", "--kv-memory", "40GiB", "--max-seq-len", "1048576")
    assert r.code == 0, r.err
    assert "GPU KV cache size: 2,909,803 tokens, Maximum concurrency for 1,048,576 tokens per request: 2.78x" in r.out
    assert "max_num_batched_tokens" in r.out.replace("-", "_")
    j = csa("check", "deepseek-v4-pro", "--engine", "vllm-0.33", "--kv-memory", "42949672960",
            "--max-seq-len", "1048576", "--json").json()
    pool = j["engine"]["pool"]
    assert (pool["num_blocks"], pool["tokens"], pool["blocks_per_request"], pool["bytes_per_block"]) == (
        29_909, 2_909_803, 10_778, 1_435_968)
    assert pool["concurrency"] == 29_909 / 10_778
    assert j["engine"]["decode"]["units"] == 4096 + 26 and j["verdict"] == "admitted"


def test_too_little_memory_is_vllms_own_refusal(pro):
    with pytest.raises(EngineRefused) as exc:
        plan(pro).size_pool(8 * GiB)
    r = exc.value.refusal
    assert "To serve at least one request with the model's max seq len (1048576), (14.41 GiB KV cache is needed" in \
        r.message and "the estimated maximum model length is 14568" in r.message
    assert r.rule.endswith("_check_enough_kv_cache_memory")


def test_admission_counts_blocks_and_running_requests(pro):
    p = plan(pro, max_num_seqs=3)
    sizing = p.size_pool(40 * GiB)
    need = p.footprint(ONE_M, Phase.PREFILL).units
    assert p.admits(sizing, 0, 0, ONE_M) and p.admits(sizing, need, 1, ONE_M)
    assert not p.admits(sizing, 2 * need, 2, ONE_M)  # 3 x 10,778 > 29,908 free blocks
    assert not p.admits(sizing, 0, 3, 10)  # max_num_seqs


# --- refusals: the engine's own rules -----------------------------------------------------

@pytest.mark.parametrize("settings, setting, rule", [
    ({"indexer_kv_dtype": "mxfp4"}, "--indexer-kv-dtype", "dsa_indexer_uses_fp4"),
    ({"kv_cache_dtype": "bfloat16"}, "--kv-cache-dtype", "_resolve_dsv4_kv_cache_dtype"),
    ({"block_size": 64}, "--block-size", "MLAAttentionSpec.real_page_size_bytes"),
    ({"gpu": "a100-80gb"}, "--gpu", "_select_dsv4_attn_cls"),
])
def test_refusals_name_the_engine_rule(pro, settings, setting, rule):
    with pytest.raises(EngineRefused) as exc:
        plan(pro, **settings)
    assert exc.value.refusal.setting == setting and rule in exc.value.refusal.rule


def test_cli_refusal_exits_3_with_the_rule(csa):
    r = csa("check", "deepseek-v4-pro", "--engine", "vllm-0.33", "--indexer-kv-dtype", "mxfp4", "--json")
    assert r.code == 3
    refusal = r.json()["engine"]["refusal"]
    assert refusal["type"] == "EngineRefused" and "sm_10x" in refusal["message"] and refusal["actual"].endswith("(h200)")
    # --gpu b200 alone budgets the B200's memory (issue 23): V4-Pro needs --tp 8 to hold its weights
    assert csa("check", "deepseek-v4-pro", "--engine", "vllm-0.33", "--gpu", "b200", "--tp", "8",
               "--indexer-kv-dtype", "mxfp4").code == 0


@pytest.mark.parametrize("args, needle", [
    (("--engine", "vllm-0.33", "--page-size", "256"), "spells it --block-size"),
    (("--engine", "vllm-0.33", "--max-running-requests", "8"), "spells it --max-num-seqs"),
    (("--kv-memory", "40GiB"), "name the engine with --engine"),
    (("--layout", "vllm"), "use --engine vllm-0.33"),
])
def test_cli_bad_engine_input(csa, args, needle):
    r = csa("check", "deepseek-v4-pro", *args)
    assert r.code == 2 and needle in r.err


def test_tp_every_spec_is_replicated(pro):
    rules = plan(pro).tp_rules()
    assert {r.placement for r in rules} == {"replicated"} and len(rules) == 7
    assert all("max_tp_shards=1" in r.source for r in rules)


def test_kvspec_window_rule():
    s = KvSpec(name="x", role="SWA cache", layer_id=0, kind=SpecKind.SLIDING, block_size=64, tokens_per_state=1,
               num_heads=1, state_content_bytes=584, alignment=576, sliding_window=128)
    assert s.blocks_per_request(ONE_M, 16_384) == ceil_div(127 + 16_384, 64) + 1 == 259
    assert s.blocks_per_request(100, 16_384) == ceil_div(100, 64) + 1 == 3  # capped at max_model_len, +1 kept
    assert s.blocks_held(100, ONE_M, 1) == 2


def test_cli_engine_vllm_names_the_newest_release(csa):
    """``--engine vllm`` is the newest modelled release, and the output says which one."""
    r = csa("check", "deepseek-v4-flash", "--engine", "vllm", "--kv-memory", "40GiB", "--json")
    assert r.code == 0, r.err
    assert "names the newest release modelled at start-up and in motion, vllm-0.33" in r.err
    assert r.json()["engine"]["name"] == "vllm-0.33"
