"""`csa-plan check model.onnx`: descriptors from nodes, the record-axis lint, capacity provenance."""

from __future__ import annotations


import pytest

from helpers.onnx_graphs import INTERLEAVED, V4_PRO_MAIN, build_model, builder, edit_layer, write_model

# One group at max_seq_len 65,536, 64 heads, top-k 512, fp8, window 128 (CONTRACT §2 by hand).
CSA_RECORDS, HCA_RECORDS = 65536 // 4, 65536 // 128
CSA_GROUP = {
    "compressed": CSA_RECORDS * 583, "carry": 8 * 2 * 1024 * 4, "index": CSA_RECORDS * 68,
    "index_carry": 8 * 2 * 256 * 4, "dense_ring": 128 * 583,
    "scratch": 64 * 128 * 4 + CSA_RECORDS * 4 + 512 * 4 + 64 * (128 + 512) * 4,
}
HCA_GROUP = {
    "compressed": HCA_RECORDS * 583, "carry": 128 * 2 * 512 * 4, "index": 0, "index_carry": 0,
    "dense_ring": 128 * 583, "scratch": 64 * (128 + HCA_RECORDS) * 4,
}
CSA_TOTAL, HCA_TOTAL = sum(CSA_GROUP.values()), sum(HCA_GROUP.values())


def check(csa, path, *args):
    return csa("check", str(path), "--json", *args)


def types_by_layer(doc):
    return sorted((r["layer"] if r["layer"] is not None else -1, r["type"]) for r in doc["refusals"])


# --- the two exporter variants --------------------------------------------------------

def test_fixed_per_layer_symbols_pass_with_exact_totals(csa, tmp_path):
    r = check(csa, write_model(tmp_path, "fixed.onnx", INTERLEAVED, "per_layer"))
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["verdict"] == "admitted" and doc["refusals"] == []
    assert doc["counts"] == {"csa": 2, "hca": 2, "swa": 0, "unsupported": 0}
    groups = {g["kind"]: g for g in doc["groups"]}
    assert groups["CSA"]["layer_ids"] == [0, 2] and groups["HCA"]["layer_ids"] == [1, 3]
    assert {k: groups["CSA"]["bytes_per_group"][k] for k in CSA_GROUP} == CSA_GROUP
    assert {k: groups["HCA"]["bytes_per_group"][k] for k in HCA_GROUP} == HCA_GROUP
    assert doc["totals"]["per_request_per_device"]["total"] == 2 * CSA_TOTAL + 2 * HCA_TOTAL == 24_295_936
    assert doc["model"]["compress_ratios"] == [4, 128, 4, 128]
    assert doc["model"]["num_main_layers"] == 4 and doc["model"]["num_mtp_layers"] == 0
    notes = doc["model"]["notes"]
    assert "max_seq_len 65536 from metadata_props 'max_seq_len'" in notes
    assert "layer ids from the integer in the state input names (e.g. 'past_key_values.0.compressed_kv') " \
           "on 4 node(s)" in notes
    assert "record-axis lint at length 8: 12 record axes, 8 symbols, 0 finding(s)" in notes


def test_old_shared_symbol_is_refused_with_the_conflict_named(csa, tmp_path):
    r = check(csa, write_model(tmp_path, "shared.onnx", INTERLEAVED, "shared"))
    assert r.code == 3
    doc = r.json()
    assert doc["verdict"] == "refused" and doc["exit_code"] == 3
    shared = [x for x in doc["refusals"] if x["type"] == "SharedRecordAxis"]
    assert len(shared) == 1
    assert shared[0]["layer"] is None
    assert set(shared[0]) == {"type", "layer", "field", "expected", "actual", "message"}
    assert shared[0]["actual"].startswith(
        "'past_compressed_records' on layers 0, 1, 2, 3 would be bound to conflicting sizes 2 and 0 at length 8")
    assert ("record-axis symbol 'past_compressed_records' is shared by layers of different ratios "
            "(ratio 4 on layers 0, 2; ratio 128 on layers 1, 3); at total length 8 it would be bound to "
            "conflicting sizes 2 and 0") in shared[0]["message"]
    assert "'present_compressed_records' on layers 0, 1, 2, 3" in shared[0]["actual"]
    assert types_by_layer(doc) == [(-1, "SharedRecordAxis")] + [(i, "PresentPastAxisMismatch") for i in range(4)]


