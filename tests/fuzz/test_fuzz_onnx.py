"""Property-based fuzzing of the ONNX surface: mutated, truncated and absurd graphs.

Every file either plans or is BadInput; nothing else escapes, and no path other than
the model file itself is ever opened (external-data locations are never followed).
"""

from __future__ import annotations

import builtins
import os
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from csa_plan.planner.errors import BadInput
from csa_plan.planner.onnx.graph import load_onnx_model
from csa_plan.planner.plan import PlanOptions, plan_model

from helpers.onnx_graphs import INTERLEAVED, build_model, edit_layer

from helpers import FUZZ

BASE = build_model(INTERLEAVED, "per_layer").SerializeToString()
WORK = Path(tempfile.mkdtemp(prefix="csa-onnx-fuzz-"))


def plans_or_bad_input(data: bytes, name: str = "g.onnx", **kw) -> None:
    path = WORK / name
    path.write_bytes(data)
    opened: list[str] = []
    real_open, real_os_open = builtins.open, os.open

    def spy_open(file, *a, **k):
        opened.append(os.fspath(file) if not isinstance(file, int) else str(file))
        return real_open(file, *a, **k)

    def spy_os_open(file, *a, **k):
        opened.append(os.fspath(file))
        return real_os_open(file, *a, **k)

    builtins.open, os.open = spy_open, spy_os_open
    try:
        spec = load_onnx_model(path, max_seq_len=kw.get("max_seq_len"), window=None, at_length=8)
        plan_model(spec, PlanOptions())
    except BadInput as exc:
        assert str(exc)
    finally:
        builtins.open, os.open = real_open, real_os_open
    assert {Path(p).name for p in opened if not str(p).isdigit()} <= {name}, opened


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(BASE) - 1), st.integers(0, 255)), max_size=8),
       st.integers(0, len(BASE)), st.binary(max_size=16), st.integers(0, len(BASE)))
def test_mutated_graph_bytes(edits, cut, insert, at):
    data = bytearray(BASE)
    for pos, value in edits:
        data[pos] = value
    data = bytes(data[:at]) + insert + bytes(data[at:])
    plans_or_bad_input(data[:cut] if cut < len(data) // 2 else data)


@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes(data):
    plans_or_bad_input(data)


absurd = st.one_of(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.sampled_from([0, -1, 2**62, 2**63 - 1]))
text = st.sampled_from(["fp8_e4m3_block64", "f32", "", "x" * 300, "logit_only", "\x00", "ü"])
ATTRS = ["compression_ratio", "num_heads", "head_dim", "qk_rope_head_dim", "index_num_heads", "index_head_dim",
         "index_topk", "cache_layout_version", "index_layout_version", "max_seq_len", "sliding_window", "layer_id"]


@FUZZ
@given(st.integers(0, len(INTERLEAVED) - 1), st.dictionaries(st.sampled_from(ATTRS), absurd, max_size=3),
       st.dictionaries(st.sampled_from(["cache_format", "sink_mode"]), text, max_size=2),
       st.lists(st.one_of(absurd, st.text(max_size=6)), max_size=4),
       st.sampled_from(["weights.bin", "../../../etc/passwd", "/dev/zero", "/proc/self/mem", "C:\\x.bin", ""]),
       st.dictionaries(st.sampled_from(["max_seq_len", "sliding_window", "max_sequence_length"]),
                       st.sampled_from(["65536", "-1", "1e9", "99999999999999999999999", "", "x"]), max_size=2))
def test_absurd_structure(layer, ints, strings, dims, location, metadata):
    def change(spec):
        spec.attrs.update(ints)
        spec.attrs.update(strings)
        name = spec.inputs[6]
        if name:
            spec.shapes[name] = list(dims)

    model = build_model(INTERLEAVED, "per_layer", edit=edit_layer(layer, change), metadata=metadata,
                        external_bytes_per_layer=1 << 40)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    plans_or_bad_input(model.SerializeToString())
