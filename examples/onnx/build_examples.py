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


EXAMPLES: dict[str, Callable[[], object]] = {
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
