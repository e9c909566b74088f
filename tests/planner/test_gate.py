"""The descriptor gates: every refusal type, alone, with all its fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from csa_plan.planner.descriptor import Descriptor, StateEdge
from csa_plan.planner.gate import Gate, validate, validate_c1_runtime
from csa_plan.planner.loaders.model_files import load_model
from csa_plan.planner.plan import PlanOptions, plan_model
from csa_plan.planner.refusals import RefusalType

from helpers import EXAMPLES

# Refusals of cross-layer shared state: examples/configs/shared (config types), the ledger, --layout, engines
SHARED_STATE_TYPES = {
    "NoKvSource", "KvSourceRatioMismatch", "KvSourceNotIndexSource", "InvalidSourceTopology",
    "CandidateStageTooSmall", "MixedRatioFamilies", "DoubleCount", "UnaccountedReader", "LayoutNotModelled",
    "EngineReleaseUnsupported", "SharingGroupSplit", "ReaderOwnRecordAxis",
}

REFUSAL_EXAMPLES = sorted((EXAMPLES / "configs" / "refusals").glob("*.yaml"))
CONFIG_TYPES = {t.value for t in RefusalType} - {
    "OutOfMemory", "ArityMismatch", "UnsupportedOpVersion", "SharedRecordAxis",
    "IndexAxisMismatch", "PresentPastAxisMismatch", "RequestExceedsCapacity", "NeverFits", "RunningRequestCap",
    "HostMemoryShort",  # check --host-memory against the Engram tables (tests/engines/test_sglang_v41.py)
} - SHARED_STATE_TYPES  # shared-state types have HF-config examples (tests/planner/test_shared_state.py)


def test_every_config_refusal_type_has_an_example():
    assert {p.stem for p in REFUSAL_EXAMPLES} == CONFIG_TYPES


@pytest.mark.parametrize("path", REFUSAL_EXAMPLES, ids=lambda p: p.stem)
def test_example_triggers_exactly_its_type(path: Path):
    gate = Gate.C1 if path.stem == "UnsupportedC1Ratio" else Gate.OP
    plan = plan_model(load_model(str(path)), PlanOptions(gate=gate))
    assert [r.type.value for r in plan.refusals] == [path.stem]
    refusal = plan.refusals[0]
    assert refusal.layer == 1  # layer 0 is the sound HCA layer in every example
    assert refusal.field and refusal.expected and refusal.actual
    assert refusal.message.startswith(f"layer 1: {path.stem}: ")
    # the refused layer is left out of the totals; the sound layer is counted
    assert plan.layers[0].admitted and plan.layers[1].bytes is None
    assert plan.per_device == plan.layers[0].bytes


def test_v4_pro_op_gate_admits_everything():
    assert plan_model(load_model("deepseek-v4-pro")).refusals == ()


def test_v4_pro_c1_gate_refuses_each_csa_layer():
    plan = plan_model(load_model("deepseek-v4-pro"), PlanOptions(gate=Gate.C1))
    assert len(plan.refusals) == 30
    assert {r.type for r in plan.refusals} == {RefusalType.UNSUPPORTED_C1_RATIO}
    assert sorted(r.layer for r in plan.refusals) == list(range(2, 61, 2))
    # only the HCA groups and the MTP ring remain in the total
    assert plan.per_request_per_device_bytes == 31 * 9_634_688 + 74_624


def test_v4_flash_c1_gate():
    plan = plan_model(load_model("deepseek-v4-flash"), PlanOptions(gate=Gate.C1))
    assert len(plan.refusals) == 21


def test_later_checkpoint_ratios_are_refused_not_sized(tmp_path):
    plan = plan_model(load_model(str(EXAMPLES / "configs" / "v4.1-like")))
    assert [(r.type, r.layer) for r in plan.refusals] == [
        (RefusalType.UNSUPPORTED_RATIO, 0), (RefusalType.UNSUPPORTED_RATIO, 1)]
    assert plan.layers[0].bytes is None and plan.layers[1].bytes is None


def hca(**kw) -> Descriptor:
    base = dict(layer_id=3, compression_ratio=128, num_heads=64, max_seq_len=65536)
    base.update(kw)
    return Descriptor(**base)


def csa(**kw) -> Descriptor:
    base = dict(layer_id=2, compression_ratio=4, num_heads=64, index_num_heads=64, index_head_dim=128,
                index_topk=512, max_seq_len=65536)
    base.update(kw)
    return Descriptor(**base)


def types(refusals):
    return [r.type for r in refusals]


def test_linter_reports_every_type_at_once():
    d = csa(cache_format="f32", index_head_dim=64, device_count=4, num_heads=0,
            present_edges=frozenset({StateEdge.COMPRESSED}))
    assert set(types(validate(d))) == {
        RefusalType.RATIO4_REQUIRES_FP8_CACHE, RefusalType.RATIO4_REQUIRES_INDEX_HEAD_DIM_128,
        RefusalType.INVALID_HEAD_GEOMETRY, RefusalType.MULTI_DEVICE_AMBIGUITY, RefusalType.MISSING_STATE_EDGE}


def test_one_record_per_type_lists_every_clause():
    refusals = validate(hca(num_heads=0, window=0, batch=0))
    assert types(refusals) == [RefusalType.INVALID_HEAD_GEOMETRY]
    r = refusals[0]
    assert r.field == "num_heads, window, batch"
    assert r.actual == "0; 0; 0"
    assert "num_heads must be positive" in r.message and "batch must be positive" in r.message


def test_missing_edges_of_ratio4_lists_both_index_edges():
    d = csa(present_edges=frozenset({StateEdge.COMPRESSED, StateEdge.CARRY}))
    (r,) = validate(d)
    assert r.type is RefusalType.MISSING_STATE_EDGE
    assert r.field == "state_edges.index_key, state_edges.index_carry"


def test_unknown_format_is_alone():
    assert types(validate(csa(cache_format="bogus"))) == [RefusalType.UNKNOWN_CACHE_FORMAT]
    assert types(validate(hca(cache_format="bogus"))) == [RefusalType.UNKNOWN_CACHE_FORMAT]


def test_rope_exceeding_replaces_rope_clauses():
    assert types(validate(hca(qk_rope_head_dim=600))) == [RefusalType.ROPE_EXCEEDS_HEAD_DIM]


@pytest.mark.parametrize("kw,field", [
    ({"head_dim": 256}, "head_dim"),
    ({"qk_rope_head_dim": 32}, "qk_rope_head_dim"),
    ({"max_seq_len": 0}, "max_seq_len"),
    ({"max_seq_len": (1 << 20) + 1}, "max_seq_len"),
    ({"window": 256, "max_seq_len": 200}, "window"),
    ({"index_topk": 7}, "index_topk"),
])
def test_geometry_clauses(kw, field):
    (r,) = validate(hca(**kw))
    assert r.type is RefusalType.INVALID_HEAD_GEOMETRY
    assert field in r.field


def test_ratio4_needs_index_heads():
    (r,) = validate(csa(index_num_heads=0))
    assert r.type is RefusalType.INVALID_HEAD_GEOMETRY and r.field == "index_num_heads"


def test_max_seq_len_upper_bound_is_inclusive():
    assert validate(hca(max_seq_len=1 << 20)) == ()


def test_c1_adds_only_for_ratio4():
    assert validate_c1_runtime(hca()) == ()
    assert types(validate_c1_runtime(csa())) == [RefusalType.UNSUPPORTED_C1_RATIO]
    assert types(validate_c1_runtime(csa(cache_format="f32"))) == [
        RefusalType.RATIO4_REQUIRES_FP8_CACHE, RefusalType.UNSUPPORTED_C1_RATIO]


def test_refusal_dict_has_every_field():
    (r,) = validate(hca(device_count=2))
    assert r.as_dict() == {
        "type": "MultiDeviceAmbiguity", "layer": 3, "field": "device_count", "expected": "1", "actual": "2",
        "message": "layer 3: MultiDeviceAmbiguity: one group is accounted on exactly one device, got device_count 2",
    }
