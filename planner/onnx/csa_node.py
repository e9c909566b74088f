"""One ``pkg.nxrt::CompressedSparseAttention`` v1 node read into descriptor fields and node-level findings.

Attribute types are strict: an integer attribute stored as a float or string, a
negative value or one of 2^63 or more is bad input naming the node and attribute.
Well-formed values the op cannot run are typed refusals: ArityMismatch (inputs or
outputs do not match the ratio), UnsupportedOpVersion (a layout version other than
1, a sink_mode other than logit_only, or a pkg.nxrt opset other than 1) and, since
the gate never sees ratio 0 as a CSA/HCA layer, UnsupportedRatio for a ratio-0 node.
"""

from __future__ import annotations

from dataclasses import dataclass

from csa_plan.planner.descriptor import CacheFormat, RecordFormat, STATE_EDGE_INPUT_INDEX, StateEdge
from csa_plan.planner.errors import BadInput
from csa_plan.planner.onnx.structure import CSA_DOMAIN, AttrValue, CsaNode
from csa_plan.planner.refusals import Clause, RefusalType
from csa_plan.planner.limits import MAX_INT_DIGITS, MAX_NAME_CHARS
from csa_plan.planner.text import bounded, excerpt
from csa_plan.planner.values import read_int

MAX_INPUTS = 20
NON_STATE_REQUIRED = {
    128: (0, 1, 2, 3, 4, 5, 8, 9, 10),
    4: (0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13, 14, 15, 16),
}
RATIO4_ONLY_INPUTS = range(11, 19)
OUTPUT_COUNTS = {128: (3,), 4: (5, 6)}
INPUT_NAMES = (
    "query", "current_kv", "compressor_kv", "compressor_gate", "compressor_ape", "compressor_norm",
    "past_compressed_kv", "past_compression_carry", "seqlens_k", "total_sequence_length", "head_sink",
    "index_query", "index_weight", "index_compressor_kv", "index_compressor_gate", "index_compressor_ape",
    "index_compressor_norm", "past_index_key", "past_index_carry", "attention_bias",
)
OUTPUT_NAMES = ("Y", "present_compressed_kv", "present_compression_carry", "present_index_key",
                "present_index_carry", "selected_indices")
SUPPORTED_LAYOUT_VERSION = 1
SUPPORTED_SINK_MODE = "logit_only"
SUPPORTED_OPSET_VERSION = 1
MAX_SEQ_LEN_KEYS = ("max_seq_len", "max_sequence_length")
WINDOW_KEYS = ("sliding_window", "window_size")


@dataclass(frozen=True)
class NodeReading:
    node: CsaNode
    ratio: int
    fields: dict[str, object]  # descriptor fields read from attributes (no layer_id / capacity / batch)
    present_edges: frozenset[StateEdge]
    clauses: dict[RefusalType, list[Clause]]
    attr_layer_id: int | None
    name_layer_id: int | None  # the integer the state input names agree on, if any
    max_seq_len: tuple[int, str] | None  # (value, attribute name) when the node declares it
    window: tuple[int, str] | None
    batch: int | None  # axis 0 of input 6 when the graph fixes it
    kv_source: int | None = None  # shared compressed state: the layer whose cache input 6 is (itself for an owner)
    index_source: int | None = None  # shared compressed state: the layer whose indexer's top-k this node uses

    def input(self, index: int) -> str:
        return self.node.inputs[index] if index < len(self.node.inputs) else ""

    def output(self, index: int) -> str:
        return self.node.outputs[index] if index < len(self.node.outputs) else ""


def where(node: CsaNode) -> str:
    return f"node {excerpt(node.name, 80)}"


def int_attr(source: str, node: CsaNode, name: str, default: int | None) -> int | None:
    value = node.attributes.get(name)
    if value is None:
        return default
    if value.kind != "int":
        raise BadInput(source, f"{where(node)} attribute {name}", f"expected an integer attribute, got {_kind(value)}")
    return read_int(source, f"{where(node)} attribute {name}", value.value)


