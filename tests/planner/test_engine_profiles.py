"""Layout profiles: published figures and over-reservation (engine figures: tests/engines).

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
from csa_plan.planner.profiles import PROFILES, get_profile
from csa_plan.planner import profile_bf16_reference as bf16
from csa_plan.planner import profile_onnx_genai as onnx_genai

GIB = 1 << 30
ONE_M = 1 << 20




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
    assert set(PROFILES) == {"exact", "onnx-genai-b6", "bf16-reference"}
    with pytest.raises(BadInput, match="unknown layout 'tpu'"):
        plan_model(pro, PlanOptions(layout="tpu"))


@pytest.mark.parametrize("old, new", [("vllm", "vllm-0.33"), ("vllm-fp4", "vllm-0.33"), ("sglang", "sglang-0.5.23"),
                                      ("sglang-fp4", "sglang-0.5.23")])
def test_retired_engine_layouts_name_their_replacement(pro, old, new):
    with pytest.raises(BadInput, match=f"replaced by the engine model '{new}': use --engine {new}"):
        plan_model(pro, PlanOptions(layout=old))


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_profile_sizes_both_presets_and_cites_a_source(name, pro, flash):
    assert PROFILES[name].sources
    for model in (pro, flash):
        plan = plan_model(model, PlanOptions(layout=name, max_seq_len=4096))
        assert plan.admitted and plan.per_request_per_device_bytes > 0
