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
    REQUIRED_INDEX_HEAD_DIM,
    SUPPORTED_RATIOS,
    CacheFormat,
    Descriptor,
    required_edges,
)
from csa_plan.planner.refusals import Clause, Refusal, RefusalType
from csa_plan.planner.text import bounded, excerpt


class Gate(str, Enum):
    OP = "op"
    C1 = "c1"


def validate(d: Descriptor) -> tuple[Refusal, ...]:
    """Op-level gate: ratios 4 and 128 are admitted when their geometry is sound."""
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


def validate_c1_runtime(d: Descriptor) -> tuple[Refusal, ...]:
    """The C1 admission slice admits HCA only: ratio 4 is refused, never planned dense."""
    refusals = validate(d)
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
