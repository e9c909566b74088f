"""Read an ONNX graph's structure into a ModelSpec: one descriptor per CSA node, plus graph findings.

The file is opened once, its descriptor checked (a regular file of at most
MAX_ONNX_BYTES), and walked with a small protobuf wire reader over bounded ``pread``
calls (``onnx/source.py``; a file that shrinks meanwhile is bad input, never SIGBUS):
only the node list, the opset imports, metadata_props and
the shapes of the state edges are decoded. Initializers are skipped by offset —
neither embedded payloads nor external-data locations are read or followed — so
a graph that declares gigabytes of weights, present or not, is checked in the
time it takes to read its nodes. The ``onnx`` package is not imported.

Layer id of a node (first that applies): its ``layer_id`` attribute; else the
integer N that all its state input names carry (``past_key_values.N.…``); else its
order among the CSA nodes. Two nodes with the same id are bad input.

Capacity (CONTRACT §4): ``max_seq_len`` / ``max_sequence_length`` and
``sliding_window`` / ``window_size`` from the node's attributes, else the model's
metadata_props under the same keys; ``--max-seq-len`` / ``--window`` override both;
window defaults to 128, max_seq_len has no default (bad input if nothing gives it).
Batch is axis 0 of input 6 when the graph fixes it, else 1. The graph cannot mark
MTP layers, so every CSA node is a main layer.
"""

from __future__ import annotations

from pathlib import Path

from csa_plan.planner.descriptor import Descriptor, Sharing, StateEdge
from csa_plan.planner.errors import BadInput
from csa_plan.planner.files import open_regular
from csa_plan.planner.limits import MAX_LAYER_ID, MAX_ONNX_BYTES
from csa_plan.planner.onnx.source import FileBuffer, SourceChanged
from csa_plan.planner.onnx.wire import LimitError
from csa_plan.planner.text import excerpt, printable
from csa_plan.planner.model import ModelSpec
from csa_plan.planner.onnx.csa_node import MAX_SEQ_LEN_KEYS, WINDOW_KEYS, NodeReading, read_csa_node, shared_arity
from csa_plan.planner.onnx.structure import CSA_DOMAIN, CSA_OP_TYPE, GraphStructure, StructureError, read_structure
from csa_plan.planner.onnx.record_axes import LayerRecordAxes, ReaderEdges, lint_readers, lint_record_axes
from csa_plan.planner.refusals import Refusal, RefusalType
from csa_plan.planner.values import parse_int_text

DEFAULT_WINDOW = 128


def load_onnx_model(path: Path, *, max_seq_len: int | None, window: int | None, at_length: int) -> ModelSpec:
    source = str(path)
    graph = read_graph_file(path)
    if not graph.csa_nodes:
        hint = ""
        if graph.csa_in_other_domains:
            shown = ", ".join(printable(d[:80]) for d in graph.csa_in_other_domains[:4])
            hint = f"; found {CSA_OP_TYPE} in domain(s) {shown}, expected {CSA_DOMAIN}"
        raise BadInput(source, None, f"no {CSA_OP_TYPE} node (domain {CSA_DOMAIN}) among the graph's "
                                     f"{graph.node_count} nodes{hint}")
    readings = [read_csa_node(source, node, graph.opsets, graph.shapes) for node in graph.csa_nodes]
    ids, id_note = assign_layer_ids(source, readings)
    seq = resolve_capacity(source, "max_seq_len", MAX_SEQ_LEN_KEYS, readings, ids, graph.metadata,
                           max_seq_len, "--max-seq-len", None)
    win = resolve_capacity(source, "window", WINDOW_KEYS, readings, ids, graph.metadata,
                           window, "--window", DEFAULT_WINDOW)

    layers: list[Descriptor] = []
    refusals: list[Refusal] = []
    axes: list[LayerRecordAxes] = []
    sharing = shared_topology(readings, ids)
    readers: list[ReaderEdges] = []
    by_id = dict(zip(ids, readings))
    for reading, layer_id in zip(readings, ids):
        share = sharing.get(layer_id)
        layers.append(Descriptor(
            layer_id=layer_id,
            max_seq_len=seq.values[layer_id],
            window=win.values[layer_id],
            batch=reading.batch or 1,
            present_edges=reading.present_edges,
            is_mtp=False,
            sharing=share,
            **reading.fields,  # type: ignore[arg-type]
        ))
        refusals.extend(Refusal.from_clauses(t, layer_id, cs) for t, cs in reading.clauses.items())
        if share is not None and reading.kv_source is not None and reading.ratio in (1, 2):
            arity = shared_arity(reading, layer_id in share.kv_sources, layer_id in share.index_sources)
            if arity:
                refusals.append(Refusal.from_clauses(RefusalType.ARITY_MISMATCH, layer_id, arity))
        if share is not None and reading.kv_source is not None and layer_id not in share.kv_sources:
            src = by_id.get(share.kv_source) if share.kv_source is not None else None
            readers.append(ReaderEdges(layer_id, reading.kv_source, reading.input(6), reading.input(17),
                                       tuple(reading.output(i) for i in (1, 2, 3)),
                                       src.input(6) if src else None, src.input(17) if src else None))
            continue  # a reader's cache edges are its source's: linted per source, below
        axes.append(record_axes_of(reading, layer_id, graph,
                                   has_index=share is not None and layer_id in share.kv_sources))
    lint = lint_record_axes(tuple(sorted(axes, key=lambda a: a.layer_id)), at_length)
    refusals.extend(lint.refusals)
    refusals.extend(lint_readers(tuple(readers)))

    notes = [
        id_note,
        seq.note,
        win.note,
        _batch_note(readings),
        f"record-axis lint at length {at_length}: {lint.axes_seen} record axes, {lint.symbols} symbols"
        + (f", {lint.axes_unknown} without a declared shape (not linted)" if lint.axes_unknown else "")
        + f", {len(lint.refusals)} finding(s)",
        f"MTP: the graph does not mark MTP layers; all {len(layers)} CSA nodes are planned as main layers",
    ]
    order = sorted(range(len(layers)), key=lambda i: layers[i].layer_id)
    return ModelSpec(
        name=path.stem,
        source=source,
        layers=tuple(layers[i] for i in order),
        num_main_layers=len(layers),
        num_mtp_layers=0,
        notes=tuple(n for n in notes if n),
        graph_refusals=tuple(sorted(refusals, key=lambda r: (r.layer is None, r.layer or 0))),
    )


