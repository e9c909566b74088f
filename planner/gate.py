"""The descriptor gates: ``validate()`` (op level) and ``validate_c1_runtime()``.

A linter, not a first-error check: every clause is evaluated and grouped into one
refusal per type. Clauses are data (a list of checks per type) so each refusal
type can be triggered alone, following the precedence rules of CONTRACT §1.
"""

from __future__ import annotations

from enum import Enum

from csa_plan.planner.descriptor import (
    FROZEN_HEAD_DIM,
    FROZEN_ROPE_DIM,
    MAX_SEQ_LEN_LIMIT,
    INDEX_KEY_FORMAT_NAMES,
    RECORD_FORMAT_NAMES,
    REQUIRED_INDEX_HEAD_DIM,
    SHARED_RATIOS,
    SUPPORTED_RATIOS,
    CacheFormat,
    Descriptor,
    LayerMode,
    StateEdge,
    required_edges,
)
from csa_plan.planner.refusals import Clause, Refusal, RefusalType
from csa_plan.planner.text import bounded, excerpt


class Gate(str, Enum):
    OP = "op"
    C1 = "c1"


def validate(d: Descriptor) -> tuple[Refusal, ...]:
    """Op-level gate: ratios 4 and 128 are admitted when their geometry is sound; a layer that
    declares a source topology is judged by the shared-state rules instead (``validate_shared``)."""
    if d.sharing is not None:
        return validate_shared(d)
    found: dict[RefusalType, list[Clause]] = {}

    def add(t: RefusalType, field: str, expected: object, actual: object, text: str) -> None:
        found.setdefault(t, []).append(Clause(field, str(expected), str(actual), text))

    ratio = d.compression_ratio
    fmt = d.known_format
    ratio_known = ratio in SUPPORTED_RATIOS

    if not ratio_known:
        add(RefusalType.UNSUPPORTED_RATIO, "compression_ratio", "4 or 128", ratio,
            f"compression_ratio {ratio} is not supported (only 4 and 128)")
    if fmt is None:
        add(RefusalType.UNKNOWN_CACHE_FORMAT, "cache_format", "|".join(f.value for f in CacheFormat),
            bounded(d.cache_format), f"cache_format {excerpt(d.cache_format)} is unknown")

    if ratio == 4 and fmt is not None and fmt is not CacheFormat.FP8_E4M3_BLOCK64:
        add(RefusalType.RATIO4_REQUIRES_FP8_CACHE, "cache_format", CacheFormat.FP8_E4M3_BLOCK64.value,
            fmt.value, f"ratio 4 needs cache_format fp8_e4m3_block64, got {fmt.value}")
    if ratio == 4 and d.index_head_dim != REQUIRED_INDEX_HEAD_DIM:
        add(RefusalType.RATIO4_REQUIRES_INDEX_HEAD_DIM_128, "index_head_dim", REQUIRED_INDEX_HEAD_DIM,
            d.index_head_dim, f"ratio 4 needs index_head_dim 128, got {d.index_head_dim}")
    if ratio == 128 and fmt is CacheFormat.FP4_E2M1_BLOCK32:
        add(RefusalType.RATIO128_REJECTS_FP4, "cache_format", "f32 or fp8_e4m3_block64", fmt.value,
            "ratio 128 cannot use fp4_e2m1_block32 records")

    _geometry(d, fmt, add)

    if d.device_count != 1:
        add(RefusalType.MULTI_DEVICE_AMBIGUITY, "device_count", 1, d.device_count,
            f"one group is accounted on exactly one device, got device_count {d.device_count}")

    edges = required_edges(ratio) if ratio_known else ()
    for edge in edges:
        if edge not in d.present_edges:
            add(RefusalType.MISSING_STATE_EDGE, f"state_edges.{edge.value}", "present", "absent",
                f"required state edge {edge.value!r} is missing")

    return tuple(Refusal.from_clauses(t, d.layer_id, cs) for t, cs in found.items())


