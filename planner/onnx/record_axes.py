"""The record-axis lint (CONTRACT §4): a pure check over the symbols on each layer's record axis.

The record axis is axis 1 of the compressed caches: input 6 (past_compressed_kv),
input 17 (past_index_key, ratio 4), output 1 (present_compressed_kv) and output 3
(present_index_key, ratio 4). A runtime binds every symbol to one size per run, so:

- **SharedRecordAxis** — one symbol on layers of different ratios would be bound to
  floor(T/4) and floor(T/128) records at once (2 and 0 at T = 8). One model-level
  refusal (layer None) naming every conflicting symbol, its layers and the sizes.
- **IndexAxisMismatch** — a ratio-4 layer's index key cache advances in lockstep with
  its attention cache, so inputs 6 and 17 (and outputs 1 and 3) must share a symbol.
- **PresentPastAxisMismatch** — a layer's past and present symbols differ by design
  (``past_compressed_records.N`` / ``present_compressed_records.N``); they disagree
  when their ``.N`` suffixes name different layers, or when either is shared with a
  layer of another ratio.

Fixed sizes (dim_value) never conflict by name; unknown axes are not linted.

Shared compressed state (a node with ``kv_source_layer_id``, docs/onnx.md) generalises the
per-layer rule to one record axis per **source**: a kv source is linted as a layer above (its
index keys share its symbol; two sources of different ratios never share one), and a reader
takes its source's cache tensors as input edges, so it has the source's symbol by construction.
A reader that declares a record tensor of its own (``ReaderOwnRecordAxis``) would size a second
cache that no runtime keeps and break the one-symbol-per-source rule: ``lint_readers`` refuses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from csa_plan.planner.onnx.structure import Axis
from csa_plan.planner.refusals import Clause, Refusal, RefusalType

FIXED_EXPORTER_NAMES = ("past_compressed_records.{layer_id}", "present_compressed_records.{layer_id}",
                        "selected_records.{layer_id}")
_LAYER_SUFFIX = re.compile(r"\.(\d+)$")


class RecordEdge(str, Enum):
    PAST_KV = "input 6 (past_compressed_kv)"
    PAST_INDEX = "input 17 (past_index_key)"
    PRESENT_KV = "output 1 (present_compressed_kv)"
    PRESENT_INDEX = "output 3 (present_index_key)"


@dataclass(frozen=True)
class LayerRecordAxes:
    """Axis 1 of each compressed cache of one layer, as the graph declares it."""

    layer_id: int
    ratio: int
    past_kv: Axis = None
    past_index: Axis = None
    present_kv: Axis = None
    present_index: Axis = None
    has_index: bool = False  # index keys beside the records: ratio 4, or a kv source of shared state

    @property
    def indexed(self) -> bool:
        return self.ratio == 4 or self.has_index

    def edges(self) -> tuple[tuple[RecordEdge, Axis], ...]:
        out = [(RecordEdge.PAST_KV, self.past_kv), (RecordEdge.PRESENT_KV, self.present_kv)]
        if self.indexed:
            out += [(RecordEdge.PAST_INDEX, self.past_index), (RecordEdge.PRESENT_INDEX, self.present_index)]
        return tuple(out)


@dataclass(frozen=True)
class LintResult:
    refusals: tuple[Refusal, ...]
    axes_seen: int  # record axes the graph declares (symbol or size)
    axes_unknown: int  # record axes with no shape or an unnamed dimension: not linted
    symbols: int  # distinct record-axis symbols


def records_at(ratio: int, length: int) -> int:
    """Records a layer of this ratio holds after ``length`` tokens: floor(T / ratio)."""
    return length // ratio


def layer_suffix(symbol: str) -> int | None:
    m = _LAYER_SUFFIX.search(symbol)
    return int(m.group(1)) if m else None


def lint_record_axes(layers: tuple[LayerRecordAxes, ...], at_length: int) -> LintResult:
    uses: dict[str, list[LayerRecordAxes]] = {}
    seen = unknown = 0
    for layer in layers:
        for _, axis in layer.edges():
            if axis is None:
                unknown += 1
                continue
            seen += 1
            if isinstance(axis, str):
                uses.setdefault(axis, [])
                if layer not in uses[axis]:
                    uses[axis].append(layer)

    conflicted: dict[str, tuple[int, ...]] = {}  # symbol -> the ratios it spans
    shared_clauses = []
    for symbol, users in uses.items():
        ratios = tuple(sorted({u.ratio for u in users if u.ratio > 0}))
        if len(ratios) < 2:
            continue
        conflicted[symbol] = ratios
        shared_clauses.append(_shared_clause(symbol, users, ratios, at_length))

    refusals: list[Refusal] = []
    if shared_clauses:
        refusals.append(Refusal.from_clauses(RefusalType.SHARED_RECORD_AXIS, None, shared_clauses))
    for layer in layers:
        index = _index_clauses(layer)
        if index:
            refusals.append(Refusal.from_clauses(RefusalType.INDEX_AXIS_MISMATCH, layer.layer_id, index))
        present_past = _present_past_clauses(layer, conflicted)
        if present_past:
            refusals.append(Refusal.from_clauses(RefusalType.PRESENT_PAST_AXIS_MISMATCH, layer.layer_id, present_past))
    return LintResult(refusals=tuple(refusals), axes_seen=seen, axes_unknown=unknown, symbols=len(uses))


def _ids(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids)


def _shared_clause(symbol: str, users: list[LayerRecordAxes], ratios: tuple[int, ...], at_length: int) -> Clause:
    by_ratio = {r: sorted(u.layer_id for u in users if u.ratio == r) for r in ratios}
    all_ids = sorted(u.layer_id for u in users)
    sizes = [records_at(r, at_length) for r in ratios]
    size_text = " and ".join(str(s) for s in sizes)
    spans = "; ".join(f"ratio {r} on layers {_ids(ids)}" for r, ids in by_ratio.items())
    how = ", ".join(f"floor({at_length}/{r}) = {records_at(r, at_length)}" for r in ratios)
    if len(set(sizes)) == 1:  # equal at this length: say where they first diverge
        first = min(ratios)
        how += f"; they first differ at length {first}: " + " and ".join(str(records_at(r, first)) for r in ratios)
    return Clause(
        field="record_axis",
        expected=f"{symbol!r} on layers of one ratio only (fixed exporter: one symbol per layer)",
        actual=f"{symbol!r} on layers {_ids(all_ids)} would be bound to conflicting sizes {size_text} "
               f"at length {at_length}",
        text=f"record-axis symbol {symbol!r} is shared by layers of different ratios ({spans}); "
             f"at total length {at_length} it would be bound to conflicting sizes {size_text} ({how})",
    )


def _index_clauses(layer: LayerRecordAxes) -> list[Clause]:
    if not layer.indexed:
        return []
    out = []
    for kv_edge, kv, idx_edge, idx in ((RecordEdge.PAST_KV, layer.past_kv, RecordEdge.PAST_INDEX, layer.past_index),
                                       (RecordEdge.PRESENT_KV, layer.present_kv,
                                        RecordEdge.PRESENT_INDEX, layer.present_index)):
        if kv is None or idx is None or kv == idx:
            continue
        out.append(Clause(
            field=f"{idx_edge.value.split(' (')[1].rstrip(')')}.shape[1]",
            expected=repr(kv),
            actual=repr(idx),
            text=f"{idx_edge.value} record axis {idx!r} differs from {kv_edge.value} record axis {kv!r}; "
                 "the index key cache advances in lockstep with the attention cache and must share its symbol",
        ))
    return out


def _present_past_clauses(layer: LayerRecordAxes, conflicted: dict[str, tuple[int, ...]]) -> list[Clause]:
    pairs = [(RecordEdge.PAST_KV, layer.past_kv, RecordEdge.PRESENT_KV, layer.present_kv)]
    if layer.indexed and (layer.past_index, layer.present_index) != (layer.past_kv, layer.present_kv):
        pairs.append((RecordEdge.PAST_INDEX, layer.past_index, RecordEdge.PRESENT_INDEX, layer.present_index))
    out: list[Clause] = []
    for past_edge, past, present_edge, present in pairs:
        if past is None or present is None:
            continue
        field = f"{present_edge.value.split(' (')[1].rstrip(')')}.shape[1]"
        past_n = layer_suffix(past) if isinstance(past, str) else None
        present_n = layer_suffix(present) if isinstance(present, str) else None
        if past_n is not None and present_n is not None and past_n != present_n:
            out.append(Clause(field, f"a symbol for layer {past_n} (like {past!r})", repr(present),
                              f"{past_edge.value} {past!r} names layer {past_n} but {present_edge.value} "
                              f"{present!r} names layer {present_n}"))
        shared = [s for s in (past, present) if isinstance(s, str) and s in conflicted]
        if shared:
            others = sorted({r for s in shared for r in conflicted[s] if r != layer.ratio})
            names = " and ".join(repr(s) for s in shared)
            out.append(Clause(field, "symbols of this layer only", names,
                              f"{names} {'is' if len(shared) == 1 else 'are'} shared with layers of ratio "
                              f"{', '.join(map(str, others))}, so past and present cannot agree on this "
                              "layer's record count"))
    unique: dict[str, Clause] = {}
    for c in out:
        unique.setdefault(c.text, c)
    return list(unique.values())


@dataclass(frozen=True)
class ReaderEdges:
    """The compressed-cache edges of one reader of shared state and of its kv source."""

    layer_id: int
    source: int
    past_kv: str  # input 6 of the reader
    past_index: str  # input 17 of the reader ("" when absent)
    present_outputs: tuple[str, ...]  # outputs 1..3 the reader declares (a reader writes no cache)
    source_past_kv: str | None  # input 6 of the source node (None: no such source node)
    source_past_index: str | None


def lint_readers(readers: tuple[ReaderEdges, ...]) -> tuple[Refusal, ...]:
    """ReaderOwnRecordAxis for every reader whose cache edges are not its source's tensors."""
    out = []
    for r in readers:
        if r.source_past_kv is None:
            continue  # no source node: the gate refuses the topology (NoKvSource)
        clauses = []
        for field, mine, theirs in (("input 6 (past_compressed_kv)", r.past_kv, r.source_past_kv),
                                    ("input 17 (past_index_key)", r.past_index, r.source_past_index)):
            if mine and mine != theirs:
                clauses.append(Clause(field, repr(theirs), repr(mine),
                                      f"reader layer {r.layer_id} takes {field} {mine!r}, not the tensor {theirs!r} "
                                      f"of its kv source {r.source}: a record axis of its own for state it only reads"))
        for name in r.present_outputs:
            if name:
                clauses.append(Clause("outputs 1..3", "empty (a reader writes no cache)", repr(name),
                                      f"reader layer {r.layer_id} declares a cache output {name!r} of its own"))
        if clauses:
            out.append(Refusal.from_clauses(RefusalType.READER_OWN_RECORD_AXIS, r.layer_id, clauses))
    return tuple(out)