def str_attr(source: str, node: CsaNode, name: str, default: str) -> str:
    value = node.attributes.get(name)
    if value is None:
        return default
    if value.kind != "string":
        raise BadInput(source, f"{where(node)} attribute {name}", f"expected a string attribute, got {_kind(value)}")
    if len(value.value) > MAX_NAME_CHARS:
        raise BadInput(source, f"{where(node)} attribute {name}", f"{excerpt(value.value)} is longer than "
                                                                  f"{MAX_NAME_CHARS} characters (MAX_NAME_CHARS)")
    return str(value.value)


def _kind(value: AttrValue) -> str:
    return f"{value.kind} {excerpt(value.value)}" if value.value is not None else value.kind


def _one_of(source: str, node: CsaNode, keys: tuple[str, ...]) -> tuple[int, str] | None:
    found = [(v, k) for k in keys if (v := int_attr(source, node, k, None)) is not None]
    if len({v for v, _ in found}) > 1:
        shown = ", ".join(f"{k} = {v}" for v, k in found)
        raise BadInput(source, f"{where(node)} attribute {keys[0]}", f"conflicting values: {shown}")
    return found[0] if found else None


class LongLayerNumber(Exception):
    """A state input name whose layer number has more than MAX_INT_DIGITS digits."""

    def __init__(self, name: str, digits: int) -> None:
        super().__init__(name)
        self.name, self.digits = name, digits


def layer_from_names(names: list[str]) -> int | None:
    """The integer every state input name carries as a dotted component (``past_key_values.N.…``)."""
    found = set()
    for name in names:
        digits = next((part for part in name.split(".") if part.isascii() and part.isdigit()), None)
        if digits is None:
            return None
        digits = digits.lstrip("0") or "0"
        if len(digits) > MAX_INT_DIGITS:  # never converted
            raise LongLayerNumber(name, len(digits))
        found.add(int(digits))
    return found.pop() if len(found) == 1 else None


def read_csa_node(source: str, node: CsaNode, opsets: dict[str, int],
                  shapes: dict[str, tuple[object, ...] | None]) -> NodeReading:
    ratio = int_attr(source, node, "compression_ratio", None)
    if ratio is None:
        raise BadInput(source, f"{where(node)} attribute compression_ratio", "missing (required by the v1 schema)")
    def dim(index: int, axis: int) -> int | None:
        """A static dim of input ``index`` ([B, S, heads, width] for query and index_query)."""
        name = node.inputs[index] if index < len(node.inputs) else ""
        shape = shapes.get(name) if name else None
        value = shape[axis] if shape and len(shape) > axis else None
        return value if isinstance(value, int) and value > 0 else None

    # Attributes first; where the exporter left one out, the static query shapes say it.
    num_heads = int_attr(source, node, "num_heads", dim(0, 2))
    if num_heads is None:
        raise BadInput(source, f"{where(node)} attribute num_heads",
                       "missing (required by the v1 schema; the query input's shape does not fix it either)")
    fields: dict[str, object] = {
        "compression_ratio": ratio,
        "num_heads": num_heads,
        "head_dim": int_attr(source, node, "head_dim", dim(0, 3) or 512),
        "qk_rope_head_dim": int_attr(source, node, "qk_rope_head_dim", 64),
        "index_num_heads": int_attr(source, node, "index_num_heads", (dim(11, 2) or 0) if ratio == 4 else 0),
        "index_head_dim": int_attr(source, node, "index_head_dim", (dim(11, 3) or 0) if ratio == 4 else 0),
        "index_topk": int_attr(source, node, "index_topk", 0),
        "cache_format": str_attr(source, node, "cache_format", CacheFormat.FP8_E4M3_BLOCK64.value),
    }
    kv_source = int_attr(source, node, "kv_source_layer_id", None)
    if kv_source is not None:  # csa-plan's shared-state extension of the v1 node (docs/onnx.md): its own formats
        fields["cache_format"] = str_attr(source, node, "cache_format", RecordFormat.NVFP4.value)
    present = frozenset(e for e, i in STATE_EDGE_INPUT_INDEX.items() if i < len(node.inputs) and node.inputs[i])
    clauses: dict[RefusalType, list[Clause]] = {}

    def add(t: RefusalType, field: str, expected: object, actual: object, text: str) -> None:
        clauses.setdefault(t, []).append(Clause(field, str(expected), str(actual), text))

    _arity(node, ratio, add)
    _versions(source, node, opsets, add)
    if ratio == 0:
        add(RefusalType.UNSUPPORTED_RATIO, "compression_ratio", "4 or 128", 0,
            "a CompressedSparseAttention node with compression_ratio 0 is not a CSA/HCA layer")
    state_names = [node.inputs[i] for e, i in STATE_EDGE_INPUT_INDEX.items() if e in present]
    past_kv = node.inputs[6] if StateEdge.COMPRESSED in present else ""
    shape = shapes.get(past_kv) if past_kv else None
    batch = shape[0] if shape and isinstance(shape[0], int) and shape[0] > 0 else None
    try:
        name_layer_id = layer_from_names(state_names) if state_names else None
    except LongLayerNumber as exc:
        raise BadInput(source, f"{where(node)} input {excerpt(exc.name)}",
                       f"a layer number of {exc.digits:,} digits (limit MAX_INT_DIGITS = {MAX_INT_DIGITS})") from None
    return NodeReading(
        node=node, ratio=ratio, fields=fields, present_edges=present, clauses=clauses,
        attr_layer_id=int_attr(source, node, "layer_id", None),
        name_layer_id=name_layer_id,
        max_seq_len=_one_of(source, node, MAX_SEQ_LEN_KEYS),
        window=_one_of(source, node, WINDOW_KEYS),
        batch=batch,
        kv_source=kv_source,
        index_source=int_attr(source, node, "index_source_layer_id", None),
    )


