"""The record-axis lint as a pure function over symbol names (CONTRACT §4)."""

from __future__ import annotations

import pytest

from csa_plan.planner.onnx.record_axes import LayerRecordAxes, lint_record_axes, records_at
from csa_plan.planner.refusals import RefusalType


def fixed(layer_id: int, ratio: int) -> LayerRecordAxes:
    past, present = f"past_compressed_records.{layer_id}", f"present_compressed_records.{layer_id}"
    index = (past, present) if ratio == 4 else (None, None)
    return LayerRecordAxes(layer_id, ratio, past, index[0], present, index[1])


def shared(layer_id: int, ratio: int) -> LayerRecordAxes:
    index = ("past_compressed_records", "present_compressed_records") if ratio == 4 else (None, None)
    return LayerRecordAxes(layer_id, ratio, "past_compressed_records", index[0], "present_compressed_records", index[1])


INTERLEAVED = (4, 128, 4, 128)


def test_fixed_exporter_symbols_pass():
    result = lint_record_axes(tuple(fixed(i, r) for i, r in enumerate(INTERLEAVED)), 8)
    assert result.refusals == ()
    assert (result.axes_seen, result.axes_unknown, result.symbols) == (12, 0, 8)


def test_shared_symbol_names_symbol_layers_and_sizes():
    result = lint_record_axes(tuple(shared(i, r) for i, r in enumerate(INTERLEAVED)), 8)
    shared_refusals = [r for r in result.refusals if r.type is RefusalType.SHARED_RECORD_AXIS]
    assert len(shared_refusals) == 1  # one record per (layer, type): both symbols are clauses of it
    r = shared_refusals[0]
    assert r.layer is None
    assert r.field == "record_axis"
    assert r.actual == ("'past_compressed_records' on layers 0, 1, 2, 3 would be bound to conflicting sizes 2 and 0 "
                        "at length 8; 'present_compressed_records' on layers 0, 1, 2, 3 would be bound to "
                        "conflicting sizes 2 and 0 at length 8")
    assert r.message.startswith(
        "model: SharedRecordAxis: record-axis symbol 'past_compressed_records' is shared by layers of different "
        "ratios (ratio 4 on layers 0, 2; ratio 128 on layers 1, 3); at total length 8 it would be bound to "
        "conflicting sizes 2 and 0 (floor(8/4) = 2, floor(8/128) = 0)")


@pytest.mark.parametrize("length, sizes", [(8, "2 and 0"), (256, "64 and 2"), (1024, "256 and 8")])
def test_conflicting_sizes_follow_the_length(length, sizes):
    result = lint_record_axes(tuple(shared(i, r) for i, r in enumerate(INTERLEAVED)), length)
    assert f"conflicting sizes {sizes} at length {length}" in result.refusals[0].actual
    assert records_at(4, length) == int(sizes.split()[0])


def test_shared_symbol_also_makes_present_past_disagree_on_every_layer():
    result = lint_record_axes(tuple(shared(i, r) for i, r in enumerate(INTERLEAVED)), 8)
    ppam = {r.layer: r for r in result.refusals if r.type is RefusalType.PRESENT_PAST_AXIS_MISMATCH}
    assert sorted(ppam) == [0, 1, 2, 3]
    assert "shared with layers of ratio 128" in ppam[0].message
    assert "shared with layers of ratio 4" in ppam[1].message


def test_same_ratio_sharing_is_not_a_conflict():
    layers = tuple(shared(i, 128) for i in range(3))
    assert lint_record_axes(layers, 8).refusals == ()


def test_index_axis_mismatch_alone():
    layers = [fixed(i, r) for i, r in enumerate(INTERLEAVED)]
    layers[2] = LayerRecordAxes(2, 4, "past_compressed_records.2", "past_index_records.2",
                                "present_compressed_records.2", "present_compressed_records.2")
    result = lint_record_axes(tuple(layers), 8)
    assert [(r.type, r.layer) for r in result.refusals] == [(RefusalType.INDEX_AXIS_MISMATCH, 2)]
    r = result.refusals[0]
    assert (r.field, r.expected, r.actual) == ("past_index_key.shape[1]", "'past_compressed_records.2'",
                                               "'past_index_records.2'")


def test_present_past_suffixes_naming_different_layers():
    layers = [fixed(i, r) for i, r in enumerate(INTERLEAVED)]
    layers[1] = LayerRecordAxes(1, 128, "past_compressed_records.1", None, "present_compressed_records.3", None)
    result = lint_record_axes(tuple(layers), 8)
    assert [(r.type, r.layer) for r in result.refusals] == [(RefusalType.PRESENT_PAST_AXIS_MISMATCH, 1)]
    assert "names layer 1 but output 1 (present_compressed_kv) 'present_compressed_records.3' names layer 3" \
        in result.refusals[0].message


def test_fixed_sizes_and_unknown_axes_are_not_conflicts():
    layers = (LayerRecordAxes(0, 4, 16, 16, None, None), LayerRecordAxes(1, 128, 16, None, None, None))
    result = lint_record_axes(layers, 8)
    assert result.refusals == ()
    assert (result.axes_seen, result.axes_unknown) == (3, 3)


def test_conflict_at_a_length_where_sizes_coincide_still_names_the_symbol():
    result = lint_record_axes(tuple(shared(i, r) for i, r in enumerate(INTERLEAVED)), 3)
    shared_refusal = result.refusals[0]
    assert shared_refusal.type is RefusalType.SHARED_RECORD_AXIS
    assert "conflicting sizes 0 and 0 at length 3" in shared_refusal.actual
    assert "they first differ at length 4: 1 and 0" in shared_refusal.message