def _geometry(d: Descriptor, fmt: CacheFormat | None, add) -> None:
    ratio = d.compression_ratio
    geo = RefusalType.INVALID_HEAD_GEOMETRY
    rope_exceeds = d.qk_rope_head_dim > d.head_dim

    if d.num_heads <= 0:
        add(geo, "num_heads", "> 0", d.num_heads, f"num_heads must be positive, got {d.num_heads}")
    if d.head_dim <= 0:
        add(geo, "head_dim", "> 0", d.head_dim, f"head_dim must be positive, got {d.head_dim}")
    if d.head_dim != FROZEN_HEAD_DIM:
        add(geo, "head_dim", FROZEN_HEAD_DIM, d.head_dim, f"head_dim is frozen at 512 in v1, got {d.head_dim}")
    if rope_exceeds:
        add(RefusalType.ROPE_EXCEEDS_HEAD_DIM, "qk_rope_head_dim", f"<= head_dim ({d.head_dim})",
            d.qk_rope_head_dim, f"qk_rope_head_dim {d.qk_rope_head_dim} exceeds head_dim {d.head_dim}")
    else:
        if d.qk_rope_head_dim != FROZEN_ROPE_DIM:
            add(geo, "qk_rope_head_dim", FROZEN_ROPE_DIM, d.qk_rope_head_dim,
                f"qk_rope_head_dim is frozen at 64 in v1, got {d.qk_rope_head_dim}")
        nope = d.head_dim - d.qk_rope_head_dim
        if fmt is CacheFormat.FP8_E4M3_BLOCK64 and nope % 64 != 0:
            add(geo, "head_dim", "non-RoPE width a multiple of 64", nope,
                f"fp8 non-RoPE width {nope} is not a multiple of 64")
    if fmt is CacheFormat.FP4_E2M1_BLOCK32 and d.head_dim % 32 != 0:
        add(geo, "head_dim", "a multiple of 32", d.head_dim, f"fp4 head_dim {d.head_dim} is not a multiple of 32")
    if ratio == 4:
        for name in ("index_num_heads", "index_topk"):
            value = getattr(d, name)
            if value <= 0:
                add(geo, name, "> 0", value, f"ratio 4 needs a positive {name}, got {value}")
    if ratio == 128:
        for name in ("index_num_heads", "index_head_dim", "index_topk"):
            value = getattr(d, name)
            if value != 0:
                add(geo, name, 0, value, f"ratio 128 has no indexer, but {name} is {value}")
    if d.window <= 0:
        add(geo, "window", "> 0", d.window, f"window must be positive, got {d.window}")
    if d.batch <= 0:
        add(geo, "batch", "> 0", d.batch, f"batch must be positive, got {d.batch}")
    if not 1 <= d.max_seq_len <= MAX_SEQ_LEN_LIMIT:
        add(geo, "max_seq_len", f"1..{MAX_SEQ_LEN_LIMIT}", d.max_seq_len,
            f"max_seq_len must be in 1..2^20, got {d.max_seq_len}")
    if d.window > d.max_seq_len >= 1:
        add(geo, "window", f"<= max_seq_len ({d.max_seq_len})", d.window,
            f"window {d.window} exceeds max_seq_len {d.max_seq_len}")


def validate_shared(d: Descriptor) -> tuple[Refusal, ...]:
    """The gate for a layer of a model with cross-layer shared compressed state (DeepSeek-V4.1-style).

    Admitted by properties only: ratio 0 (window only), 1 or 2, a kv source at or below every
    ratio-1/2 layer with the same ratio, every kv source an index source, a candidate stage that
    can hold index_topk, known record / window / key formats and the frozen head geometry. What
    the engines refuse is refused here, typed, so nothing is sized on a topology no engine runs
    (vLLM 0.33 ``models/deepseek_v41/attention.py:326-331``; SGLang 0.5.23
    ``deepseek_v4_memory_pool.py:94-115``).
    """
    found: dict[RefusalType, list[Clause]] = {}

    def add(t: RefusalType, field: str, expected: object, actual: object, text: str) -> None:
        found.setdefault(t, []).append(Clause(field, str(expected), str(actual), text))

    s = d.sharing
    assert s is not None
    ratio = d.compression_ratio
    if ratio in SUPPORTED_RATIOS:
        add(RefusalType.MIXED_RATIO_FAMILIES, "compression_ratio", "0, 1 or 2 (a model with kv_source_layer_ids)",
            ratio, f"ratio {ratio} is a per-layer (V4) ratio, but the model shares compressed state across "
                   "layers (kv_source_layer_ids); the two are not mixed in one model")
    elif ratio not in SHARED_RATIOS and ratio != 0:
        add(RefusalType.UNSUPPORTED_RATIO, "compression_ratio", "0, 1 or 2", ratio,
            f"compression_ratio {ratio} is not supported with shared compressed state (only 0, 1 and 2)")
    for field, value, names in (("cache_format", d.cache_format, RECORD_FORMAT_NAMES),
                                ("window_format", s.window_format, RECORD_FORMAT_NAMES),
                                ("index_key_format", s.index_key_format, INDEX_KEY_FORMAT_NAMES)):
        if value not in names:
            add(RefusalType.UNKNOWN_CACHE_FORMAT, field, "|".join(names), bounded(value),
                f"{field} {excerpt(value)} is unknown with shared compressed state")

    # V4's ratio-specific clauses (index fields of ratio 4/128) do not apply: a V4 ratio here is
    # MixedRatioFamilies alone, so each type can be triggered alone.
    _geometry(d.with_(compression_ratio=0) if ratio in SUPPORTED_RATIOS else d, None, add)
    if d.is_index_source and ratio in SHARED_RATIOS:
        geo = RefusalType.INVALID_HEAD_GEOMETRY
        for name in ("index_num_heads", "index_topk"):
            value = getattr(d, name)
            if value <= 0:
                add(geo, name, "> 0", value, f"an index source needs a positive {name}, got {value}")
        if d.index_head_dim != REQUIRED_INDEX_HEAD_DIM:
            add(geo, "index_head_dim", REQUIRED_INDEX_HEAD_DIM, d.index_head_dim,
                f"an index source needs index_head_dim 128, got {d.index_head_dim}")

    if d.device_count != 1:
        add(RefusalType.MULTI_DEVICE_AMBIGUITY, "device_count", 1, d.device_count,
            f"one group is accounted on exactly one device, got device_count {d.device_count}")

    _topology(d, add)
    return tuple(Refusal.from_clauses(t, d.layer_id, cs) for t, cs in found.items())


