"""Cross-layer shared compressed state (DeepSeek-V4.1-Flash): descriptor, gate, layout, ledger.

The figures asserted are DEEPSEEK_V41.md §4's published ones (890 B/token, 288/528/584 B
records, 68/132 B keys, the 11.6x naive overcount); the code computes them from the config's
properties, so a wrong topology, width or record count fails here.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from csa_plan.planner.descriptor import IndexKeyFormat, LayerMode, RecordFormat
from csa_plan.planner.gate import Gate, validate
from csa_plan.planner.layout import (LayerKind, StateClass, shared_group_bytes, shared_index_key_bytes,
                                     shared_record_bytes)
from csa_plan.planner.ledger import Ledger, SharedStateError
from csa_plan.planner.loaders.model_files import from_hf_config, load_model
from csa_plan.planner.plan import PlanOptions, plan_model
from csa_plan.planner.refusals import RefusalType
from csa_plan.planner.sharing import refuse_double_count, source_state_bytes

from helpers import EXAMPLES

SHARED = EXAMPLES / "configs" / "shared"
L = 1 << 20


def v41(**options):
    return plan_model(load_model("deepseek-v4.1-flash"), PlanOptions(max_seq_len=L, **options))


def test_roles_follow_the_config_topology():
    plan = v41()
    assert plan.refusals == ()
    modes = {l.descriptor.layer_id: l.descriptor.mode for l in plan.layers}
    assert [i for i, m in modes.items() if m is LayerMode.OWN_SOURCE] == [2, 8, 14, 20]
    assert [i for i, m in modes.items() if m is LayerMode.WINDOW_ONLY] == [0, 1, 40, 41, 42]
    assert sum(m is LayerMode.READER for m in modes.values()) == 38 - 4
    d = {l.descriptor.layer_id: l.descriptor for l in plan.layers}
    assert [d[i].sharing.kv_source for i in (3, 7, 9, 19, 21, 39)] == [2, 2, 8, 14, 20, 20]
    assert [d[i].sharing.index_source for i in (21, 25, 39)] == [20, 24, 36]
    assert [i for i in d if d[i].sharing.candidate_source == 20] == [20, 24, 28, 32, 36]
    assert plan.count(LayerKind.OWNER) == 4 and plan.count(LayerKind.READER) == 34
    assert plan.count(LayerKind.SWA) == 5


def test_reference_formats_are_derived_from_head_dims():
    assert shared_record_bytes(RecordFormat.NVFP4, 512, 64) == 288
    assert shared_record_bytes(RecordFormat.MXFP8, 512, 64) == 528
    assert shared_record_bytes(RecordFormat.FP8_V4, 512, 64) == 584
    assert shared_index_key_bytes(IndexKeyFormat.MXFP4, 128) == 68
    assert shared_index_key_bytes(IndexKeyFormat.FP8, 128) == 132


@pytest.mark.parametrize("tp", [1, 8])
def test_owners_are_charged_once_890_bytes_per_token(tp):
    plan = v41(tp=tp)
    owners = [l for l in plan.layers if l.kind is LayerKind.OWNER]
    state = sum(l.bytes.compressed_bytes + l.bytes.index_bytes for l in owners)
    assert state == 890 * L  # 3 x L/2 x 356 + L x 356
    assert sum(l.bytes.carry_bytes for l in owners) == 3 * 2 * 2 * 512 * 4  # ratio-2 owners: 2 fp32 rows each
    assert plan.per_device.index_carry_bytes == 0  # keys come from the compressor's latent
    for l in plan.layers:  # readers and window-only layers: their own window (and workspaces), no source state
        if l.kind is not LayerKind.OWNER:
            assert source_state_bytes(l.bytes) == 0
        assert l.bytes.dense_ring_bytes == 128 * 528
    assert plan.per_device.dense_ring_bytes == 43 * 128 * 528


def test_a_naive_per_layer_sum_is_refused_as_a_double_count():
    plan = v41()
    naive = []
    for l in plan.layers:
        d = l.descriptor
        if d.mode is LayerMode.READER:  # size every reader as if it owned a cache of its own
            s = d.sharing
            d = d.with_(sharing=replace(s, kv_sources=tuple(sorted({*s.kv_sources, d.layer_id})), kv_source=d.layer_id,
                                        index_sources=tuple(sorted({*s.index_sources, d.layer_id}))))
            naive.append((l.descriptor, shared_group_bytes(d)))
        else:
            naive.append((d, l.bytes))
    naive_state = sum(b.compressed_bytes + b.index_bytes for _, b in naive)
    assert naive_state == 10_324 * L and round(naive_state / (890 * L), 1) == 11.6
    refused = refuse_double_count(naive)
    assert {r.type for r in refused} == {RefusalType.DOUBLE_COUNT}
    assert [r.layer for r in refused] == [l.descriptor.layer_id for l in plan.layers
                                          if l.descriptor.mode is LayerMode.READER]
    assert refuse_double_count((l.descriptor, l.bytes) for l in plan.layers) == ()


def test_ledger_charges_a_source_once_and_releases_after_the_last_reader():
    plan = v41()
    ledger = Ledger({0: 0})
    owner = next(l for l in plan.layers if l.descriptor.layer_id == 20)
    charge = ledger.try_charge_source(7, 0, 20, owner.bytes)
    with pytest.raises(SharedStateError) as second:
        ledger.try_charge_source(7, 0, 20, owner.bytes)
    assert second.value.refusal.type is RefusalType.DOUBLE_COUNT and ledger.charge_failures == 1
    assert ledger.resident_bytes(0) == owner.bytes.total_bytes  # the refused charge changed nothing else
    readers = [ledger.attach_reader(7, 0, 20, layer) for layer in range(21, 40)]
    assert ledger.source_holds(7, 0, 20) == 20
    charge.release()
    charge.release()  # exactly once
    assert ledger.resident_bytes(0) == owner.bytes.total_bytes  # readers still hold it
    for r in readers[:-1]:
        r.release()
    assert ledger.resident_by_class(0).by_class()[StateClass.COMPRESSED] == owner.bytes.compressed_bytes
    readers[-1].release()
    assert ledger.at_baseline and ledger.peak_bytes(0) == owner.bytes.total_bytes
    with pytest.raises(SharedStateError) as orphan:
        ledger.attach_reader(7, 0, 20, 21)
    assert orphan.value.refusal.type is RefusalType.UNACCOUNTED_READER and ledger.at_baseline


def test_source_charges_are_per_request_and_device():
    ledger = Ledger()
    a = ledger.try_charge_source(1, 0, 2, {StateClass.COMPRESSED: 10})
    b = ledger.try_charge_source(2, 0, 2, {StateClass.COMPRESSED: 10})
    c = ledger.try_charge_source(1, 1, 2, {StateClass.COMPRESSED: 10})
    assert ledger.resident_bytes() == 30
    for h in (a, b, c):
        h.release()
    assert ledger.at_baseline


def test_ledger_source_charge_fails_closed_on_out_of_memory():
    from csa_plan.planner.ledger import OutOfMemoryError

    ledger = Ledger({0: 5})
    with pytest.raises(OutOfMemoryError):
        ledger.try_charge_source(1, 0, 2, {StateClass.COMPRESSED: 10})
    assert ledger.at_baseline and ledger.source_holds(1, 0, 2) == 0
    ledger.try_charge_source(1, 0, 2, {StateClass.COMPRESSED: 5}).release()  # not left registered
    assert ledger.at_baseline


REFUSAL_EXAMPLES = sorted(SHARED.glob("refuse-*.json"))


def test_every_config_type_of_shared_state_has_an_example():
    assert {p.stem.removeprefix("refuse-") for p in REFUSAL_EXAMPLES} == {
        "NoKvSource", "KvSourceRatioMismatch", "KvSourceNotIndexSource", "InvalidSourceTopology",
        "CandidateStageTooSmall", "MixedRatioFamilies"}


@pytest.mark.parametrize("path", REFUSAL_EXAMPLES, ids=lambda p: p.stem)
def test_shared_example_triggers_exactly_its_type(path: Path):
    plan = plan_model(load_model(str(path)))
    assert {r.type.value for r in plan.refusals} == {path.stem.removeprefix("refuse-")}
    for r in plan.refusals:
        assert r.field and r.expected and r.actual and r.message
        if r.layer is not None:
            assert plan.layers[r.layer].bytes is None  # refused layers are left out of the totals


def test_the_sound_twin_is_admitted():
    assert plan_model(load_model(str(SHARED / "tiny-shared.json"))).refusals == ()


def test_ratios_1_and_2_without_a_topology_stay_refused():
    cfg = json.loads((SHARED / "tiny-shared.json").read_text())
    del cfg["kv_source_layer_ids"]
    plan = plan_model(from_hf_config(cfg, source="t", name="t"))
    assert {r.type for r in plan.refusals} == {RefusalType.UNSUPPORTED_RATIO}


def test_c1_gate_refuses_shared_ratios():
    plan = v41(gate=Gate.C1)
    assert {r.layer for r in plan.refusals} == set(range(2, 40))
    assert {r.type for r in plan.refusals} == {RefusalType.UNSUPPORTED_C1_RATIO}


def test_other_layout_profiles_refuse_rather_than_approximate():
    plan = v41(layout="bf16-reference")
    assert [r.type for r in plan.refusals] == [RefusalType.LAYOUT_NOT_MODELLED]
    assert plan.per_device.total_bytes == 0


def test_hf_ids_and_the_1017_checkpoint():
    assert load_model("deepseek-ai/DeepSeek-V4.1-Flash").name == "deepseek-v4.1-flash"
    m = load_model("deepseek-ai/DeepSeek-V4.1-Flash-1017")
    assert m.name == "deepseek-v4.1-flash-1017" and len(m.layers) == 43


def test_bad_topology_values_are_bad_input():
    from csa_plan.planner.errors import BadInput

    cfg = json.loads((SHARED / "tiny-shared.json").read_text())
    for bad in ({"kv_source_layer_ids": "2"}, {"index_source_layer_ids": [1, True]},
                {"kv_source_layer_ids": [1, -3]}):
        with pytest.raises(BadInput):
            from_hf_config({**cfg, **bad}, source="t", name="t")
    del cfg["index_source_layer_ids"]
    with pytest.raises(BadInput):
        from_hf_config(cfg, source="t", name="t")


def test_a_reader_gated_alone_needs_only_its_descriptor():
    d = next(x for x in load_model("deepseek-v4.1-flash").layers if x.layer_id == 30)
    assert validate(d) == ()
    assert {r.type for r in validate(d.with_(sharing=replace(d.sharing, kv_source=None)))} == {RefusalType.NO_KV_SOURCE}
