"""ONNX graphs of shared compressed state: one record tensor per kv source, readers taking it as an input edge."""

from __future__ import annotations

from csa_plan.planner.layout import LayerKind
from csa_plan.planner.loaders.model_files import load_model
from csa_plan.planner.plan import plan_model
from csa_plan.planner.refusals import RefusalType

from helpers import EXAMPLES

ONNX = EXAMPLES / "onnx"


def test_the_per_source_graph_is_admitted_with_its_owners_charged_once():
    spec = load_model(str(ONNX / "shared_sources.onnx"))
    plan = plan_model(spec)
    assert plan.refusals == ()
    assert [l.descriptor.layer_id for l in plan.layers if l.kind is LayerKind.OWNER] == [0, 2]
    assert plan.count(LayerKind.READER) == 4
    assert [l.descriptor.sharing.kv_source for l in plan.layers] == [0, 0, 2, 2, 2, 2]
    assert [l.descriptor.sharing.index_source for l in plan.layers] == [0, 0, 2, 2, 4, 4]
    L = 65536
    owners = [l.bytes for l in plan.layers if l.kind is LayerKind.OWNER]
    assert sum(b.compressed_bytes + b.index_bytes for b in owners) == (L // 2 + L) * (288 + 68)
    assert all(l.bytes.compressed_bytes == l.bytes.index_bytes == 0 for l in plan.layers if l.kind is LayerKind.READER)
    assert "4 symbols, 0 finding(s)" in " ".join(spec.notes)  # past/present of each source's records and keys


def test_the_twin_is_refused_for_a_reader_axis_and_a_symbol_shared_across_ratios():
    plan = plan_model(load_model(str(ONNX / "shared_sources_reader_own_axis.onnx")))
    found = {(r.type, r.layer) for r in plan.refusals}
    assert (RefusalType.READER_OWN_RECORD_AXIS, 3) in found
    assert (RefusalType.SHARED_RECORD_AXIS, None) in found
    shared = next(r for r in plan.refusals if r.type is RefusalType.SHARED_RECORD_AXIS)
    assert "conflicting sizes 8 and 4" in shared.message  # floor(8/1) and floor(8/2)
    assert {t for t, _ in found} <= {RefusalType.READER_OWN_RECORD_AXIS, RefusalType.SHARED_RECORD_AXIS,
                                     RefusalType.PRESENT_PAST_AXIS_MISMATCH}
    assert plan.layers[3].bytes is None


def test_a_v4_graph_has_no_sharing():
    spec = load_model(str(ONNX / "interleaved_per_layer.onnx"))
    assert all(d.sharing is None for d in spec.layers)