def read_graph_file(path: Path) -> GraphStructure:
    """Open once, check the descriptor, decode the structure with bounded reads; every failure is one BadInput line."""
    source = str(path)
    with open_regular(path, MAX_ONNX_BYTES, "MAX_ONNX_BYTES") as (fd, size):
        if size == 0:
            raise BadInput(source, None, "empty file, not an ONNX model")
        try:
            return read_structure(FileBuffer(fd, size))
        except StructureError as exc:
            raise BadInput(source, None, exc.problem) from None
        except (LimitError, SourceChanged) as exc:
            raise BadInput(source, None, str(exc)) from None
        except OSError as exc:
            raise BadInput(source, None, f"cannot read: {exc.strerror or exc}") from None


def assign_layer_ids(source: str, readings: list[NodeReading]) -> tuple[list[int], str]:
    ids: list[int] = []
    how: dict[str, int] = {}
    example = ""
    for order, r in enumerate(readings):
        for given, how_given in ((r.attr_layer_id, "layer_id attribute"), (r.name_layer_id, "state input names")):
            if given is not None and given >= MAX_LAYER_ID:
                raise BadInput(source, "layer_id", f"node {excerpt(r.node.name)}: layer {given:,} from its {how_given} "
                                                   f"is not below {MAX_LAYER_ID:,} (MAX_LAYER_ID)")
        if r.attr_layer_id is not None:
            ids.append(r.attr_layer_id)
            how["the layer_id attribute"] = how.get("the layer_id attribute", 0) + 1
        elif r.name_layer_id is not None:
            ids.append(r.name_layer_id)
            key = "the integer in the state input names"
            how[key] = how.get(key, 0) + 1
            example = example or r.input(6) or r.input(7)
        else:
            ids.append(order)
            key = "the node's order among CSA nodes"
            how[key] = how.get(key, 0) + 1
    owner: dict[int, NodeReading] = {}
    for layer_id, r in zip(ids, readings):
        if layer_id in owner:
            raise BadInput(source, "layer_id", f"layer {layer_id} is claimed by nodes {excerpt(owner[layer_id].node.name)} "
                                               f"and {excerpt(r.node.name)}")
        owner[layer_id] = r
    parts = []
    for key, count in how.items():
        shown = f" (e.g. {excerpt(example, 80)})" if key.startswith("the integer") and example else ""
        parts.append(f"{key}{shown} on {count} node(s)")
    return ids, "layer ids from " + "; ".join(parts)


class _Capacity:
    def __init__(self, values: dict[int, int], note: str) -> None:
        self.values = values
        self.note = note