def _arity(node: CsaNode, ratio: int, add) -> None:
    if ratio not in OUTPUT_COUNTS:
        return  # no arity is defined for an unknown ratio; the gate refuses the ratio itself
    t = RefusalType.ARITY_MISMATCH
    n_in, n_out = len(node.inputs), len(node.outputs)
    if n_in > MAX_INPUTS:
        add(t, "inputs", f"at most {MAX_INPUTS}", n_in, f"{n_in} inputs, the v1 schema has at most {MAX_INPUTS}")
    missing = [i for i in NON_STATE_REQUIRED[ratio] if i >= n_in or not node.inputs[i]]
    if missing:
        names = ", ".join(f"{i} {INPUT_NAMES[i]}" for i in missing)
        add(t, "inputs", f"required inputs {_ranges(NON_STATE_REQUIRED[ratio])} present", f"missing {names}",
            f"ratio {ratio} requires inputs {names}")
    if ratio == 128:
        extra = [i for i in RATIO4_ONLY_INPUTS if i < n_in and node.inputs[i]]
        if extra:
            names = ", ".join(f"{i} {INPUT_NAMES[i]}" for i in extra)
            add(t, "inputs", "inputs 11..18 empty (indexer is ratio 4 only)", f"present {names}",
                f"ratio 128 has no indexer, but the node wires inputs {names}")
    counts = OUTPUT_COUNTS[ratio]
    if n_out not in counts:
        expected = " or ".join(str(c) for c in counts)
        add(t, "outputs", expected, n_out, f"ratio {ratio} has {expected} outputs, the node has {n_out}")
    else:
        empty = [i for i in range(min(counts)) if not node.outputs[i]]
        if empty:
            names = ", ".join(f"{i} {OUTPUT_NAMES[i]}" for i in empty)
            add(t, "outputs", "named", f"empty {names}", f"required outputs {names} have empty names")


