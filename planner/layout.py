"""Exact byte layout of one state group (CONTRACT §2).

All arithmetic is on Python integers; the result is checked against the unsigned
64-bit range once, so an absurd batch is refused rather than wrapped.
"""

from __future__ import annotations

from dataclasses import fields
from enum import Enum

from csa_plan.planner.record import record
from csa_plan.planner.units import ceil_div, round_up
from csa_plan.planner.descriptor import CacheFormat, Descriptor, IndexKeyFormat, LayerMode, RecordFormat
from csa_plan.planner.errors import U64_LIMIT, BadInput

FP32_BYTES = 4
INT32_BYTES = 4
BF16_BYTES = 2
E8M0_SCALE_BYTES = 1
FP8_BLOCK = 64
FP4_BLOCK = 32
FP4_BLOCK_BYTES = E8M0_SCALE_BYTES + FP4_BLOCK // 2  # 17


class StateClass(str, Enum):
    COMPRESSED = "compressed"
    CARRY = "carry"
    INDEX = "index"
    INDEX_CARRY = "index_carry"
    DENSE_RING = "dense_ring"
    SCRATCH = "scratch"


STATE_CLASSES: tuple[StateClass, ...] = tuple(StateClass)


class LayerKind(str, Enum):
    CSA = "CSA"  # ratio 4
    HCA = "HCA"  # ratio 128
    SWA = "SWA"  # ratio 0: sliding window only
    UNSUPPORTED = "unsupported"
    OWNER = "owner"  # shared state (ratio 1/2): a kv source, charged for the state its readers use
    READER = "reader"  # shared state (ratio 1/2): reads a source's state, charged for its own window


PER_LAYER_KINDS: tuple[LayerKind, ...] = (LayerKind.CSA, LayerKind.HCA, LayerKind.SWA, LayerKind.UNSUPPORTED)
"""The kinds a model without a source topology has (V4): reports list these always, the others when present."""


def layer_kind(compression_ratio: int) -> LayerKind:
    return {4: LayerKind.CSA, 128: LayerKind.HCA, 0: LayerKind.SWA}.get(compression_ratio, LayerKind.UNSUPPORTED)


def descriptor_kind(d: Descriptor) -> LayerKind:
    """The kind of a layer: by its ratio (V4), or by its mode where it declares a source topology."""
    mode = d.mode
    if mode is None or d.compression_ratio not in (0, 1, 2):
        return layer_kind(d.compression_ratio)
    return {LayerMode.WINDOW_ONLY: LayerKind.SWA, LayerMode.OWN_SOURCE: LayerKind.OWNER,
            LayerMode.READER: LayerKind.READER}[mode]