def resolve_capacity(source: str, name: str, keys: tuple[str, ...], readings: list[NodeReading], ids: list[int],
                     metadata: dict[str, str], cli_value: int | None, option: str,
                     default: int | None) -> _Capacity:
    """Per node: attribute, else metadata_props, else the default; the command line overrides all."""
    meta = _metadata_value(source, keys, metadata)
    per_layer: dict[int, int] = {}
    by_source: dict[tuple[int, str], list[int]] = {}
    for r, layer_id in zip(readings, ids):
        own = getattr(r, name)
        if own is not None:
            value, label = own[0], f"node attribute {own[1]!r}"
        elif meta is not None:
            value, label = meta[0], f"metadata_props {meta[1]!r}"
        elif default is not None or cli_value is not None:
            value, label = default, "the default"
        else:
            raise BadInput(source, name, f"no CSA node attribute ({' / '.join(keys)}) or metadata_props entry "
                                         f"gives it; pass {option}")
        per_layer[layer_id] = value  # type: ignore[assignment]
        by_source.setdefault((value, label), []).append(layer_id)  # type: ignore[arg-type]
    def says(include_default: bool) -> str:
        return "; ".join(
            f"{value} from {label}" + (f" on layers {_ids(layer_ids)}" if len(by_source) > 1 else "")
            for (value, label), layer_ids in by_source.items()
            if value is not None and (include_default or label != "the default"))

    graph_says = says(include_default=False)
    if cli_value is not None:
        note = f"{name} {cli_value} from {option}" + (f" (overrides the graph's {graph_says})" if graph_says else "")
        return _Capacity({i: cli_value for i in per_layer}, note)
    if len(by_source) == 1:
        (value, label), = by_source
        if label == "the default":
            note = (f"{name} {value} from the default (no {' / '.join(keys)} node attribute "
                    "or metadata_props entry)")
        else:
            note = f"{name} {value} from {label}"
    else:
        note = f"{name}: {says(include_default=True)}"
    return _Capacity(per_layer, note)


def _metadata_value(source: str, keys: tuple[str, ...], metadata: dict[str, str]) -> tuple[int, str] | None:
    found = []
    for key in keys:
        if key in metadata:
            raw = metadata[key]
            if raw is None:
                raise BadInput(source, f"metadata_props.{key}", "the value is longer than MAX_ONNX_STRING_BYTES")
            stripped = raw.strip()
            if not (stripped.isascii() and stripped.isdigit()):  # digits only: no sign, no Unicode digits
                raise BadInput(source, f"metadata_props.{key}", f"expected a non-negative integer, got {excerpt(raw)}")
            found.append((parse_int_text(source, f"metadata_props.{key}", stripped), key))
    if len({v for v, _ in found}) > 1:
        shown = ", ".join(f"{k} = {v}" for v, k in found)
        raise BadInput(source, f"metadata_props.{keys[0]}", f"conflicting values: {shown}")
    return found[0] if found else None


def shared_topology(readings: list[NodeReading], ids: list[int]) -> dict[int, Sharing]:
    """Shared compressed state declared by ``kv_source_layer_id`` / ``index_source_layer_id`` node
    attributes (docs/onnx.md): a node naming itself is a kv (index) source. Once any node declares
    it, every node of the graph gets the topology, so a V4 ratio beside it is MixedRatioFamilies and a
    ratio-1/2 node without a source is NoKvSource — the gate's rules, as for a config."""
    if not any(r.kv_source is not None for r in readings):
        return {}
    by_id = dict(zip(ids, readings))
    kv_sources = tuple(sorted(i for i, r in by_id.items() if r.kv_source == i))
    index_sources = tuple(sorted(i for i, r in by_id.items() if r.index_source == i))
    out = {}
    for i, r in by_id.items():
        kv = r.kv_source if r.kv_source in kv_sources else None
        out[i] = Sharing(kv_sources=kv_sources, index_sources=index_sources, kv_source=kv,
                         kv_source_ratio=by_id[kv].ratio if kv is not None else None,
                         index_source=r.index_source if r.index_source in index_sources else None)
    return out


def record_axes_of(reading: NodeReading, layer_id: int, graph: GraphStructure,
                   has_index: bool = False) -> LayerRecordAxes:
    def axis(name: str):
        shape = graph.shapes.get(name) if name else None
        return shape[1] if shape is not None and len(shape) >= 2 else None

    return LayerRecordAxes(
        layer_id=layer_id,
        ratio=reading.ratio,
        past_kv=axis(reading.input(6)) if StateEdge.COMPRESSED in reading.present_edges else None,
        past_index=axis(reading.input(17)) if StateEdge.INDEX_KEY in reading.present_edges else None,
        present_kv=axis(reading.output(1)),
        present_index=axis(reading.output(3)) if reading.ratio == 4 or has_index else None,
        has_index=has_index,
    )


def _batch_note(readings: list[NodeReading]) -> str:
    fixed = sorted({r.batch for r in readings if r.batch is not None})
    if not fixed:
        return ""
    return f"batch {', '.join(map(str, fixed))} from axis 0 of input 6 (past_compressed_kv), fixed in the graph"


def _ids(ids: list[int]) -> str:
    return ", ".join(str(i) for i in sorted(ids))
