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


def test_shared_node_arity_by_role(tmp_path):
    from helpers.onnx_graphs import builder

    model = builder.shared_model()
    nodes = model.graph.node
    nodes[0].input[7] = ""  # the ratio-2 source loses its carry
    nodes[3].input[6] = ""  # a reader loses its source's cache edge
    nodes[4].input[11] = ""  # an index source loses its index queries
    del nodes[2].output[3:]  # the ratio-1 source writes no index keys
    plan = plan_model(load_model(str(builder.write(model, tmp_path / "broken.onnx"))))
    arity = {r.layer: r for r in plan.refusals if r.type is RefusalType.ARITY_MISMATCH}
    assert sorted(arity) == [0, 2, 3, 4]
    assert "7 past_compression_carry" in arity[0].message and "6 past_compressed_kv" in arity[3].message
    assert "11 index_query" in arity[4].message and "3 present_index_key" in arity[2].message
