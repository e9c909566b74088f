"""Build small but structurally faithful ``pkg.nxrt::CompressedSparseAttention`` graphs.

Each CSA node has the v1 schema's inputs and outputs (CONTRACT §4) with DeepSeek-V4
geometry; graph inputs/outputs carry the state tensors' shapes, so the record axis
(axis 1 of the compressed caches) is a symbol exactly as an exporter writes it:

- ``shared``: the old exporter — one ``past_compressed_records`` /
  ``present_compressed_records`` / ``selected_records`` symbol on every layer;
- ``per_layer``: the fixed exporter — ``past_compressed_records.{layer_id}``,
  ``present_compressed_records.{layer_id}``, ``selected_records.{layer_id}``.

Weights are external initializers whose data file is never written: csa-plan reads
structure only. The graphs are shipped beside this script (examples/onnx/*.onnx), so checking
them needs no onnx package; ``python examples/onnx/build_examples.py [OUT_DIR]`` (with the
``[onnx]`` extra) writes them again (default: examples/onnx/, where
tests/onnx/test_shipped_examples.py requires the same bytes); tests import ``build_model`` from here.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

try:
    from onnx import TensorProto, helper
except ImportError:
    if __name__ == "__main__":
        sys.exit("build_examples.py: writing graphs needs the onnx package: pip install -e '.[onnx]' "
                 "(the shipped examples/onnx/*.onnx are checked without it)")
    raise

DOMAIN = "pkg.nxrt"
OP = "CompressedSparseAttention"
INTERLEAVED = (4, 128, 4, 128)
V4_PRO_MAIN = (128, 128) + (4, 128) * 29 + (4,)  # config.json compress_ratios without the MTP entry

HEAD_DIM, ROPE, INDEX_HEAD_DIM = 512, 64, 128


@dataclass
class NodeSpec:
    """One CSA node before it becomes a proto; tests edit these to break a graph on purpose."""

    layer_id: int
    ratio: int
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, object]
    shapes: dict[str, list[object]] = field(default_factory=dict)  # graph input/output name -> dims


def record_symbols(layer_id: int, style: str) -> tuple[str, str, str]:
    if style == "shared":
        return "past_compressed_records", "present_compressed_records", "selected_records"
    if style == "per_layer":
        return (f"past_compressed_records.{layer_id}", f"present_compressed_records.{layer_id}",
                f"selected_records.{layer_id}")
    raise ValueError(f"unknown symbol style {style!r}")


def node_spec(layer_id: int, ratio: int, style: str, *, num_heads: int = 64, index_topk: int = 512,
              layer_id_attr: bool = False) -> NodeSpec:
    i = layer_id
    past, present, selected = record_symbols(i, style)
    cw = 1024 if ratio == 4 else 512
    carry = [8, 2, 1024] if ratio == 4 else [128, 2, 512]
    p = f"layers.{i}."  # per-layer activations and weights
    kv = f"past_key_values.{i}."
    inputs = [p + "query", p + "current_kv", p + "compressor_kv", p + "compressor_gate", p + "compressor_ape",
              p + "compressor_norm", kv + "compressed_kv", kv + "compression_carry", "seqlens_k",
              "total_sequence_length", p + "head_sink"]
    outputs = [p + "attn_out", f"present.{i}.compressed_kv", f"present.{i}.compression_carry"]
    shapes: dict[str, list[object]] = {
        p + "query": ["batch", "sequence_length", num_heads, HEAD_DIM],
        p + "current_kv": ["batch", "sequence_length", HEAD_DIM],
        p + "compressor_kv": ["batch", "sequence_length", cw],
        p + "compressor_gate": ["batch", "sequence_length", cw],
        kv + "compressed_kv": ["batch", past, 583],
        kv + "compression_carry": ["batch", *carry],
        "seqlens_k": ["batch"],
        "total_sequence_length": [],
        p + "attn_out": ["batch", "sequence_length", num_heads, HEAD_DIM],
        f"present.{i}.compressed_kv": ["batch", present, 583],
        f"present.{i}.compression_carry": ["batch", *carry],
    }
    attrs: dict[str, object] = {
        "compression_ratio": ratio, "num_heads": num_heads, "head_dim": HEAD_DIM, "qk_rope_head_dim": ROPE,
        "index_num_heads": 64 if ratio == 4 else 0, "index_head_dim": INDEX_HEAD_DIM if ratio == 4 else 0,
        "index_topk": index_topk if ratio == 4 else 0, "cache_format": "fp8_e4m3_block64", "scale": 0.0,
        "causal": 1, "sink_mode": "logit_only", "cache_layout_version": 1, "index_layout_version": 1,
    }
    if layer_id_attr:
        attrs["layer_id"] = layer_id
    if ratio == 4:
        inputs += [p + "index_query", p + "index_weight", p + "index_compressor_kv", p + "index_compressor_gate",
                   p + "index_compressor_ape", p + "index_compressor_norm", kv + "index_key", kv + "index_carry"]
        outputs += [f"present.{i}.index_key", f"present.{i}.index_carry", f"layers.{i}.selected_indices"]
        shapes.update({
            p + "index_query": ["batch", "sequence_length", 64, INDEX_HEAD_DIM],
            p + "index_weight": ["batch", "sequence_length", 64],
            p + "index_compressor_kv": ["batch", "sequence_length", 256],
            p + "index_compressor_gate": ["batch", "sequence_length", 256],
            kv + "index_key": ["batch", past, 68],
            kv + "index_carry": ["batch", 8, 2, 256],
            f"present.{i}.index_key": ["batch", present, 68],
            f"present.{i}.index_carry": ["batch", 8, 2, 256],
            f"layers.{i}.selected_indices": ["batch", "sequence_length", selected],
        })
    return NodeSpec(layer_id, ratio, inputs, outputs, attrs, shapes)


WEIGHT_SHAPES = {"compressor_ape": lambda r: [r, 1024 if r == 4 else 512], "compressor_norm": lambda r: [HEAD_DIM],
                 "head_sink": lambda r: [0], "index_compressor_ape": lambda r: [4, 256],
                 "index_compressor_norm": lambda r: [INDEX_HEAD_DIM]}


def build_model(ratios: tuple[int, ...] = INTERLEAVED, style: str = "per_layer", *,
                metadata: dict[str, str] | None = None, edit: Callable[[NodeSpec], None] | None = None,
                num_heads: int = 64, index_topk: int = 512, layer_id_attr: bool = False,
                external_bytes_per_layer: int = 0, opset_version: int = 1):
    """An interleaved CSA/HCA graph; ``edit`` may change each NodeSpec before it is built."""
    metadata = {"max_seq_len": "65536"} if metadata is None else metadata
    nodes, inputs, outputs, inits = [], [], [], []
    declared: set[str] = set()
    offset = 0
    for layer_id, ratio in enumerate(ratios):
        spec = node_spec(layer_id, ratio, style, num_heads=num_heads, index_topk=index_topk,
                         layer_id_attr=layer_id_attr)
        if edit is not None:
            edit(spec)
        for name in spec.inputs:
            if not name or name in declared:
                continue
            declared.add(name)
            short = name.rsplit(".", 1)[-1]
            if short in WEIGHT_SHAPES:
                dims = WEIGHT_SHAPES[short](ratio)
                if short == "head_sink":
                    dims = [spec.attrs.get("num_heads", num_heads)]
                inits.append(_external(name, dims, offset, external_bytes_per_layer))
                offset += external_bytes_per_layer
            else:
                elem = TensorProto.UINT8 if name.endswith(("compressed_kv", "index_key")) else TensorProto.FLOAT
                if name in ("seqlens_k",):
                    elem = TensorProto.INT32
                if name == "total_sequence_length":
                    elem = TensorProto.INT64
                inputs.append(helper.make_tensor_value_info(name, elem, spec.shapes.get(name)))
        for name in spec.outputs:
            if name:
                elem = TensorProto.UINT8 if name.endswith(("compressed_kv", "index_key")) else TensorProto.FLOAT
                if name.endswith("selected_indices"):
                    elem = TensorProto.INT32
                outputs.append(helper.make_tensor_value_info(name, elem, spec.shapes.get(name)))
        nodes.append(helper.make_node(OP, spec.inputs, spec.outputs, name=f"layers.{layer_id}.attn.csa",
                                      domain=DOMAIN, **spec.attrs))
    graph = helper.make_graph(nodes, "csa_interleaved", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(DOMAIN, opset_version)],
                              producer_name="csa-plan examples")
    helper.set_model_props(model, metadata)
    return model


def _external(name: str, dims: list[int], offset: int, length: int) -> TensorProto:
    """A weight whose bytes live in weights.bin — a file these examples never write."""
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "weights.bin"), ("offset", str(offset)), ("length", str(length or 4))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


def write(model, path: Path) -> Path:
    """Serialize without onnx.save, which would look at external data."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.SerializeToString())
    return path


