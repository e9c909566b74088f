"""The part of an ONNX ModelProto that csa-plan needs, read straight from the wire format.

What is decoded: ir_version, opset imports, metadata_props, and in the main graph
every node's op_type/domain; the full inputs, outputs and attributes of
``pkg.nxrt::CompressedSparseAttention`` nodes; and the names and shapes of graph
inputs, outputs and value_info entries that those nodes' state edges name.

What is never decoded: initializers (embedded or external — their data locations
are not even looked at), sparse initializers, functions, training info, doc
strings and subgraphs. Skipping is offset arithmetic, so a model with gigabytes of
embedded weights costs no more to read than its node list.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterable, Union

from csa_plan.planner.errors import CsaPlanError
from csa_plan.planner.text import excerpt
from csa_plan.planner.limits import (MAX_LAYERS, MAX_NAME_CHARS, MAX_ONNX_DIMS, MAX_ONNX_GRAPH_FIELDS, MAX_ONNX_METADATA,
                                     MAX_ONNX_MODEL_FIELDS, MAX_ONNX_NODE_FIELDS, MAX_ONNX_NODES, MAX_ONNX_STRING_BYTES,
                                     MAX_ONNX_VALUES)
from csa_plan.planner.onnx.wire import (FIXED32, LENGTH, VARINT, Buffer, Field, LimitError, WireError, as_int64,
                                        iter_fields, text)

MAX_ONNX_DECODED_BYTES = 64 << 20
"""All strings decoded from one graph together (names, inputs, attributes): bounds memory."""

CSA_DOMAIN = "pkg.nxrt"
CSA_OP_TYPE = "CompressedSparseAttention"
_CSA_OP_BYTES = CSA_OP_TYPE.encode()
_CSA_DOMAIN_BYTES = CSA_DOMAIN.encode()

# Field numbers (onnx/onnx.proto3).
_MODEL_IR_VERSION, _MODEL_OPSET, _MODEL_GRAPH, _MODEL_METADATA = 1, 8, 7, 14
# ModelProto's fields and their wire types: ir_version, producer_name, producer_version, domain,
# model_version, doc_string, graph, opset_import, metadata_props, training_info, functions, configuration
_MODEL_WIRE_TYPES = {1: VARINT, 2: LENGTH, 3: LENGTH, 4: LENGTH, 5: VARINT, 6: LENGTH, 7: LENGTH, 8: LENGTH,
                     14: LENGTH, 20: LENGTH, 25: LENGTH, 26: LENGTH}
_GRAPH_NODE, _GRAPH_INPUT, _GRAPH_OUTPUT, _GRAPH_VALUE_INFO = 1, 11, 12, 13
_NODE_INPUT, _NODE_OUTPUT, _NODE_NAME, _NODE_OP_TYPE, _NODE_ATTRIBUTE, _NODE_DOMAIN = 1, 2, 3, 4, 5, 7
_ATTR_NAME, _ATTR_F, _ATTR_I, _ATTR_S, _ATTR_TYPE = 1, 2, 3, 4, 20
_ATTR_FLOAT, _ATTR_INT, _ATTR_STRING = 1, 2, 3
_VI_NAME, _VI_TYPE = 1, 2
_TYPE_TENSOR, _TYPE_SPARSE_TENSOR = 1, 8
_TENSOR_SHAPE = 2
_SHAPE_DIM = 1
_DIM_VALUE, _DIM_PARAM = 1, 2

Axis = Union[int, str, None]
"""One dimension: a fixed size, a symbol (dim_param), or None when the graph leaves it unknown."""


class StructureError(CsaPlanError):
    """The file is a protobuf but not a usable ONNX model, or not a protobuf at all."""

    def __init__(self, problem: str, *, not_onnx: bool = False, truncated: bool = False) -> None:
        self.problem = problem
        self.not_onnx = not_onnx
        self.truncated = truncated
        super().__init__(problem)


@dataclass(frozen=True)
class AttrValue:
    kind: str  # "int", "float", "string", or "type <n>" for kinds csa-plan does not read
    value: object


@dataclass(frozen=True)
class CsaNode:
    position: int  # index of the node in the main graph's node list
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: dict[str, AttrValue]


@dataclass(frozen=True)
class GraphStructure:
    ir_version: int
    opsets: dict[str, int]
    metadata: dict[str, str]
    node_count: int
    csa_nodes: tuple[CsaNode, ...]
    csa_in_other_domains: tuple[str, ...]  # domains of CompressedSparseAttention nodes not in pkg.nxrt
    shapes: dict[str, tuple[Axis, ...] | None] = field(default_factory=dict)
    # ``shapes`` holds every state-edge name the CSA nodes use that the graph declares
    # (as an input, output or value_info); None when declared without a tensor shape.


def read_structure(buf: Buffer) -> GraphStructure:
    """Decode what csa-plan needs from a serialized ModelProto held in ``buf``."""
    size = len(buf)
    recognised = False  # saw a field that looks like ONNX before any error
    ir_version: int | None = None
    opsets: dict[str, int] = {}
    metadata: dict[str, str | None] = {}
    graph_spans: list[tuple[int, int]] = []
    entries = 0
    fields = 0
    try:
        for f in iter_fields(buf, 0, size):
            fields += 1
            if fields > MAX_ONNX_MODEL_FIELDS:  # each costs a Python step: bounded before the graph is read
                raise LimitError(f"the model has more than {MAX_ONNX_MODEL_FIELDS:,} top-level fields "
                                 "(limit MAX_ONNX_MODEL_FIELDS)")
            if f.number in (_MODEL_OPSET, _MODEL_METADATA):
                entries += 1
                if entries > MAX_ONNX_METADATA:
                    raise LimitError(f"more than {MAX_ONNX_METADATA:,} opset_import and metadata_props entries "
                                     f"(limit MAX_ONNX_METADATA)")
            expected = _MODEL_WIRE_TYPES.get(f.number)
            if expected is not None and f.wire_type != expected:
                raise StructureError(f"not an ONNX model (field {f.number} at byte {f.start} has wire type "
                                     f"{f.wire_type}; ModelProto declares it as wire type {expected})",
                                     not_onnx=True)
            if f.number == _MODEL_IR_VERSION and f.wire_type == VARINT:
                ir_version = as_int64(f.value)
                recognised = True
            elif f.number == _MODEL_OPSET and f.wire_type == LENGTH:
                domain, version = _opset(buf, f)
                opsets[domain] = version
            elif f.number == _MODEL_GRAPH and f.wire_type == LENGTH:
                graph_spans.append((f.start, f.end))
            elif f.number == _MODEL_METADATA and f.wire_type == LENGTH:
                key, value = _string_pair(buf, f)
                if key in metadata:  # a second value would silently win (onnx.checker refuses it too)
                    raise StructureError(f"metadata_props: the key {excerpt(key)} is given twice")
                metadata[key] = value
        if ir_version is None or not graph_spans:
            missing = "ir_version" if ir_version is None else "graph"
            raise StructureError(f"not an ONNX model (no {missing} field)", not_onnx=True)
        return _read_graph(buf, graph_spans, ir_version, opsets, metadata)
    except WireError as exc:
        if recognised and exc.truncated:
            raise StructureError(f"truncated ONNX file ({exc})", truncated=True) from None
        if recognised:
            raise StructureError(f"corrupt ONNX file ({exc})") from None
        if exc.truncated:
            raise StructureError(f"not an ONNX model, or truncated (invalid protobuf {exc})", not_onnx=True) from None
        raise StructureError(f"not an ONNX model (invalid protobuf {exc})", not_onnx=True) from None


def _opset(buf: Buffer, f: Field) -> tuple[str, int]:
    domain, version = "", 0
    for g in iter_fields(buf, f.start, f.end):
        if g.number == 1:
            domain = text(buf, g, "opset_import.domain")
        elif g.number == 2 and g.wire_type == VARINT:
            version = as_int64(g.value)
    return domain, version


def _string_pair(buf: Buffer, f: Field) -> tuple[str, str | None]:
    """A metadata_props entry; a value longer than MAX_ONNX_STRING_BYTES is kept as None (unread):
    only the keys csa-plan uses are ever looked at, and those say so if they are too long."""
    key, value = "", ""
    for g in iter_fields(buf, f.start, f.end):
        if g.number == 1:
            key = text(buf, g, "metadata_props.key")
        elif g.number == 2:
            value = None if g.end - g.start > MAX_ONNX_STRING_BYTES else text(buf, g, "metadata_props.value")
    return key, value


def _read_graph(buf: Buffer, spans: list[tuple[int, int]], ir_version: int, opsets: dict[str, int],
                metadata: dict[str, str]) -> GraphStructure:
    csa_fields: list[tuple[int, Field]] = []
    other_domains: list[str] = []
    budget = [MAX_ONNX_DECODED_BYTES]
    position = 0
    values = 0
    fields = 0
    for start, end in spans:  # pass 1: the nodes
        for f in iter_fields(buf, start, end):
            fields += 1
            if fields > MAX_ONNX_GRAPH_FIELDS:  # initializers, empty fields ...: every field is a step
                raise LimitError(f"the graph has more than {MAX_ONNX_GRAPH_FIELDS:,} fields (nodes, values, "
                                 "initializers and the rest; limit MAX_ONNX_GRAPH_FIELDS)")
            if f.wire_type != LENGTH:
                continue
            if f.number == _GRAPH_NODE:
                if position >= MAX_ONNX_NODES:
                    raise LimitError(f"the graph has more than {MAX_ONNX_NODES:,} nodes (limit MAX_ONNX_NODES)")
                if _is_csa(buf, f, other_domains, position):  # counted first, decoded after: a flood is refused cheaply
                    if len(csa_fields) >= MAX_LAYERS:
                        raise LimitError(f"the graph has more than {MAX_LAYERS:,} CompressedSparseAttention nodes "
                                         "(limit MAX_LAYERS)")
                    csa_fields.append((position, f))
                position += 1
            elif f.number in (_GRAPH_INPUT, _GRAPH_OUTPUT, _GRAPH_VALUE_INFO):
                values += 1
                if values > MAX_ONNX_VALUES:
                    raise LimitError(f"the graph declares more than {MAX_ONNX_VALUES:,} inputs, outputs and "
                                     "value_info entries (limit MAX_ONNX_VALUES)")
            # initializers (5), sparse initializers (15) and everything else: skipped unread
    nodes = [_decode_csa(buf, f, at, budget) for at, f in csa_fields]
    wanted = {n.encode("utf-8") for node in nodes for n in (*node.inputs, *node.outputs) if n}
    lengths = {len(n) for n in wanted}
    declared: dict[str, Field] = {}  # value name -> its ValueInfoProto field; inputs win over outputs
    for start, end in spans:  # pass 2: only the declarations the CSA nodes name (others are not decoded)
        for f in iter_fields(buf, start, end):
            if f.wire_type == LENGTH and f.number in (_GRAPH_INPUT, _GRAPH_OUTPUT, _GRAPH_VALUE_INFO):
                name = _value_info_name(buf, f, wanted, lengths)
                if name is not None:
                    declared.setdefault(name, f)  # first declaration wins (inputs precede outputs in file order)
    shapes = {name: _value_info_shape(buf, declared[name]) for name in declared}
    return GraphStructure(ir_version=ir_version, opsets=opsets, metadata=metadata, node_count=position,
                          csa_nodes=tuple(nodes), csa_in_other_domains=tuple(dict.fromkeys(other_domains)),
                          shapes=shapes)


_SHOWN_DOMAIN_BYTES = 256


_SCANNED_NODE_BYTES = 1 << 20  # a node this small is read once: without the op_type's bytes it is no CSA node
NODE_FIELDS_WALKED = 3 * MAX_ONNX_NODE_FIELDS + 64  # inputs, outputs, attributes, and name, domain, doc strings


def _is_csa(buf: Buffer, f: Field, other_domains: list[str], position: int) -> bool:
    """Whether the node is a pkg.nxrt CompressedSparseAttention (its op_type and domain only).

    A node that could be one is walked field by field, at most NODE_FIELDS_WALKED of them (ten million
    empty inputs took 12.7 s): a small node without the op_type's bytes anywhere is not one (one find)."""
    if f.end - f.start <= _SCANNED_NODE_BYTES and _CSA_OP_BYTES not in bytes(buf[f.start:f.end]):
        return False
    op_type = domain = b""
    for k, g in enumerate(iter_fields(buf, f.start, f.end)):
        if k >= NODE_FIELDS_WALKED:
            raise LimitError(f"node #{position} has more than {NODE_FIELDS_WALKED:,} fields (inputs, outputs and "
                             f"attributes at most {MAX_ONNX_NODE_FIELDS:,} each, limit MAX_ONNX_NODE_FIELDS)")
        if g.number == _NODE_OP_TYPE and g.wire_type == LENGTH:  # read only when it could match
            op_type = bytes(buf[g.start:g.end]) if g.end - g.start == len(_CSA_OP_BYTES) else b"?"
        elif g.number == _NODE_DOMAIN and g.wire_type == LENGTH:
            domain = bytes(buf[g.start:min(g.end, g.start + _SHOWN_DOMAIN_BYTES + 1)])
    if op_type != _CSA_OP_BYTES:
        return False
    if domain != _CSA_DOMAIN_BYTES:
        if len(other_domains) < 16:  # for the message only
            shown = domain[:_SHOWN_DOMAIN_BYTES].decode("utf-8", "replace")
            other_domains.append(shown + ("…" if len(domain) > _SHOWN_DOMAIN_BYTES else "") or "(default ai.onnx)")
        return False
    return True


