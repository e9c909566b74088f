"""Bad ONNX input ends as one line and exit 2 — never a traceback, never an empty table."""

from __future__ import annotations

import json

import random
import subprocess
import sys

import pytest
from onnx import TensorProto, helper

from csa_plan.planner.errors import BadInput
from csa_plan.planner.onnx.graph import load_onnx_model
from csa_plan.planner.onnx.structure import read_structure
from helpers.onnx_graphs import INTERLEAVED, build_model, builder, edit_layer, write_model


def check(csa, path, *args):
    return csa("check", str(path), "--json", *args)


def one_line_error(r) -> str:
    assert r.code == 2, (r.code, r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("csa-plan: error: ")
    doc = json.loads(r.out)  # --json: the error document, one line, and nothing else
    assert r.out.count("\n") == 1 and doc["schema"] == "csa-plan/error/v1" and doc["exit_code"] == 2
    assert lines[0] == "csa-plan: error: " + doc["message"]
    return lines[0]


@pytest.mark.parametrize("content, problem", [
    (b"hello, this is text\n", "not an ONNX model (invalid protobuf at byte 2: wire type 4 (field 13)"),
    (b'{"ir_version": 8}', "not an ONNX model (invalid protobuf at byte 0: wire type 3 (field 15)"),
    (b"\x89PNG\r\n\x1a\n" + bytes(64), "not an ONNX model (invalid protobuf at byte 10: field number 0 is invalid)"),
    (b"\x08\x08", "not an ONNX model (no graph field)"),  # ir_version 8 and nothing else
    (b"\x12\x03abc", "not an ONNX model (no ir_version field)"),
    (b"", "empty file, not an ONNX model"),
])
def test_not_onnx(csa, tmp_path, content, problem):
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    assert problem in one_line_error(check(csa, path))


def test_random_bytes_are_not_onnx(csa, tmp_path):
    path = tmp_path / "random.onnx"
    path.write_bytes(random.Random(7).randbytes(4096))
    assert "not an ONNX model" in one_line_error(check(csa, path))


def test_another_protobuf_message_is_not_onnx(csa, tmp_path):
    path = tmp_path / "tensor.onnx"
    path.write_bytes(helper.make_tensor("t", TensorProto.FLOAT, [2], [1.0, 2.0]).SerializeToString())
    assert "not an ONNX model (field 2 at byte 2 has wire type 0; ModelProto declares it as wire type 2)" in \
        one_line_error(check(csa, path))


def test_truncated_files_are_bad_input_at_every_cut(csa, tmp_path):
    model = build_model(INTERLEAVED)
    data = model.SerializeToString()
    # fields after the graph (opset_import, metadata_props) end at field boundaries where a cut
    # leaves a well-formed, shorter model; every cut up to the graph's end must be caught
    after_graph = len(type(model)(opset_import=model.opset_import, metadata_props=model.metadata_props)
                      .SerializeToString())
    graph_end = len(data) - after_graph
    assert data[graph_end:] == type(model)(opset_import=model.opset_import,
                                           metadata_props=model.metadata_props).SerializeToString()
    path = tmp_path / "cut.onnx"
    cuts = sorted({*range(1, 40), *range(40, graph_end, max(1, graph_end // 80)), graph_end - 1})
    for cut in cuts:
        path.write_bytes(data[:cut])
        line = one_line_error(check(csa, path))
        assert "truncated" in line or "no graph field" in line, (cut, line)


def test_truncated_message_names_the_shortfall(csa, tmp_path):
    data = build_model(INTERLEAVED).SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[:3000])
    assert "truncated ONNX file (at byte" in one_line_error(check(csa, path))
    assert "but only" in one_line_error(check(csa, path))


def test_graph_without_csa_node(csa, tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    path = builder.write(helper.make_model(graph), tmp_path / "relu.onnx")
    line = one_line_error(check(csa, path))
    assert line.endswith("relu.onnx: no CompressedSparseAttention node (domain pkg.nxrt) among the graph's 1 nodes")


def test_csa_node_in_another_domain_is_named(csa, tmp_path):
    model = build_model((128,))
    model.graph.node[0].domain = "com.microsoft"
    path = builder.write(model, tmp_path / "ms.onnx")
    assert "found CompressedSparseAttention in domain(s) com.microsoft, expected pkg.nxrt" in \
        one_line_error(check(csa, path))


@pytest.mark.parametrize("attr, value, problem", [
    ("compression_ratio", 4.0, "attribute compression_ratio: expected an integer attribute, got float 4.0"),
    ("compression_ratio", "4", "attribute compression_ratio: expected an integer attribute, got string '4'"),
    ("num_heads", -64, "attribute num_heads: expected a non-negative integer, got -64"),
    ("cache_format", 8, "attribute cache_format: expected a string attribute, got int 8"),
    ("layer_id", -1, "attribute layer_id: expected a non-negative integer, got -1"),
])
def test_attribute_types_are_strict(csa, tmp_path, attr, value, problem):
    path = write_model(tmp_path, "attr.onnx", INTERLEAVED, edit=edit_layer(1, lambda s: s.attrs.__setitem__(attr, value)))
    line = one_line_error(check(csa, path))
    assert f"node 'layers.1.attn.csa' {problem}" in line


def test_required_attributes(csa, tmp_path):
    """compression_ratio has no fallback; num_heads falls back to the query shape (test_onnx_check.py)."""
    path = write_model(tmp_path, "req.onnx", INTERLEAVED,
                       edit=edit_layer(0, lambda s: s.attrs.pop("compression_ratio")))
    assert "attribute compression_ratio: missing (required by the v1 schema)" in one_line_error(check(csa, path))


@pytest.mark.parametrize("metadata, problem", [
    ({"max_seq_len": "lots"}, "metadata_props.max_seq_len: expected a non-negative integer, got 'lots'"),
    ({"max_seq_len": "-5"}, "metadata_props.max_seq_len: expected a non-negative integer, got '-5'"),
    ({"max_seq_len": "9" * 30}, "metadata_props.max_seq_len: " + "9" * 30 + " is too large"),
    ({"max_seq_len": "4096", "max_sequence_length": "8192"},
     "metadata_props.max_seq_len: conflicting values: max_seq_len = 4096, max_sequence_length = 8192"),
])
def test_metadata_values_are_strict(csa, tmp_path, metadata, problem):
    path = write_model(tmp_path, "meta.onnx", INTERLEAVED, metadata=metadata)
    assert problem in one_line_error(check(csa, path))


def test_conflicting_node_capacity_attributes(csa, tmp_path):
    path = write_model(tmp_path, "c.onnx", INTERLEAVED,
                       edit=edit_layer(0, lambda s: s.attrs.update(max_seq_len=4096, max_sequence_length=2048)))
    assert "attribute max_seq_len: conflicting values: max_seq_len = 4096, max_sequence_length = 2048" in \
        one_line_error(check(csa, path))


def test_max_seq_len_above_the_limit_is_a_refusal_not_bad_input(csa, tmp_path):
    r = check(csa, write_model(tmp_path, "big.onnx", INTERLEAVED, metadata={"max_seq_len": str((1 << 20) + 1)}))
    assert r.code == 3
    assert {x["type"] for x in r.json()["refusals"]} == {"InvalidHeadGeometry"}


def test_mutated_graphs_never_raise_anything_but_bad_input(tmp_path):
    """Byte flips, insertions and deletions of a valid graph: a ModelSpec or BadInput, nothing else."""
    data = bytearray(build_model(INTERLEAVED).SerializeToString())
    rng = random.Random(2024)
    path = tmp_path / "m.onnx"
    outcomes = {"spec": 0, "bad": 0}
    for _ in range(400):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(mutated))
            op = rng.random()
            if op < 0.6:
                mutated[at] = rng.randrange(256)
            elif op < 0.8:
                del mutated[at:at + rng.randint(1, 16)]
            else:
                mutated[at:at] = rng.randbytes(rng.randint(1, 8))
        path.write_bytes(bytes(mutated))
        try:
            load_onnx_model(path, max_seq_len=None, window=None, at_length=8)
            outcomes["spec"] += 1
        except BadInput:
            outcomes["bad"] += 1
    assert outcomes["spec"] > 0 and outcomes["bad"] > 0  # both paths were exercised


def test_wire_reader_agrees_with_onnx(tmp_path):
    import onnx

    path = write_model(tmp_path, "x.onnx", INTERLEAVED, "shared", layer_id_attr=True)
    ours = read_structure(path.read_bytes())
    theirs = onnx.load(str(path), load_external_data=False)
    assert ours.ir_version == theirs.ir_version
    assert ours.opsets == {o.domain: o.version for o in theirs.opset_import}
    assert ours.metadata == {p.key: p.value for p in theirs.metadata_props}
    assert ours.node_count == len(theirs.graph.node)
    for node, ref in zip(ours.csa_nodes, theirs.graph.node):
        assert (node.name, node.inputs, node.outputs) == (ref.name, tuple(ref.input), tuple(ref.output))
        expected = {a.name: helper.get_attribute_value(a) for a in ref.attribute}
        got = {k: v.value for k, v in node.attributes.items()}
        assert got == {k: (v.decode() if isinstance(v, bytes) else v) for k, v in expected.items()}
    values = {v.name: v for v in [*theirs.graph.input, *theirs.graph.output]}
    for name, shape in ours.shapes.items():
        dims = values[name].type.tensor_type.shape.dim
        assert shape == tuple(d.dim_param if d.HasField("dim_param") else d.dim_value for d in dims)


def test_reading_a_graph_does_not_import_onnx(tmp_path):
    path = write_model(tmp_path, "x.onnx", INTERLEAVED)
    code = ("import sys; from csa_plan.planner.loaders.model_files import load_model; "
            f"m = load_model({str(path)!r}); "
            "assert len(m.layers) == 4; assert 'onnx' not in sys.modules, 'onnx imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_fifo_is_refused_without_blocking(csa, tmp_path):
    import os

    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    assert one_line_error(check(csa, fifo)).endswith("pipe.onnx: a FIFO (named pipe), not a regular file")