# --- shared compressed state (DeepSeek-V4.1-style; docs/onnx.md) -------------------------------------------

SHARED_RATIOS = (2, 2, 1, 1, 1, 1)  # kv sources 0 (ratio 2) and 2 (ratio 1); index sources 0, 2, 4
SHARED_KV = {0: 0, 1: 0, 2: 2, 3: 2, 4: 2, 5: 2}
SHARED_INDEX = {0: 0, 1: 0, 2: 2, 3: 2, 4: 4, 5: 4}
NVFP4_RECORD, MXFP4_KEY = 288, 68


def shared_model(twin: bool = False):
    """A small V4.1-style graph: one compressed-record tensor per kv source, readers taking the source's
    tensors as input edges. The ``twin`` breaks the per-source rule twice: reader 3 declares a record
    tensor of its own (ReaderOwnRecordAxis), and source 2 (ratio 1) reuses source 0's (ratio 2) symbol
    (SharedRecordAxis)."""
    nodes, inputs, outputs, inits, declared = [], [], [], [], set()

    def graph_input(name: str, elem: int, dims: list[object]) -> None:
        if name and name not in declared:
            declared.add(name)
            inputs.append(helper.make_tensor_value_info(name, elem, dims))

    for i, ratio in enumerate(SHARED_RATIOS):
        src, idx = SHARED_KV[i], SHARED_INDEX[i]
        owner, index_source = src == i, idx == i
        p, kv = f"layers.{i}.", f"past_key_values.{src}."
        symbol = f"past_compressed_records.{0 if twin and i == 2 else src}"
        if twin and i == 3:  # a reader with a record tensor (and axis) of its own
            kv, symbol = f"past_key_values.{i}.", f"past_compressed_records.{i}"
        graph_input(p + "query", TensorProto.FLOAT, ["batch", "sequence_length", 64, HEAD_DIM])
        graph_input(p + "current_kv", TensorProto.FLOAT, ["batch", "sequence_length", HEAD_DIM])
        graph_input("seqlens_k", TensorProto.INT32, ["batch"])
        graph_input("total_sequence_length", TensorProto.INT64, [])
        graph_input(kv + "compressed_kv", TensorProto.UINT8, ["batch", symbol, NVFP4_RECORD])
        graph_input(kv + "index_key", TensorProto.UINT8, ["batch", symbol, MXFP4_KEY])
        ins = [p + "query", p + "current_kv", "", "", "", "", kv + "compressed_kv", "", "seqlens_k",
               "total_sequence_length", p + "head_sink"] + [""] * 8
        inits.append(_external(p + "head_sink", [64], 0, 0))
        outs = [p + "attn_out"]
        if owner:
            ins[2] = p + "compressor_kv"
            graph_input(ins[2], TensorProto.FLOAT, ["batch", "sequence_length", HEAD_DIM])
            if ratio == 2:  # ratio 1 compresses nothing: no gate, no carry
                ins[3], ins[7] = p + "compressor_gate", kv + "compression_carry"
                graph_input(ins[3], TensorProto.FLOAT, ["batch", "sequence_length", HEAD_DIM])
                graph_input(ins[7], TensorProto.FLOAT, ["batch", ratio, 2, HEAD_DIM])
            for name, dims in ((p + "compressor_ape", [ratio, HEAD_DIM]), (p + "compressor_norm", [HEAD_DIM])):
                inits.append(_external(name, dims, 0, 0))
            ins[4], ins[5] = p + "compressor_ape", p + "compressor_norm"
            present = f"present_compressed_records.{i}"
            outs += [f"present.{i}.compressed_kv", f"present.{i}.compression_carry" if ratio == 2 else "",
                     f"present.{i}.index_key"]
            outputs += [helper.make_tensor_value_info(f"present.{i}.compressed_kv", TensorProto.UINT8,
                                                      ["batch", present, NVFP4_RECORD]),
                        helper.make_tensor_value_info(f"present.{i}.index_key", TensorProto.UINT8,
                                                      ["batch", present, MXFP4_KEY])]
            if ratio == 2:
                outputs.append(helper.make_tensor_value_info(f"present.{i}.compression_carry", TensorProto.FLOAT,
                                                             ["batch", ratio, 2, HEAD_DIM]))
        ins[17] = kv + "index_key"
        if index_source:
            ins[11], ins[12] = p + "index_query", p + "index_weight"
            graph_input(ins[11], TensorProto.FLOAT, ["batch", "sequence_length", 32, INDEX_HEAD_DIM])
            graph_input(ins[12], TensorProto.FLOAT, ["batch", "sequence_length", 32])
        while ins and not ins[-1]:
            ins.pop()
        outputs.append(helper.make_tensor_value_info(p + "attn_out", TensorProto.FLOAT,
                                                     ["batch", "sequence_length", 64, HEAD_DIM]))
        attrs = {"compression_ratio": ratio, "num_heads": 64, "head_dim": HEAD_DIM, "qk_rope_head_dim": ROPE,
                 "index_num_heads": 32 if index_source else 0, "index_head_dim": INDEX_HEAD_DIM if index_source else 0,
                 "index_topk": 512, "cache_format": "nvfp4", "kv_source_layer_id": src,
                 "index_source_layer_id": idx, "layer_id": i, "scale": 0.0, "causal": 1, "sink_mode": "logit_only",
                 "cache_layout_version": 1, "index_layout_version": 1}
        nodes.append(helper.make_node(OP, ins, outs, name=f"layers.{i}.attn.csa", domain=DOMAIN, **attrs))
    graph = helper.make_graph(nodes, "csa_shared_sources", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)],
                              producer_name="csa-plan examples")
    helper.set_model_props(model, {"max_seq_len": "65536"})
    return model


EXAMPLES: dict[str, Callable[[], object]] = {
    "shared_sources.onnx": lambda: shared_model(),
    "shared_sources_reader_own_axis.onnx": lambda: shared_model(twin=True),
    "interleaved_shared_symbol.onnx": lambda: build_model(INTERLEAVED, "shared"),
    "interleaved_per_layer.onnx": lambda: build_model(INTERLEAVED, "per_layer"),
    "v4_pro_62_nodes.onnx": lambda: build_model(V4_PRO_MAIN + (4,), "per_layer", num_heads=128, index_topk=1024,
                                                metadata={"max_seq_len": "1048576"},
                                                external_bytes_per_layer=200 << 20),
}


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).parent
    for name, make in EXAMPLES.items():
        print(write(make(), out / name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