def _versions(source: str, node: CsaNode, opsets: dict[str, int], add) -> None:
    t = RefusalType.UNSUPPORTED_OP_VERSION
    for key in ("cache_layout_version", "index_layout_version"):
        version = int_attr(source, node, key, SUPPORTED_LAYOUT_VERSION)
        if version != SUPPORTED_LAYOUT_VERSION:
            add(t, key, SUPPORTED_LAYOUT_VERSION, version, f"{key} {version} is unknown (only 1)")
    sink = str_attr(source, node, "sink_mode", SUPPORTED_SINK_MODE)
    if sink != SUPPORTED_SINK_MODE:
        add(t, "sink_mode", SUPPORTED_SINK_MODE, bounded(sink), f"sink_mode {excerpt(sink)} is unknown (only 'logit_only')")
    opset = opsets.get(CSA_DOMAIN)
    if opset is not None and opset != SUPPORTED_OPSET_VERSION:
        add(t, f"opset_import[{CSA_DOMAIN}]", SUPPORTED_OPSET_VERSION, opset,
            f"the graph imports {CSA_DOMAIN} opset {opset}; only the v1 schema is known")


def _ranges(indices: tuple[int, ...]) -> str:
    parts, start, prev = [], None, None
    for i in indices:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            parts.append(f"{start}..{prev}" if prev != start else str(start))
            start = prev = i
    if start is not None:
        parts.append(f"{start}..{prev}" if prev != start else str(start))
    return ", ".join(parts)


# Shared compressed state (csa-plan's extension, docs/onnx.md): what each role wires.
SHARED_OWNER_INPUTS = (0, 1, 2, 4, 5, 6, 8, 9, 10, 17)  # + 3 (gate) and 7 (carry) on ratio 2
SHARED_READER_INPUTS = (0, 1, 6, 8, 9, 10)  # input 6 (and 17, when wired) are the source's tensors
SHARED_INDEX_INPUTS = (11, 12)  # an index source's queries and weights
SHARED_OWNER_OUTPUTS = (0, 1, 3)  # + 2 (carry) on ratio 2


def shared_arity(reading: NodeReading, owner: bool, index_source: bool) -> list[Clause]:
    """ArityMismatch clauses of a ratio-1/2 node that declares ``kv_source_layer_id``: an owner wires its
    compressor, cache, index keys (and on ratio 2 the gate and carry) and writes them; a reader wires only
    its query, its own KV row and its source's cache; an index source also its index queries and weights.
    A reader's cache outputs are ReaderOwnRecordAxis (the record-axis lint), not counted here."""
    ratio = reading.ratio
    need = list(SHARED_OWNER_INPUTS if owner else SHARED_READER_INPUTS)
    if owner and ratio == 2:
        need += [3, 7]
    if index_source:
        need += list(SHARED_INDEX_INPUTS)
    out: list[Clause] = []
    missing = sorted(i for i in need if not reading.input(i))
    if missing:
        names = ", ".join(f"{i} {INPUT_NAMES[i]}" for i in missing)
        role = "kv source" if owner else "reader"
        out.append(Clause("inputs", f"required inputs {_ranges(tuple(sorted(need)))} present", f"missing {names}",
                          f"a ratio-{ratio} {role} requires inputs {names}"))
    if len(reading.node.inputs) > MAX_INPUTS:
        out.append(Clause("inputs", f"at most {MAX_INPUTS}", str(len(reading.node.inputs)),
                          f"{len(reading.node.inputs)} inputs, the schema has at most {MAX_INPUTS}"))
    if owner:
        outs = list(SHARED_OWNER_OUTPUTS) + ([2] if ratio == 2 else [])
        empty = sorted(i for i in outs if not reading.output(i))
        if empty:
            names = ", ".join(f"{i} {OUTPUT_NAMES[i]}" for i in empty)
            out.append(Clause("outputs", "named", f"empty {names}", f"a kv source writes outputs {names}"))
    elif not reading.output(0):
        out.append(Clause("outputs", "named", "empty 0 Y", "required output 0 Y has an empty name"))
    return out