def _decode_csa(buf: Buffer, f: Field, position: int, budget: list[int]) -> CsaNode:
    inputs: list[str] = []
    outputs: list[str] = []
    name = ""
    attributes: dict[str, AttrValue] = {}
    fields_seen = 0

    def decoded(s: str) -> str:
        budget[0] -= len(s)
        if budget[0] < 0:
            raise LimitError(f"the CSA nodes' names, inputs and attributes are more than {MAX_ONNX_DECODED_BYTES:,} "
                             "bytes together (limit MAX_ONNX_DECODED_BYTES)")
        return s

    for g in iter_fields(buf, f.start, f.end):
        if g.number in (_NODE_INPUT, _NODE_OUTPUT, _NODE_ATTRIBUTE):
            fields_seen += 1
            if fields_seen > 3 * MAX_ONNX_NODE_FIELDS:
                raise LimitError(f"node #{position} has more than {MAX_ONNX_NODE_FIELDS:,} inputs, outputs or "
                                 "attributes (limit MAX_ONNX_NODE_FIELDS)")
        if g.number == _NODE_INPUT:
            inputs.append(decoded(text(buf, g, "node.input")))
        elif g.number == _NODE_OUTPUT:
            outputs.append(decoded(text(buf, g, "node.output")))
        elif g.number == _NODE_NAME:
            name = decoded(text(buf, g, "node.name"))
        elif g.number == _NODE_ATTRIBUTE and g.wire_type == LENGTH:
            attr_name, value = _attribute(buf, g)
            decoded(attr_name)
            if isinstance(value.value, str):
                decoded(value.value)
            if attr_name in attributes:  # a second value would silently win (onnx.checker refuses it too)
                raise StructureError(f"node {excerpt(name or '#' + str(position))}: the attribute {excerpt(attr_name)} "
                                     "is given twice")
            attributes[attr_name] = value
    if max(len(inputs), len(outputs), len(attributes)) > MAX_ONNX_NODE_FIELDS:
        raise LimitError(f"node {name or '#' + str(position)!r} has more than {MAX_ONNX_NODE_FIELDS:,} inputs, "
                         "outputs or attributes (limit MAX_ONNX_NODE_FIELDS)")
    return CsaNode(position=position, name=name or f"#{position}", inputs=tuple(inputs),
                   outputs=tuple(outputs), attributes=attributes)


