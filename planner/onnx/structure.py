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
from csa_plan.planner.onnx.wire import FIXED32, LENGTH, VARINT, Buffer, Field, WireError, as_int64, iter_fields, text

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
    metadata: dict[str, str] = {}
    graph_spans: list[tuple[int, int]] = []
    try:
        for f in iter_fields(buf, 0, size):
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


def _string_pair(buf: Buffer, f: Field) -> tuple[str, str]:
    key, value = "", ""
    for g in iter_fields(buf, f.start, f.end):
        if g.number == 1:
            key = text(buf, g, "metadata_props.key")
        elif g.number == 2:
            value = text(buf, g, "metadata_props.value")
    return key, value


def _read_graph(buf: Buffer, spans: list[tuple[int, int]], ir_version: int, opsets: dict[str, int],
                metadata: dict[str, str]) -> GraphStructure:
    nodes: list[CsaNode] = []
    other_domains: list[str] = []
    declared: dict[str, Field] = {}  # value name -> its ValueInfoProto field; inputs win over outputs
    position = 0
    for start, end in spans:
        for f in iter_fields(buf, start, end):
            if f.wire_type != LENGTH:
                continue
            if f.number == _GRAPH_NODE:
                node = _node_if_csa(buf, f, position, other_domains)
                if node is not None:
                    nodes.append(node)
                position += 1
            elif f.number in (_GRAPH_INPUT, _GRAPH_OUTPUT, _GRAPH_VALUE_INFO):
                name = _value_info_name(buf, f)
                declared.setdefault(name, f)  # first declaration wins (inputs precede outputs in file order)
            # initializers (5), sparse initializers (15) and everything else: skipped unread
    wanted = {n for node in nodes for n in (*node.inputs, *node.outputs) if n}
    shapes = {name: _value_info_shape(buf, declared[name]) for name in wanted if name in declared}
    return GraphStructure(ir_version=ir_version, opsets=opsets, metadata=metadata, node_count=position,
                          csa_nodes=tuple(nodes), csa_in_other_domains=tuple(dict.fromkeys(other_domains)),
                          shapes=shapes)


def _node_if_csa(buf: Buffer, f: Field, position: int, other_domains: list[str]) -> CsaNode | None:
    op_type = domain = b""
    for g in iter_fields(buf, f.start, f.end):
        if g.number == _NODE_OP_TYPE and g.wire_type == LENGTH:
            op_type = bytes(buf[g.start:g.end])
        elif g.number == _NODE_DOMAIN and g.wire_type == LENGTH:
            domain = bytes(buf[g.start:g.end])
    if op_type != _CSA_OP_BYTES:
        return None
    if domain != _CSA_DOMAIN_BYTES:
        other_domains.append(domain.decode("utf-8", "replace") or "(default ai.onnx)")
        return None
    inputs: list[str] = []
    outputs: list[str] = []
    name = ""
    attributes: dict[str, AttrValue] = {}
    for g in iter_fields(buf, f.start, f.end):
        if g.number == _NODE_INPUT:
            inputs.append(text(buf, g, "node.input"))
        elif g.number == _NODE_OUTPUT:
            outputs.append(text(buf, g, "node.output"))
        elif g.number == _NODE_NAME:
            name = text(buf, g, "node.name")
        elif g.number == _NODE_ATTRIBUTE and g.wire_type == LENGTH:
            attr_name, value = _attribute(buf, g)
            attributes[attr_name] = value
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


def _value_info_name(buf: Buffer, f: Field) -> str:
    for g in iter_fields(buf, f.start, f.end):
        if g.number == _VI_NAME:
            return text(buf, g, "value_info.name")
    return ""


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
        axis: Axis = None
        for g in iter_fields(buf, d.start, d.end):
            if g.number == _DIM_VALUE and g.wire_type == VARINT:
                axis = as_int64(g.value)
            elif g.number == _DIM_PARAM:
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
