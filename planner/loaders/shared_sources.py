"""A Hugging Face config with ``kv_source_layer_ids`` read as layers that share compressed state.

DeepSeek-V4.1-style configs declare which layers own a compressor and a compressed cache
(``kv_source_layer_ids``), which run an indexer (``index_source_layer_ids``) and which layer
narrows the indexers above it to candidate blocks (``candidate_source_layer_id``). Every other
ratio-1/2 layer reads the nearest source at or below it (vLLM 0.33
``models/deepseek_v41/attention.py:300-361``; SGLang 0.5.23 ``deepseek_v4_memory_pool.py:1821-1836``).
This module resolves that topology once, per layer, into ``Descriptor.sharing``, so the gate
judges each layer alone and the layout never guesses who owns what. A config without
``kv_source_layer_ids`` never reaches this module: V4 configs are read exactly as before.

The formats are DeepSeek's reference ones (DEEPSEEK_V41.md §4): 288 B NVFP4 records, 68 B
MXFP4 index keys (2.5 records x 356 B = 890 B per token), and MXFP8 window rows (528 B) — the
window format is csa-plan's choice for the contract layout (docs/deepseek-v41.md).
"""

from __future__ import annotations

from typing import Any

from csa_plan.planner.descriptor import SHARED_RATIOS, Descriptor, IndexKeyFormat, RecordFormat, Sharing
from csa_plan.planner.errors import BadInput
from csa_plan.planner.refusals import Clause, Refusal, RefusalType
from csa_plan.planner.text import kind_of
from csa_plan.planner.values import read_int

KV_SOURCES_KEY = "kv_source_layer_ids"
INDEX_SOURCES_KEY = "index_source_layer_ids"
CANDIDATE_KEYS = ("candidate_source_layer_id", "candidate_topk_blocks", "candidate_block_size")

REFERENCE_RECORD = RecordFormat.NVFP4
REFERENCE_WINDOW = RecordFormat.MXFP8
REFERENCE_INDEX_KEY = IndexKeyFormat.MXFP4


def read_layer_ids(data: dict[str, Any], source: str, key: str) -> tuple[int, ...]:
    """A list of layer ids, strictly: integers (not bools), non-negative; bad input otherwise."""
    value = data.get(key)
    if not isinstance(value, list):
        raise BadInput(source, key, f"expected a list of layer ids, got {kind_of(value)}"
                       + (" (a model with kv_source_layer_ids needs it)" if value is None else ""))
    return tuple(read_int(source, f"{key}[{i}]", v) for i, v in enumerate(value))


def nearest_at_or_below(ids: tuple[int, ...], layer: int) -> int | None:
    below = [s for s in ids if s <= layer]
    return max(below) if below else None