def _attribute(buf: Buffer, f: Field) -> tuple[str, AttrValue]:
    name = ""
    declared_type: int | None = None
    seen: dict[int, Field] = {}
    for g in iter_fields(buf, f.start, f.end):
        if g.number == _ATTR_NAME:
            name = text(buf, g, "attribute.name")
        elif g.number == _ATTR_TYPE and g.wire_type == VARINT:
            declared_type = as_int64(g.value)
        elif g.number in (_ATTR_F, _ATTR_I, _ATTR_S):
            seen[g.number] = g
    kind = declared_type
    if kind is None:  # files written before AttributeProto.type existed: infer it
        kind = next((k for k, n in ((_ATTR_INT, _ATTR_I), (_ATTR_STRING, _ATTR_S), (_ATTR_FLOAT, _ATTR_F))
                     if n in seen), 0)
    if kind == _ATTR_INT:
        g = seen.get(_ATTR_I)
        if g is not None and g.wire_type != VARINT:
            raise WireError(g.start, f"attribute {name!r}: i is not a varint")
        return name, AttrValue("int", as_int64(g.value) if g else 0)
    if kind == _ATTR_STRING:
        g = seen.get(_ATTR_S)
        return name, AttrValue("string", text(buf, g, f"attribute {name!r}") if g else "")
    if kind == _ATTR_FLOAT:
        g = seen.get(_ATTR_F)
        if g is not None and g.wire_type != FIXED32:
            raise WireError(g.start, f"attribute {name!r}: f is not a 32-bit float")
        value = struct.unpack("<f", g.value.to_bytes(4, "little"))[0] if g else 0.0
        return name, AttrValue("float", value)
    return name, AttrValue(f"type {kind}", None)