@record
class GroupBytes:
    """Bytes of one group (or a sum of groups) by state class."""

    compressed_bytes: int = 0
    carry_bytes: int = 0
    index_bytes: int = 0
    index_carry_bytes: int = 0
    dense_ring_bytes: int = 0
    scratch_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return sum(self.by_class().values())

    def by_class(self) -> dict[StateClass, int]:
        return {c: getattr(self, f"{c.value}_bytes") for c in STATE_CLASSES}

    def __add__(self, other: "GroupBytes") -> "GroupBytes":
        return GroupBytes(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def scaled(self, factor: int) -> "GroupBytes":
        return GroupBytes(**{f.name: getattr(self, f.name) * factor for f in fields(self)})

    def as_dict(self) -> dict[str, int]:
        out = {c.value: getattr(self, f"{c.value}_bytes") for c in STATE_CLASSES}
        out["total"] = sum(out.values())
        return out

    def checked(self, source: str, field: str) -> "GroupBytes":
        if self.total_bytes >= U64_LIMIT:
            raise BadInput(source, field, f"byte count {self.total_bytes} does not fit an unsigned 64-bit integer")
        return self


ZERO = GroupBytes()


def record_width_bytes(cache_format: CacheFormat, head_dim: int, rope_dim: int) -> int:
    """Bytes of one compressed record (or one ring row) in the given format."""
    if cache_format is CacheFormat.F32:
        return head_dim * FP32_BYTES
    if cache_format is CacheFormat.FP8_E4M3_BLOCK64:
        return (head_dim - rope_dim) // FP8_BLOCK * (E8M0_SCALE_BYTES + FP8_BLOCK) + rope_dim * BF16_BYTES
    return head_dim // FP4_BLOCK * FP4_BLOCK_BYTES


def index_key_bytes(index_head_dim: int) -> int:
    """One FP4 block-32 index key: 128 dims -> 68 bytes."""
    return index_head_dim // FP4_BLOCK * FP4_BLOCK_BYTES


def carry_slots(ratio: int) -> int:
    """Ratio 4 overlaps with the previous block, so it keeps 2R token slots."""
    return 2 * ratio if ratio == 4 else ratio


def carry_width(ratio: int, head_dim: int) -> int:
    """Compressor output width per token: 2*D for ratio 4 (overlap), D for ratio 128."""
    return 2 * head_dim if ratio == 4 else head_dim


def scratch_workspaces(d: Descriptor, query_len: int) -> tuple[int, ...]:
    """Sizes of the fixed scratch workspaces, before the max(size, 1) floor."""
    rows = d.batch * query_len
    records = ceil_div(d.max_seq_len, d.compression_ratio)
    if d.compression_ratio == 128:
        return (rows * d.num_heads * (d.window + records) * FP32_BYTES,)
    selected = min(records, d.index_topk)
    return (
        rows * d.index_num_heads * d.index_head_dim * FP32_BYTES,  # index queries
        rows * records * FP32_BYTES,  # index scores
        rows * selected * INT32_BYTES,  # top-k ids
        rows * d.num_heads * (d.window + selected) * FP32_BYTES,  # attention logits
    )


def group_bytes(d: Descriptor, query_len: int = 1) -> GroupBytes:
    """Bytes per class of one admitted CSA (ratio 4) or HCA (ratio 128) group."""
    fmt = d.known_format
    if d.compression_ratio not in (4, 128) or fmt is None:
        raise ValueError(f"layer {d.layer_id}: only admitted ratio-4/128 groups have a layout")
    ratio = d.compression_ratio
    width = record_width_bytes(fmt, d.head_dim, d.qk_rope_head_dim)
    records = ceil_div(d.max_seq_len, ratio)
    carry = d.batch * carry_slots(ratio) * 2 * carry_width(ratio, d.head_dim) * FP32_BYTES
    index = index_carry = 0
    if ratio == 4:
        index = d.batch * records * index_key_bytes(d.index_head_dim)
        index_carry = d.batch * carry_slots(ratio) * 2 * carry_width(ratio, d.index_head_dim) * FP32_BYTES
    return GroupBytes(
        compressed_bytes=d.batch * records * width,
        carry_bytes=carry,
        index_bytes=index,
        index_carry_bytes=index_carry,
        dense_ring_bytes=d.batch * d.window * width,
        scratch_bytes=sum(max(size, 1) for size in scratch_workspaces(d, query_len)),
    )


def swa_ring_bytes(d: Descriptor) -> GroupBytes:
    """A sliding-window-only layer keeps just its dense ring."""
    fmt = d.known_format or CacheFormat.FP8_E4M3_BLOCK64
    width = record_width_bytes(fmt, d.head_dim, d.qk_rope_head_dim)
    return GroupBytes(dense_ring_bytes=d.batch * d.window * width)


# --- cross-layer shared compressed state (DeepSeek-V4.1-style, ratios 0/1/2) ----------------------

E2M1_PER_BYTE = 2
NVFP4_SCALE_BLOCK = 16  # one e4m3 scale per 16 values
MX_SCALE_BLOCK = 32  # one ue8m0 scale per 32 values (MXFP8, MXFP4)
V4_RECORD_ALIGN = 8  # the packed V4 record is padded to 8 bytes (583 -> 584)


def shared_record_bytes(fmt: RecordFormat, head_dim: int, rope_dim: int) -> int:
    """One compressed record or window row of a shared-state model (DEEPSEEK_V41.md §4).

    NVFP4: head_dim e2m1 values, two per byte, + one e4m3 scale byte per 16 (288 at 512);
    MXFP8: head_dim fp8 values (RoPE included) + one ue8m0 per 32 (528); FP8_V4: V4's packed
    record, non-RoPE fp8 + one ue8m0 per 64 + bf16 RoPE, padded to 8 (584).
    """
    if fmt is RecordFormat.NVFP4:
        return head_dim // E2M1_PER_BYTE + head_dim // NVFP4_SCALE_BLOCK
    if fmt is RecordFormat.MXFP8:
        return head_dim + head_dim // MX_SCALE_BLOCK
    nope = head_dim - rope_dim
    return round_up(nope + nope // FP8_BLOCK * E8M0_SCALE_BYTES + rope_dim * BF16_BYTES, V4_RECORD_ALIGN)


def shared_index_key_bytes(fmt: IndexKeyFormat, index_head_dim: int) -> int:
    """One index key: MXFP4 (values two per byte + one ue8m0 per 32: 68 at 128) or FP8 (+ one fp32 scale: 132)."""
    if fmt is IndexKeyFormat.MXFP4:
        return index_head_dim // E2M1_PER_BYTE + index_head_dim // MX_SCALE_BLOCK
    return index_head_dim + FP32_BYTES


def shared_records(max_seq_len: int, ratio: int) -> int:
    """Ratio 2 is non-overlapping: floor(L/2) records, the odd token waits in the carry; ratio 1 keeps L."""
    return max_seq_len // ratio


def shared_carry_rows(ratio: int) -> int:
    """Ratio 2 keeps its pending tokens (ratio rows of fp32 kv and score); ratio 1 compresses nothing and keeps none."""
    return ratio if ratio > 1 else 0


def shared_scratch_workspaces(d: Descriptor, query_len: int) -> tuple[int, ...]:
    """fp32/int32 workspaces of one shared-state layer's decode step (the CONTRACT §2 workspaces, per role).

    Every ratio-1/2 layer attends over its window and its index source's top-k (the logits);
    an index source also holds its queries, its scores and the top-k ids. It scores every record
    of its kv source, or, inside a candidate stage above the stage's source, only the candidate
    positions; the candidate source itself also holds the chosen block ids.
    """
    s = d.sharing
    rows = d.batch * query_len
    records = shared_records(d.max_seq_len, d.compression_ratio)
    selected = min(records, d.index_topk)
    out = [rows * d.num_heads * (d.window + selected) * FP32_BYTES]  # attention logits
    if d.is_index_source:
        scored = records
        if s.candidate_source is not None and d.layer_id > s.candidate_source:
            scored = min(records, s.candidate_topk_blocks * s.candidate_block_size)
        out += [rows * d.index_num_heads * d.index_head_dim * FP32_BYTES,  # index queries
                rows * scored * FP32_BYTES,  # index scores
                rows * min(scored, d.index_topk) * INT32_BYTES]  # top-k ids
        if s.candidate_source == d.layer_id:
            out.append(rows * s.candidate_topk_blocks * INT32_BYTES)  # candidate block ids
    return tuple(out)


def shared_window_bytes(d: Descriptor) -> GroupBytes:
    """Every layer of a shared-state model keeps its own window rows, in the window format."""
    width = shared_record_bytes(RecordFormat(d.sharing.window_format), d.head_dim, d.qk_rope_head_dim)
    return GroupBytes(dense_ring_bytes=d.batch * d.window * width)


def shared_group_bytes(d: Descriptor, query_len: int = 1) -> GroupBytes:
    """Bytes of one admitted layer of a shared-state model: owners once, readers their window.

    An owner (kv source) is charged for the compressed records, the index keys and the carry
    that it and all its readers use; a reader for its own window and workspaces, never for
    the source's state (that would count it once per reader: ``sharing.refuse_double_count``).
    Index keys come from the compressor's latent, so there is no index carry.
    """
    window = shared_window_bytes(d)
    if d.compression_ratio == 0:
        return window
    scratch = sum(max(size, 1) for size in shared_scratch_workspaces(d, query_len))
    if d.mode is not LayerMode.OWN_SOURCE:
        return GroupBytes(dense_ring_bytes=window.dense_ring_bytes, scratch_bytes=scratch)
    ratio = d.compression_ratio
    records = shared_records(d.max_seq_len, ratio)
    s = d.sharing
    return GroupBytes(
        compressed_bytes=d.batch * records * shared_record_bytes(RecordFormat(d.cache_format), d.head_dim,
                                                                 d.qk_rope_head_dim),
        carry_bytes=d.batch * shared_carry_rows(ratio) * 2 * d.head_dim * FP32_BYTES,
        index_bytes=d.batch * records * shared_index_key_bytes(IndexKeyFormat(s.index_key_format),
                                                               d.index_head_dim),
        dense_ring_bytes=window.dense_ring_bytes,
        scratch_bytes=scratch,
    )
