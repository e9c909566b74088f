"""Layout profiles: published figures, engine page/pool figures, over-reservation.

Every expected number is rebuilt from first principles (the cited source line's
arithmetic) and compared with ``==``; published GiB/percent figures to the stated
precision.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from csa_plan.planner.errors import BadInput
from csa_plan.planner.loaders.model_files import load_model
from csa_plan.planner.plan import PlanOptions, plan_model
from csa_plan.planner.engines import PROFILES, get_profile
from csa_plan.planner.engines import bf16_reference as bf16
from csa_plan.planner.engines import onnx_genai, sglang, vllm

GIB = 1 << 30
ONE_M = 1 << 20


@pytest.fixture(scope="module")
def pro():
    return load_model("deepseek-v4-pro")


@pytest.fixture(scope="module")
def flash():
    return load_model("deepseek-v4-flash")


def total(model, layout: str, length: int) -> int:
    return plan_model(model, PlanOptions(layout=layout, max_seq_len=length)).per_request_per_device_bytes


# --- published figures (docs/DEEPSEEK_V4.md) -------------------------------------------

def test_bf16_reference_pro_at_1m_is_9_62_gib(pro):
    got = total(pro, "bf16-reference", ONE_M)
    csa = (ONE_M // 4 + 128) * 1024 + ONE_M // 4 * 256  # records + window, BF16 index keys
    hca = (ONE_M // 128 + 128) * 1024
    assert got == 30 * csa + 31 * hca == 10_334_371_840
    assert round(got / GIB, 2) == 9.62


def test_v32_baseline_is_83_875_gib_and_ratio_8_7x(pro):
    base = bf16.v32_bf16_baseline_bytes(ONE_M)
    assert base == 61 * ONE_M * (576 + 128) * 2
    assert Fraction(base, GIB) == Fraction(83875, 1000)
    assert round(base / total(pro, "bf16-reference", ONE_M), 1) == 8.7


@pytest.mark.parametrize("preset, percent", [("deepseek-v4-pro", 10.47), ("deepseek-v4-flash", 7.31)])
def test_model_card_compressed_share(preset, percent):
    share = bf16.compressed_cache_share(load_model(preset).compress_ratios)
    assert round(float(share) * 100, 2) == percent


def test_bf16_reference_keeps_no_window_on_swa_only_layers(flash):
    plan = plan_model(flash, PlanOptions(layout="bf16-reference", max_seq_len=ONE_M))
    swa = [layer for layer in plan.layers if layer.kind.value == "SWA"]
    assert len(swa) == 3 and all(layer.bytes.total_bytes == 0 for layer in swa)


# --- vLLM: per-block figures ---------------------------------------------------------

def test_vllm_constants_match_cited_sources():
    assert vllm.RECORD_BYTES == 448 + 64 * 2 + 8  # attention.py state_content_bytes=584
    assert vllm.PAGE_ALIGNMENT_BYTES == 576 and vllm.BLOCK_TOKENS == 256 and vllm.SWA_BLOCK_TOKENS == 64
    assert vllm.INDEX_FP8_KEY_BYTES == 128 + 128 // 128 * 4 == 132
    assert vllm.INDEX_FP4_KEY_BYTES == 128 // 2 + 128 // 32 == 68


@pytest.mark.parametrize("got, raw, padded", [
    (vllm.compressed_page_bytes(4), 64 * 584, 37_440),       # 37,376 -> 65 x 576
    (vllm.compressed_page_bytes(128), 2 * 584, 1_728),       # 1,168 -> 3 x 576
    (vllm.index_page_bytes(132), 64 * 132, 8_640),           # 8,448 -> 15 x 576
    (vllm.index_page_bytes(68), 64 * 68, 4_608),             # 4,352 -> 8 x 576
    (vllm.state_page_bytes(4, 512), 4 * 2 * 2 * 512 * 4, 32_832),   # 32,768 -> 57 x 576
    (vllm.state_page_bytes(128, 512), 8 * 2 * 1 * 512 * 4, 32_832),
    (vllm.state_page_bytes(4, 128), 4 * 2 * 2 * 128 * 4, 8_640),    # indexer compressor state
    (vllm.swa_page_bytes(), 64 * 584, 37_440),
])
def test_vllm_page_bytes(got, raw, padded):
    assert got == padded == -(-raw // 576) * 576


def test_vllm_csa_and_hca_group_at_64k(pro):
    d = next(x for x in pro.layers if x.compression_ratio == 4).with_(max_seq_len=65_536)
    g = get_profile("vllm").group_bytes(d, 1)
    blocks = 65_536 // 256
    assert g.compressed_bytes == blocks * 37_440
    assert g.index_bytes == blocks * 8_640
    assert g.carry_bytes == 3 * 32_832  # cdiv(min(8 - 1 + 1, L), 4) + 1 = 3 blocks
    assert g.index_carry_bytes == 3 * 8_640
    assert g.dense_ring_bytes == 3 * 37_440  # cdiv(128, 64) + 1 = 3 SWA blocks
    assert g.scratch_bytes == 0
    h = get_profile("vllm").group_bytes(next(x for x in pro.layers if x.compression_ratio == 128)
                                        .with_(max_seq_len=65_536), 1)
    assert h.compressed_bytes == blocks * 1_728
    assert h.carry_bytes == 17 * 32_832  # cdiv(128, 8) + 1 = 17 blocks of the C128 state
    assert h.index_bytes == h.index_carry_bytes == 0


# --- SGLang: per-pool figures --------------------------------------------------------

def test_sglang_pool_figures():
    assert sglang.RECORD_BYTES == 584
    assert sglang.INDEX_FP8_KEY_BYTES == 132 and sglang.INDEX_FP4_KEY_BYTES == 68
    assert sglang.PAGE_TOKENS % 128 == 0
    assert sglang.compressed_page_bytes(4) == 37_440  # ceil_div(64 * 584, 576) * 576
    assert sglang.compressed_page_bytes(128) == 1_728  # ceil_div(2 * 584, 576) * 576
    assert sglang.index_page_bytes(132) == 64 * 132 == 8_448  # not padded
    assert sglang.index_page_bytes(68) == 64 * 68 == 4_352
    assert sglang.state_ring_bytes(4, 512) == 8 * 2 * 2 * 512 * 4 == 65_536  # c4 state ring
    assert sglang.state_ring_bytes(4, 128) == 8 * 2 * 2 * 128 * 4 == 16_384  # c4 indexer state ring
    assert sglang.state_ring_bytes(128, 512) == 128 * 2 * 512 * 4 == 524_288  # c128 state per request slot
    assert sglang.swa_ring_bytes(128) == 130 * 576 == 74_880


def test_sglang_c128_state_is_a_fixed_cost_per_request(pro):
    short = plan_model(pro, PlanOptions(layout="sglang", max_seq_len=256)).per_device
    long = plan_model(pro, PlanOptions(layout="sglang", max_seq_len=ONE_M)).per_device
    assert short.carry_bytes == long.carry_bytes == 30 * 65_536 + 31 * 524_288


def test_sglang_padding_at_64k(pro):
    from csa_plan.planner.engines.compare import padding_bytes

    plan = plan_model(pro, PlanOptions(layout="sglang", max_seq_len=65_536))
    csa = 256 * 37_440 - 16_384 * 584
    hca = 256 * 1_728 - 512 * 584
    swa = 74_880 - 128 * 584
    assert padding_bytes(plan) == 30 * csa + 31 * hca + 62 * swa == 4_943_616


# --- onnx-genai-b6 ------------------------------------------------------------------

def test_onnx_genai_constants():
    assert onnx_genai.ATTN_WIDTH_BYTES == onnx_genai.DENSE_WIDTH_BYTES == 583
    assert onnx_genai.INDEX_WIDTH_BYTES == 68 and onnx_genai.RUNTIME_TOPK == 512


def test_onnx_genai_b6_over_reservation_pro_at_64k(pro):
    length = 65_536
    over = total(pro, "onnx-genai-b6", length) - total(pro, "exact", length)
    r4, r128 = length // 4, length // 128
    # CSA node: the unneeded ratio-128 buffers, minus the scratch saved by top-k 512 vs 1024
    csa = r128 * 583 + 128 * 2 * 512 * 4 - (1024 - 512) * 4 - 128 * (1024 - 512) * 4
    # HCA node: the unneeded ratio-4 attention, carry, index and index-carry buffers
    hca = r4 * 583 + 8 * 2 * 1024 * 4 + r4 * 68 + 8 * 2 * 256 * 4
    assert over == 30 * csa + 31 * hca == 349_942_784


# --- registry -----------------------------------------------------------------------

def test_registry_names_and_unknown_layout_is_bad_input(pro):
    assert set(PROFILES) == {"exact", "onnx-genai-b6", "vllm", "vllm-fp4", "sglang", "sglang-fp4", "bf16-reference"}
    with pytest.raises(BadInput, match="unknown layout 'tpu'"):
        plan_model(pro, PlanOptions(layout="tpu"))


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_profile_sizes_both_presets_and_cites_a_source(name, pro, flash):
    assert PROFILES[name].sources
    for model in (pro, flash):
        plan = plan_model(model, PlanOptions(layout=name, max_seq_len=4096))
        assert plan.admitted and plan.per_request_per_device_bytes > 0