def _value_info_name(buf: Buffer, f: Field, wanted: set[bytes], lengths: set[int]) -> str | None:
    """The entry's name when it is one of ``wanted`` (compared as bytes: other names are never decoded)."""
    for g in iter_fields(buf, f.start, f.end):
        if g.number == _VI_NAME:
            if g.wire_type != LENGTH or g.end - g.start not in lengths:
                return None
            raw = bytes(buf[g.start:g.end])
            return raw.decode("utf-8") if raw in wanted else None
    return None


def _value_info_shape(buf: Buffer, f: Field) -> tuple[Axis, ...] | None:
    type_field = _first(buf, iter_fields(buf, f.start, f.end), _VI_TYPE)
    if type_field is None:
        return None
    tensor = _first(buf, iter_fields(buf, type_field.start, type_field.end), _TYPE_TENSOR, _TYPE_SPARSE_TENSOR)
    if tensor is None:
        return None
    shape = _first(buf, iter_fields(buf, tensor.start, tensor.end), _TENSOR_SHAPE)
    if shape is None:
        return None
    dims: list[Axis] = []
    for d in iter_fields(buf, shape.start, shape.end):
        if d.number != _SHAPE_DIM or d.wire_type != LENGTH:
            continue
        if len(dims) >= MAX_ONNX_DIMS:
            raise LimitError(f"a state edge's shape has more than {MAX_ONNX_DIMS} dimensions (limit MAX_ONNX_DIMS)")
        axis: Axis = None
        for g in iter_fields(buf, d.start, d.end):
            if g.number == _DIM_VALUE and g.wire_type == VARINT:
                axis = as_int64(g.value)
            elif g.number == _DIM_PARAM:
                if g.end - g.start > MAX_NAME_CHARS:  # a symbol is a short name; it is quoted in lint messages
                    raise LimitError(f"a dim_param at byte {g.start:,} is {g.end - g.start:,} bytes long "
                                     f"(limit MAX_NAME_CHARS = {MAX_NAME_CHARS})")
                axis = text(buf, g, "dim_param") or None
        dims.append(axis)
    return tuple(dims)


def _first(buf: Buffer, fields: Iterable[Field], *numbers: int) -> Field | None:
    for g in fields:
        if g.number in numbers and g.wire_type == LENGTH:
            return g
    return None


__all__ = ["Axis", "AttrValue", "CsaNode", "GraphStructure", "StructureError", "read_structure",
           "CSA_DOMAIN", "CSA_OP_TYPE"]
