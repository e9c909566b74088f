"""Exact bytes of CSA/HCA groups and whole-model totals, rebuilt from CONTRACT §2 formulas."""

from __future__ import annotations

import pytest

from csa_plan.planner.descriptor import Descriptor
from csa_plan.planner.layout import GroupBytes, group_bytes, record_width_bytes, swa_ring_bytes
from csa_plan.planner.descriptor import CacheFormat
from csa_plan.planner.loaders.model_files import load_model
from csa_plan.planner.plan import PlanOptions, plan_model

L = 1_048_576


def ceil_div(a, b):
    return -(-a // b)


def contract_csa(L, batch, heads, idx_heads, topk, window=128, q=1, rec=583):
    """CONTRACT §2 written out by hand for a ratio-4 group."""
    records = ceil_div(L, 4)
    rows = batch * q
    sel = min(records, topk)
    return {
        "compressed": batch * records * rec,
        "carry": batch * 8 * 2 * 1024 * 4,
        "index": batch * records * 68,
        "index_carry": batch * 8 * 2 * 256 * 4,
        "dense_ring": batch * window * rec,
        "scratch": max(rows * idx_heads * 128 * 4, 1) + max(rows * records * 4, 1)
        + max(rows * sel * 4, 1) + max(rows * heads * (window + sel) * 4, 1),
    }


def contract_hca(L, batch, heads, window=128, q=1, rec=583):
    records = ceil_div(L, 128)
    return {
        "compressed": batch * records * rec,
        "carry": batch * 128 * 2 * 512 * 4,
        "index": 0,
        "index_carry": 0,
        "dense_ring": batch * window * rec,
        "scratch": max(batch * q * heads * (window + records) * 4, 1),
    }


def with_total(d):
    return {**d, "total": sum(d.values())}


# model -> (n_csa, n_hca, n_swa, heads, topk)
MODELS = {
    "deepseek-v4-pro": (30, 31, 1, 128, 1024),
    "deepseek-v4-flash": (21, 20, 3, 64, 512),
}


def test_worked_example_v4_pro():
    """The worked example printed in CONTRACT §2, digit for digit."""
    plan = plan_model(load_model("deepseek-v4-pro"))
    csa = next(l for l in plan.layers if l.kind.value == "CSA").bytes
    hca = next(l for l in plan.layers if l.kind.value == "HCA").bytes
    assert csa.as_dict() == {
        "compressed": 152_829_952, "carry": 65_536, "index": 17_825_792, "index_carry": 16_384,
        "dense_ring": 74_624, "scratch": 1_675_264, "total": 172_487_552,
    }
    assert hca.as_dict() == {
        "compressed": 4_775_936, "carry": 524_288, "index": 0, "index_carry": 0,
        "dense_ring": 74_624, "scratch": 4_259_840, "total": 9_634_688,
    }
    swa = [l for l in plan.layers if l.kind.value == "SWA"]
    assert [l.bytes.total_bytes for l in swa] == [74_624]
    assert plan.per_request_per_device_bytes == 5_473_376_512


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("tp,batch", [(1, 1), (8, 1), (1, 3), (8, 5)])
def test_presets_match_contract_formulas(model, tp, batch):
    n_csa, n_hca, n_swa, heads, topk = MODELS[model]
    plan = plan_model(load_model(model), PlanOptions(max_seq_len=L, batch=batch, tp=tp))
    csa = with_total(contract_csa(L, batch, heads // tp, 64 // tp, topk))
    hca = with_total(contract_hca(L, batch, heads // tp))
    by_kind = {}
    for layer in plan.layers:
        by_kind.setdefault(layer.kind.value, set()).add(layer.bytes)
    assert [b.as_dict() for b in by_kind["CSA"]] == [csa]
    assert [b.as_dict() for b in by_kind["HCA"]] == [hca]
    ring = batch * 128 * 583
    expected_total = n_csa * csa["total"] + n_hca * hca["total"] + n_swa * ring
    assert plan.per_request_per_device_bytes == expected_total
    assert plan.all_devices_bytes == expected_total * tp


def test_flash_total_exact():
    assert plan_model(load_model("deepseek-v4-flash")).per_request_per_device_bytes == 3_763_569_152


def test_tp8_only_scratch_shrinks():
    one = plan_model(load_model("deepseek-v4-pro")).per_device
    eight = plan_model(load_model("deepseek-v4-pro"), PlanOptions(tp=8)).per_device
    for cls in ("compressed", "carry", "index", "index_carry", "dense_ring"):
        assert getattr(one, f"{cls}_bytes") == getattr(eight, f"{cls}_bytes")
    assert eight.scratch_bytes < one.scratch_bytes


@pytest.mark.parametrize("fmt,width", [("f32", 2048), ("fp8_e4m3_block64", 583), ("fp4_e2m1_block32", 272)])
def test_record_widths(fmt, width):
    assert record_width_bytes(CacheFormat(fmt), 512, 64) == width


def test_hca_f32_and_fp4_layouts():
    d = Descriptor(layer_id=0, compression_ratio=128, num_heads=8, max_seq_len=1000, cache_format="f32")
    b = group_bytes(d)
    assert b.compressed_bytes == 8 * 2048  # ceil(1000/128) = 8 records
    assert b.dense_ring_bytes == 128 * 2048
    assert b.scratch_bytes == 8 * (128 + 8) * 4
    d4 = d.with_(cache_format="fp4_e2m1_block32")
    assert group_bytes(d4).compressed_bytes == 8 * 272


def test_scratch_floor_of_one_byte_per_workspace():
    d = Descriptor(layer_id=0, compression_ratio=4, num_heads=0, index_num_heads=0, index_head_dim=128,
                   index_topk=0, max_seq_len=4)
    # every workspace is empty (0 heads / top-k 0) but each still costs one byte
    b = group_bytes(d)
    assert b.scratch_bytes == max(0, 1) + 1 * 4 + max(0, 1) + max(0, 1)


def test_ceil_records_for_partial_blocks():
    d = Descriptor(layer_id=0, compression_ratio=4, num_heads=1, index_num_heads=1, index_head_dim=128,
                   index_topk=512, max_seq_len=5, window=4)
    assert group_bytes(d).compressed_bytes == 2 * 583
    assert group_bytes(d).index_bytes == 2 * 68


def test_swa_ring():
    d = Descriptor(layer_id=0, compression_ratio=0, num_heads=1, max_seq_len=100, window=64, batch=2)
    assert swa_ring_bytes(d) == GroupBytes(dense_ring_bytes=2 * 64 * 583)


def test_query_len_scales_scratch_rows():
    d = Descriptor(layer_id=0, compression_ratio=128, num_heads=16, max_seq_len=65536)
    assert group_bytes(d, query_len=7).scratch_bytes == 7 * 16 * (128 + 512) * 4
