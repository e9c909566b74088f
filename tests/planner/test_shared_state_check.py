"""DeepSeek-V4.1-Flash through ``check``: the owner groups, the weights, the engines' typed refusals, pp splits."""

from __future__ import annotations

import json

import pytest

from csa_plan.planner.weights.registry import inventory_for
from csa_plan.planner.weights.tensors import Role

from helpers import ROOT

PRESET = ROOT / "planner" / "presets" / "deepseek-v4.1-flash.json"


@pytest.fixture
def check(csa):
    def run(*args: str) -> tuple[int, dict]:
        r = csa("check", *args, "--json")
        return r.code, (r.json() if r.out.strip() else {"stderr": r.err})

    return run


def test_check_1m_on_8_h200_without_an_engine(check):
    code, doc = check("deepseek-v4.1-flash", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "8")
    assert code == 0 and doc["verdict"] == "admitted"
    counts = doc["counts"]
    assert counts["owner"] == 4 and counts["reader"] == 34 and counts["swa"] == 5
    layers = doc["layers"]
    assert doc["fit"]["requests_that_fit"] >= 1 and doc["budget"]
    owners = [l for l in layers if l["kind"] == "owner"]
    assert [l["layer_id"] for l in owners] == [2, 8, 14, 20]
    assert sum(l["bytes"]["compressed"] + l["bytes"]["index"] for l in owners) == 890 * (1 << 20)
    assert all(l["bytes"]["dense_ring"] == 128 * 528 for l in layers)
    assert all(l["descriptor"]["sharing"]["kv_source"] in (2, 8, 14, 20) for l in layers if l["kind"] == "reader")


@pytest.mark.parametrize("engine, refusal", [  # vllm-0.33: test_vllm_v41.py; sglang-0.5.23: test_sglang_v41.py
                                             ("vllm-0.26", "EngineReleaseUnsupported"),
                                             ("vllm-0.28", "EngineReleaseUnsupported"),
                                             ("onnx-genai", "EngineReleaseUnsupported")])
def test_engines_refuse_typed_never_a_v4_figure(check, engine, refusal):
    code, doc = check("deepseek-v4.1-flash", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "8",
                      "--engine", engine)
    assert code == 3 and doc["verdict"] == "refused"
    types = [r["type"] for r in doc["all_refusals"]]
    assert types == [refusal]
    assert engine in doc["all_refusals"][0]["message"]


def test_a_pp_split_inside_a_sharing_group_is_refused(check):
    code, doc = check("deepseek-v4.1-flash", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "4", "--pp", "3")
    assert code == 3 and "SharingGroupSplit" in json.dumps(doc)
    code, _ = check("deepseek-v4.1-flash", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "4", "--pp", "2")
    assert code == 0  # 0-19 / 20-42: the boundary falls between groups


def test_engine_version_order():
    from csa_plan.planner.shared_engines import engine_refusal

    assert engine_refusal("vllm-0.30").type.value == "LayoutNotModelled"
    assert engine_refusal("vllm-0.29").type.value == "EngineReleaseUnsupported"
    assert engine_refusal("sglang-0.5.20").type.value == "EngineReleaseUnsupported"
    assert engine_refusal("sglang-0.5.21").type.value == "LayoutNotModelled"


def test_weight_inventory_ownership_and_engram():
    inv = inventory_for(json.loads(PRESET.read_text()), "preset")
    assert inv.nbytes == 510_296_708_312  # the published checkpoint, the rest included
    names = [w.tensor.name for w in inv.weights]
    count = lambda suffix: sum(n.endswith(suffix) for n in names)  # noqa: E731
    assert count("compressor.wkv.weight") == 4 and count("compressor.wgate.weight") == 3
    assert count("indexer.wq_b.weight") == 8 and count("indexer.wk.weight") == 4
    engram = [w for w in inv.weights if w.role is Role.ENGRAM]
    assert [w.layer for w in engram] == [1, 14]
    assert [w.nbytes for w in engram] == [101_377_628_352, 101_380_404_048]  # 264 B per row
    experts = sum(w.nbytes for w in inv.weights if w.role in (Role.EXPERT_W13, Role.EXPERT_W2))
    assert experts == (40 * 384 + 3 * 128) * 18_800_640  # one expert with its scales (DEEPSEEK_V41.md §8)
    rest = [w.nbytes for w in inv.weights if w.role is Role.UNATTRIBUTED]
    assert len(rest) == 1 and 0 < rest[0] < 3 * 2**30  # vision tower + DSpark non-expert weights: small


def test_engram_rows_split_over_tp_in_the_reference_budget():
    from csa_plan.planner.placement import Placement
    from csa_plan.planner.weights.sharding import Part, shard
    from csa_plan.planner.weights.rules import RULES

    inv = inventory_for(json.loads(PRESET.read_text()), "preset")
    w = shard(inv, RULES["reference"], Placement(tp=8, ep=8), mtp=True)
    by_part = dict(w.stages[0].by_part)
    rows = (384_006_168 + 7) // 8 + (384_016_682 + 7) // 8
    assert by_part[Part.ENGRAM] == rows * 264 and round(by_part[Part.ENGRAM] / 2**30, 1) == 23.6


@pytest.mark.parametrize("fmt, keys, per_token", [
    ("nvfp4", "mxfp4", 890),  # DeepSeek's reference; SGLang 0.5.23 on SM100
    ("nvfp4", "fp8", 1050),  # vLLM 0.33 on SM100 (nvfp4_ds_mla, FP8 index keys)
    ("fp8_v4", "mxfp4", 1630),  # SGLang 0.5.23 on Hopper
    ("fp8_v4", "fp8", 1790),  # vLLM 0.33 on Hopper
    ("mxfp8", "mxfp4", 1490),
])
def test_record_and_key_formats_reach_the_owners(check, fmt, keys, per_token):
    code, doc = check("deepseek-v4.1-flash", "--max-seq-len", "1M", "--tp", "8", "--kv-format", fmt,
                      "--index-key-format", keys)
    assert code == 0
    owners = [l for l in doc["layers"] if l["kind"] == "owner"]
    assert sum(l["bytes"]["compressed"] + l["bytes"]["index"] for l in owners) == per_token * (1 << 20)


def test_a_v4_cache_format_on_a_shared_model_is_a_typed_refusal(check):
    code, doc = check("deepseek-v4.1-flash", "--kv-format", "fp8_e4m3_block64")
    assert code == 3 and {r["type"] for r in doc["refusals"]} == {"UnknownCacheFormat"}


def test_index_key_format_on_a_v4_model_is_bad_input(check):
    code, _ = check("deepseek-v4-flash", "--index-key-format", "fp8")
    assert code == 2