def shared_layers(data: dict[str, Any], source: str, ratios: list[int], n_main: int, common: dict[str, int],
                  index: dict[str, int]) -> tuple[tuple[Descriptor, ...], tuple[Refusal, ...], tuple[str, ...]]:
    """The layer stack, the model-level topology refusals and a note, from one config mapping."""
    kv_sources = read_layer_ids(data, source, KV_SOURCES_KEY)
    index_sources = read_layer_ids(data, source, INDEX_SOURCES_KEY)
    candidate = {k: read_int(source, k, data[k]) for k in CANDIDATE_KEYS if data.get(k) is not None}
    if candidate and len(candidate) != len(CANDIDATE_KEYS):
        missing = [k for k in CANDIDATE_KEYS if k not in candidate]
        raise BadInput(source, missing[0], "missing: a candidate stage needs all of " + ", ".join(CANDIDATE_KEYS))
    found = model_topology_refusals(kv_sources, index_sources, candidate.get(CANDIDATE_KEYS[0]), ratios, n_main)
    cand_src = candidate.get(CANDIDATE_KEYS[0])
    cand_kv = nearest_at_or_below(kv_sources, cand_src) if cand_src is not None else None
    layers = []
    for i, r in enumerate(ratios):
        kv = nearest_at_or_below(kv_sources, i) if r in SHARED_RATIOS else None
        idx = nearest_at_or_below(index_sources, i) if r in SHARED_RATIOS else None
        in_candidates = (cand_src is not None and r in SHARED_RATIOS and i in index_sources and i >= cand_src
                         and kv == cand_kv)
        sharing = Sharing(
            kv_sources=kv_sources,
            index_sources=index_sources,
            kv_source=kv,
            kv_source_ratio=ratios[kv] if kv is not None and kv < len(ratios) else None,
            index_source=idx,
            candidate_source=cand_src if in_candidates else None,
            candidate_topk_blocks=candidate.get(CANDIDATE_KEYS[1], 0) if in_candidates else 0,
            candidate_block_size=candidate.get(CANDIDATE_KEYS[2], 0) if in_candidates else 0,
            window_format=REFERENCE_WINDOW.value,
            index_key_format=REFERENCE_INDEX_KEY.value,
        )
        layers.append(Descriptor(
            layer_id=i,
            compression_ratio=r,
            cache_format=REFERENCE_RECORD.value,
            is_mtp=i >= n_main,
            sharing=sharing,
            **common,
            **(index if r in SHARED_RATIOS else {k: 0 for k in index}),
        ))
    note = (f"shared compressed state: kv sources {list(kv_sources)}, index sources {list(index_sources)}"
            + (f", candidate stage at layer {cand_src} ({candidate[CANDIDATE_KEYS[1]]} blocks of "
               f"{candidate[CANDIDATE_KEYS[2]]})" if cand_src is not None else "")
            + f"; reference formats: {REFERENCE_RECORD.value} records, {REFERENCE_INDEX_KEY.value} index keys, "
              f"{REFERENCE_WINDOW.value} windows")
    return tuple(layers), found, (note, *engram_note(data, source))


def engram_note(data: dict[str, Any], source: str) -> tuple[str, ...]:
    """Where the Engram tables (hash-addressed n-gram rows, no per-token state) sit: a note, since
    they are weights, not state, and their place differs by engine (DEEPSEEK_V41.md §7)."""
    if "engram_layer_ids" not in data:
        return ()
    layers = read_layer_ids(data, source, "engram_layer_ids")
    rows = read_layer_ids(data, source, "engram_num_embeddings")
    dim = read_int(source, "engram_head_dim", data.get("engram_head_dim", 0))
    row_bytes = dim + dim // 32  # FP8 values + one UE8M0 scale per 32
    total = sum(rows) * row_bytes
    return (f"Engram tables on layers {list(layers)}: {total:,} B ({total / 2**30:.2f} GiB, {row_bytes} B per row); "
            "without --engine the device budget holds them on the GPUs, rows split over tp (SGLang 0.5.23's "
            "default); with --engine each release puts them where its code does (planner/weights/engram.py: vLLM 0.33 "
            "in pinned host memory by default)",)


def model_topology_refusals(kv_sources: tuple[int, ...], index_sources: tuple[int, ...], candidate: int | None,
                            ratios: list[int], n_main: int) -> tuple[Refusal, ...]:
    """What no single layer can see: source ids outside the main layers, repeated or out of order."""
    clauses: list[Clause] = []
    for key, ids in (("kv_source_layer_ids", kv_sources), ("index_source_layer_ids", index_sources)):
        outside = [s for s in ids if s >= n_main]
        if outside:
            clauses.append(Clause(key, f"main layer ids 0..{n_main - 1}", str(outside),
                                  f"{key} names {outside}, not main layers (0..{n_main - 1})"))
        if list(ids) != sorted(set(ids)):
            clauses.append(Clause(key, "strictly increasing", str(list(ids)), f"{key} {list(ids)} is not strictly "
                                                                              "increasing (repeated or out of order)"))
    if not kv_sources:
        clauses.append(Clause("kv_source_layer_ids", "at least one layer", "[]",
                              "kv_source_layer_ids is empty: no layer owns compressed state"))
    if candidate is not None and candidate not in index_sources:
        clauses.append(Clause("candidate_source_layer_id", f"one of {list(index_sources)}", str(candidate),
                              f"candidate source {candidate} is not an index source: it runs no indexer"))
    if not clauses:
        return ()
    return (Refusal.from_clauses(RefusalType.INVALID_SOURCE_TOPOLOGY, None, clauses),)