def test_at_length_changes_the_named_sizes(csa, tmp_path):
    doc = check(csa, write_model(tmp_path, "shared.onnx", INTERLEAVED, "shared"), "--at-length", "512").json()
    shared = next(x for x in doc["refusals"] if x["type"] == "SharedRecordAxis")
    assert "conflicting sizes 128 and 4 at length 512" in shared["actual"]


def test_human_output_shows_the_conflict(csa, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    r = csa("check", str(write_model(tmp_path, "shared.onnx", INTERLEAVED, "shared")))
    assert r.code == 3
    flat = " ".join(r.out.split())
    assert "SharedRecordAxis" in flat and "REFUSED (exit 3)" in flat
    assert "would be bound to conflicting sizes 2 and 0 at length 8" in flat
    assert "note: record-axis lint at length 8: 12 record axes, 2 symbols, 5 finding(s)" in flat


# --- per-layer findings -----------------------------------------------------------------

def _index_on_other_symbol(spec):
    name = f"past_key_values.{spec.layer_id}.index_key"
    spec.shapes[name] = ["batch", f"past_index_records.{spec.layer_id}", 68]


def test_broken_lockstep_is_index_axis_mismatch(csa, tmp_path):
    path = write_model(tmp_path, "lockstep.onnx", INTERLEAVED, edit=edit_layer(2, _index_on_other_symbol))
    doc = check(csa, path).json()
    assert types_by_layer(doc) == [(2, "IndexAxisMismatch")]
    r = doc["refusals"][0]
    assert (r["field"], r["expected"], r["actual"]) == (
        "past_index_key.shape[1]", "'past_compressed_records.2'", "'past_index_records.2'")
    assert doc["totals"]["refused_layers_excluded"] == [2]
    assert doc["totals"]["per_request_per_device"]["total"] == CSA_TOTAL + 2 * HCA_TOTAL


def test_present_naming_another_layer_is_present_past_mismatch(csa, tmp_path):
    def change(spec):
        spec.shapes[f"present.{spec.layer_id}.compressed_kv"] = ["batch", "present_compressed_records.3", 583]

    doc = check(csa, write_model(tmp_path, "pp.onnx", INTERLEAVED, edit=edit_layer(1, change))).json()
    assert types_by_layer(doc) == [(1, "PresentPastAxisMismatch")]


@pytest.mark.parametrize("index, edge", [(7, "carry"), (6, "compressed"), (17, "index_key"), (18, "index_carry")])
def test_missing_state_edge(csa, tmp_path, index, edge):
    def change(spec):
        spec.inputs[index] = ""  # an empty name: the optional input is absent

    r = check(csa, write_model(tmp_path, "edge.onnx", INTERLEAVED, edit=edit_layer(0, change)))
    assert r.code == 3
    doc = r.json()
    assert types_by_layer(doc) == [(0, "MissingStateEdge")]
    assert doc["refusals"][0]["field"] == f"state_edges.{edge}"
    assert doc["layers"][0]["descriptor"]["present_edges"] == sorted(
        {"compressed", "carry", "index_key", "index_carry"} - {edge})


def test_trailing_state_inputs_left_off_are_missing_edges(csa, tmp_path):
    def change(spec):
        del spec.inputs[17:]

    doc = check(csa, write_model(tmp_path, "short.onnx", INTERLEAVED, edit=edit_layer(2, change))).json()
    assert types_by_layer(doc) == [(2, "MissingStateEdge")]
    assert doc["refusals"][0]["field"] == "state_edges.index_key, state_edges.index_carry"


@pytest.mark.parametrize("layer, change, field", [
    (1, lambda s: s.outputs.extend(["x.3", "x.4"]), "outputs"),  # ratio 128 with 5 outputs
    (0, lambda s: s.outputs.__delitem__(slice(3, None)), "outputs"),  # ratio 4 with 3 outputs
    (1, lambda s: s.inputs.extend([""] * 4 + ["layers.1.index_query_stray"] + [""] * 3), "inputs"),
    (0, lambda s: s.inputs.__setitem__(12, ""), "inputs"),  # required index_weight absent
    (0, lambda s: s.inputs.extend([""] * 5), "inputs"),  # 25 inputs
])
def test_arity_mismatch(csa, tmp_path, layer, change, field):
    doc = check(csa, write_model(tmp_path, "arity.onnx", INTERLEAVED, edit=edit_layer(layer, change))).json()
    assert types_by_layer(doc) == [(layer, "ArityMismatch")]
    assert doc["refusals"][0]["field"] == field


@pytest.mark.parametrize("attr, value, field", [
    ("cache_layout_version", 2, "cache_layout_version"),
    ("index_layout_version", 7, "index_layout_version"),
    ("sink_mode", "value_row", "sink_mode"),
])
def test_unknown_layout_versions_are_unsupported_op_version(csa, tmp_path, attr, value, field):
    doc = check(csa, write_model(tmp_path, "v.onnx", INTERLEAVED,
                                 edit=edit_layer(3, lambda s: s.attrs.__setitem__(attr, value)))).json()
    assert types_by_layer(doc) == [(3, "UnsupportedOpVersion")]
    assert (doc["refusals"][0]["field"], doc["refusals"][0]["actual"]) == (field, str(value))


def test_unknown_opset_version_refuses_every_node(csa, tmp_path):
    doc = check(csa, write_model(tmp_path, "op2.onnx", INTERLEAVED, opset_version=2)).json()
    assert types_by_layer(doc) == [(i, "UnsupportedOpVersion") for i in range(4)]
    assert doc["refusals"][0]["field"] == "opset_import[pkg.nxrt]"


def test_gate_refusals_come_from_node_attributes(csa, tmp_path):
    def change(spec):
        spec.attrs["cache_format"] = "fp4_e2m1_block32"

    doc = check(csa, write_model(tmp_path, "fmt.onnx", INTERLEAVED, edit=edit_layer(0, change))).json()
    assert types_by_layer(doc) == [(0, "Ratio4RequiresFp8Cache")]


def test_unknown_cache_format_string_reaches_the_gate(csa, tmp_path):
    doc = check(csa, write_model(tmp_path, "fmt.onnx", INTERLEAVED,
                                 edit=edit_layer(1, lambda s: s.attrs.__setitem__("cache_format", "bf16")))).json()
    assert types_by_layer(doc) == [(1, "UnknownCacheFormat")]


def test_ratio_zero_node_is_unsupported_ratio(csa, tmp_path):
    def change(spec):
        spec.attrs["compression_ratio"] = 0
        spec.attrs.update(index_num_heads=0, index_head_dim=0, index_topk=0)

    doc = check(csa, write_model(tmp_path, "r0.onnx", (4, 128, 128), edit=edit_layer(2, change))).json()
    assert types_by_layer(doc) == [(2, "UnsupportedRatio")]


# --- layer ids, capacity, batch -------------------------------------------------------

def test_layer_id_attribute_wins_over_names(csa, tmp_path):
    def change(spec):
        spec.attrs["layer_id"] = 10 + spec.layer_id

    doc = check(csa, write_model(tmp_path, "ids.onnx", INTERLEAVED, edit=change)).json()
    assert [l["layer_id"] for l in doc["layers"]] == [10, 11, 12, 13]
    assert "layer ids from the layer_id attribute on 4 node(s)" in doc["model"]["notes"]


def test_layer_ids_fall_back_to_node_order(csa, tmp_path):
    def change(spec):
        i = spec.layer_id
        spec.inputs = [n.replace(f"past_key_values.{i}.", f"past_key_values_L{i}_") for n in spec.inputs]
        spec.shapes = {k.replace(f"past_key_values.{i}.", f"past_key_values_L{i}_"): v for k, v in spec.shapes.items()}

    doc = check(csa, write_model(tmp_path, "order.onnx", INTERLEAVED, edit=change)).json()
    assert [l["layer_id"] for l in doc["layers"]] == [0, 1, 2, 3]
    assert "layer ids from the node's order among CSA nodes on 4 node(s)" in doc["model"]["notes"]


def test_names_give_layer_ids_that_are_not_the_node_order(csa, tmp_path):
    # a graph whose first two layers are SWA-only (no CSA node): the names carry 2..5
    def change(spec):
        old, new = f"past_key_values.{spec.layer_id}.", f"past_key_values.{spec.layer_id + 2}."
        spec.inputs = [n.replace(old, new) for n in spec.inputs]
        spec.shapes = {k.replace(old, new): v for k, v in spec.shapes.items()}

    doc = check(csa, write_model(tmp_path, "off.onnx", INTERLEAVED, edit=change)).json()
    assert [l["layer_id"] for l in doc["layers"]] == [2, 3, 4, 5]


def test_duplicate_layer_ids_are_bad_input(csa, tmp_path):
    path = write_model(tmp_path, "dup.onnx", INTERLEAVED, edit=lambda s: s.attrs.__setitem__("layer_id", 7))
    r = check(csa, path)
    assert r.code == 2
    assert "layer_id: layer 7 is claimed by nodes 'layers.0.attn.csa' and 'layers.1.attn.csa'" in r.err


def test_capacity_from_node_attributes_before_metadata(csa, tmp_path):
    def change(spec):
        spec.attrs.update(max_seq_len=4096, sliding_window=64)

    doc = check(csa, write_model(tmp_path, "cap.onnx", INTERLEAVED, edit=change,
                                 metadata={"max_seq_len": "65536", "sliding_window": "128"})).json()
    assert doc["options"]["max_seq_len"] == 4096 and doc["options"]["window"] == 64
    assert "max_seq_len 4096 from node attribute 'max_seq_len'" in doc["model"]["notes"]
    assert "window 64 from node attribute 'sliding_window'" in doc["model"]["notes"]


def test_capacity_alternative_keys_in_metadata(csa, tmp_path):
    doc = check(csa, write_model(tmp_path, "cap.onnx", INTERLEAVED,
                                 metadata={"max_sequence_length": "8192", "window_size": "32"})).json()
    assert (doc["options"]["max_seq_len"], doc["options"]["window"]) == (8192, 32)
    assert "window 32 from metadata_props 'window_size'" in doc["model"]["notes"]


def test_command_line_overrides_the_graph(csa, tmp_path):
    doc = check(csa, write_model(tmp_path, "cap.onnx", INTERLEAVED), "--max-seq-len", "1024",
                "--window", "64").json()
    assert (doc["options"]["max_seq_len"], doc["options"]["window"]) == (1024, 64)
    notes = doc["model"]["notes"]
    assert "max_seq_len 1024 from --max-seq-len (overrides the graph's 65536 from metadata_props 'max_seq_len')" \
        in notes
    assert "window 64 from --window" in notes


def test_missing_max_seq_len_everywhere_is_bad_input_unless_given(csa, tmp_path):
    path = write_model(tmp_path, "nocap.onnx", INTERLEAVED, metadata={})
    r = check(csa, path)
    assert r.code == 2
    assert "max_seq_len: no CSA node attribute (max_seq_len / max_sequence_length) or metadata_props entry " \
           "gives it; pass --max-seq-len" in r.err
    ok = check(csa, path, "--max-seq-len", "65536")
    assert ok.code == 0
    assert ok.json()["totals"]["per_request_per_device"]["total"] == 24_295_936


def test_mixed_capacity_sources_are_listed_per_layer(csa, tmp_path):
    path = write_model(tmp_path, "mix.onnx", INTERLEAVED,
                       edit=edit_layer(0, lambda s: s.attrs.__setitem__("max_seq_len", 4096)))
    doc = check(csa, path).json()
    assert "max_seq_len: 4096 from node attribute 'max_seq_len' on layers 0; 65536 from metadata_props " \
           "'max_seq_len' on layers 1, 2, 3" in doc["model"]["notes"]
    assert [l["descriptor"]["max_seq_len"] for l in doc["layers"]] == [4096, 65536, 65536, 65536]


def test_fixed_batch_axis_is_read_from_the_graph(csa, tmp_path):
    def change(spec):
        for name, dims in spec.shapes.items():
            if dims and dims[0] == "batch":
                dims[0] = 2

    doc = check(csa, write_model(tmp_path, "b2.onnx", INTERLEAVED, edit=change)).json()
    assert doc["options"]["batch"] == 2
    assert doc["groups"][0]["bytes_per_group"]["compressed"] == 2 * CSA_GROUP["compressed"]


# --- scale ------------------------------------------------------------------------------

def test_62_node_v4_pro_shaped_graph(csa, tmp_path):
    ratios = V4_PRO_MAIN + (4,)
    assert len(ratios) == 62
    path = write_model(tmp_path, "pro.onnx", ratios, num_heads=128, index_topk=1024,
                       metadata={"max_seq_len": "1048576"}, external_bytes_per_layer=200 << 20)
    r = check(csa, path)
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["counts"] == {"csa": 31, "hca": 31, "swa": 0, "unsupported": 0}
    groups = {g["kind"]: g for g in doc["groups"]}
    assert groups["CSA"]["bytes_per_group"]["total"] == 172_487_552  # CONTRACT §2 worked example
    assert groups["HCA"]["bytes_per_group"]["total"] == 9_634_688
    assert doc["totals"]["per_request_per_device"]["total"] == 31 * 172_487_552 + 31 * 9_634_688
    assert [l["layer_id"] for l in doc["layers"]] == list(range(62))


def test_62_node_graph_with_a_ratio_zero_mtp_node(csa, tmp_path):
    ratios = V4_PRO_MAIN + (0,)

    def change(spec):
        if spec.ratio == 0:
            spec.attrs.update(index_num_heads=0, index_head_dim=0, index_topk=0)

    r = check(csa, write_model(tmp_path, "pro0.onnx", ratios, num_heads=128, index_topk=1024, edit=change,
                               metadata={"max_seq_len": "1048576"}))
    doc = r.json()
    assert r.code == 3
    assert types_by_layer(doc) == [(61, "UnsupportedRatio")]
    assert doc["totals"]["per_request_per_device"]["total"] == 30 * 172_487_552 + 31 * 9_634_688


def test_missing_multi_gigabyte_external_data_is_never_needed(csa, tmp_path):
    path = write_model(tmp_path, "ext.onnx", INTERLEAVED, external_bytes_per_layer=3 << 30)
    assert not (tmp_path / "weights.bin").exists()
    assert path.stat().st_size < 64 << 10
    r = check(csa, path)  # timing lives in benchmarks/bench_onnx_check.py, not in a test
    assert r.code == 0, r.err
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    declared = sum(int(e.value) for t in model.graph.initializer for e in t.external_data if e.key == "length")
    assert declared == 16 * (3 << 30)  # 5 weights per CSA node, 3 per HCA node: 48 GiB declared


def test_embedded_multi_gigabyte_payload_is_skipped_not_read(csa, tmp_path):
    """A model whose graph embeds a 4 GiB initializer (a sparse file): only the node list is read."""
    from onnx import TensorProto

    model = build_model(INTERLEAVED)
    graph_bytes = model.graph.SerializeToString()
    payload = 4 << 30
    tensor_head = TensorProto(name="huge", data_type=TensorProto.UINT8, dims=[payload]).SerializeToString()
    # raw_data (field 9, wire type 2) of `payload` bytes, written as a hole in the file
    tensor_prefix = tensor_head + bytes([9 << 3 | 2]) + _varint(payload)
    initializer = bytes([5 << 3 | 2]) + _varint(len(tensor_prefix) + payload) + tensor_prefix
    graph_len = len(graph_bytes) + len(initializer) + payload
    rest = model.SerializeToString().replace(bytes([7 << 3 | 2]) + _varint(len(graph_bytes)) + graph_bytes, b"")
    path = tmp_path / "embedded.onnx"
    with open(path, "wb") as fh:
        fh.write(rest + bytes([7 << 3 | 2]) + _varint(graph_len) + graph_bytes + initializer)
        fh.seek(payload, 1)
        fh.truncate()
    assert path.stat().st_size > payload
    import resource

    peak_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = check(csa, path)
    assert r.code == 0, r.err
    # the 4 GiB payload was skipped by offset, never paged in: the process peak barely moves
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before_kib < 256 << 10
    assert r.json()["totals"]["per_request_per_device"]["total"] == 24_295_936


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def test_example_builder_writes_both_variants(tmp_path):
    assert builder.main(["build_examples.py", str(tmp_path)]) == 0
    assert {p.name for p in tmp_path.iterdir()} == set(builder.EXAMPLES)


def test_head_counts_fall_back_to_the_query_shapes(csa, tmp_path):
    """An exporter that leaves num_heads / index heads out: the static query shapes give them."""
    def drop(spec):
        for name in ("num_heads", "index_num_heads", "index_head_dim", "head_dim"):
            spec.attrs.pop(name, None)

    full = check(csa, write_model(tmp_path, "full.onnx", INTERLEAVED)).json()
    bare = check(csa, write_model(tmp_path, "bare.onnx", INTERLEAVED, edit=drop)).json()
    assert bare["exit_code"] == 0
    assert bare["totals"] == full["totals"]
    assert [l["descriptor"]["num_heads"] for l in bare["layers"]] == [64, 64, 64, 64]
    assert [l["descriptor"]["index_num_heads"] for l in bare["layers"]] == [64, 0, 64, 0]


def test_num_heads_missing_everywhere_is_bad_input(csa, tmp_path):
    def drop(spec):
        spec.attrs.pop("num_heads", None)
        spec.shapes[spec.inputs[0]] = ["batch", "sequence_length", "heads", 512]

    r = csa("check", str(write_model(tmp_path, "nohead.onnx", INTERLEAVED, edit=drop)))
    assert r.code == 2 and "num_heads" in r.err and "query input's shape" in r.err