def _topology(d: Descriptor, add) -> None:
    """Source topology clauses: who owns the state this layer reads, and can its indexer run."""
    s = d.sharing
    ratio = d.compression_ratio
    mode = d.mode
    if ratio == 0 and (d.layer_id in s.kv_sources or d.layer_id in s.index_sources):
        which = "kv_source_layer_ids" if d.layer_id in s.kv_sources else "index_source_layer_ids"
        add(RefusalType.INVALID_SOURCE_TOPOLOGY, which, "a layer of ratio 1 or 2", "ratio 0",
            f"layer {d.layer_id} is listed in {which} but keeps only its window (ratio 0): it has no compressor")
    if ratio not in SHARED_RATIOS:
        return
    if s.kv_source is None:
        add(RefusalType.NO_KV_SOURCE, "kv_source_layer_ids", f"a kv source at or below layer {d.layer_id}",
            list(s.kv_sources), f"ratio-{ratio} layer {d.layer_id} has no kv source at or below it "
                                f"(kv_source_layer_ids {list(s.kv_sources)}): there is no cache to read")
    elif s.kv_source_ratio != ratio:
        add(RefusalType.KV_SOURCE_RATIO_MISMATCH, "compress_ratios", f"ratio {ratio} at source layer {s.kv_source}",
            s.kv_source_ratio, f"ratio-{ratio} layer {d.layer_id} reads kv source {s.kv_source}, which has ratio "
                               f"{s.kv_source_ratio}: one cache cannot hold records of both ratios")
    if mode is LayerMode.OWN_SOURCE:
        if d.layer_id not in s.index_sources:
            add(RefusalType.KV_SOURCE_NOT_INDEX_SOURCE, "index_source_layer_ids", f"includes {d.layer_id}",
                list(s.index_sources), f"kv source {d.layer_id} is not an index source: its index keys would "
                                       "have no indexer to write them")
        for edge in (StateEdge.COMPRESSED, StateEdge.INDEX_KEY) + ((StateEdge.CARRY,) if ratio == 2 else ()):
            if edge not in d.present_edges:
                add(RefusalType.MISSING_STATE_EDGE, f"state_edges.{edge.value}", "present", "absent",
                    f"required state edge {edge.value!r} of kv source {d.layer_id} is missing")
    if d.is_index_source and s.index_source != d.layer_id:
        add(RefusalType.INVALID_SOURCE_TOPOLOGY, "index_source_layer_ids", d.layer_id, s.index_source,
            f"layer {d.layer_id} is an index source but resolves index source {s.index_source}")
    if ratio in SHARED_RATIOS and s.index_source is None:
        add(RefusalType.INVALID_SOURCE_TOPOLOGY, "index_source_layer_ids",
            f"an index source at or below layer {d.layer_id}", list(s.index_sources),
            f"ratio-{ratio} layer {d.layer_id} has no index source at or below it: no top-k to attend with")
    if s.candidate_source is not None:
        capacity = s.candidate_topk_blocks * s.candidate_block_size
        if capacity < d.index_topk:
            add(RefusalType.CANDIDATE_STAGE_TOO_SMALL, "candidate_topk_blocks", f">= index_topk ({d.index_topk}) "
                "positions", capacity, f"layer {d.layer_id} selects its top {d.index_topk} inside the candidate "
                f"stage of layer {s.candidate_source}, which holds {s.candidate_topk_blocks} blocks of "
                f"{s.candidate_block_size} = {capacity} positions")


def validate_c1_runtime(d: Descriptor) -> tuple[Refusal, ...]:
    """The C1 admission slice admits HCA only: ratio 4 is refused, never planned dense."""
    refusals = validate(d)
    if d.sharing is not None and d.compression_ratio in SHARED_RATIOS:
        refusals += (
            Refusal.from_clauses(
                RefusalType.UNSUPPORTED_C1_RATIO,
                d.layer_id,
                [Clause("compression_ratio", "128", str(d.compression_ratio),
                        f"ratio {d.compression_ratio} (shared compressed state) is outside the C1 runtime slice")],
            ),
        )
    if d.compression_ratio == 4:
        refusals += (
            Refusal.from_clauses(
                RefusalType.UNSUPPORTED_C1_RATIO,
                d.layer_id,
                [Clause("compression_ratio", "128", "4", "ratio 4 (CSA) is op-supported but outside the C1 runtime slice")],
            ),
        )
    return refusals


GATES = {Gate.OP: validate, Gate.C1: validate_c1_runtime}


def run_gate(gate: Gate, d: Descriptor) -> tuple[Refusal, ...]:
    return GATES[gate](d)
