"""Exact byte layout of one state group (CONTRACT §2).

All arithmetic is on Python integers; the result is checked against the unsigned
64-bit range once, so an absurd batch is refused rather than wrapped.
"""

from __future__ import annotations

from dataclasses import fields
from enum import Enum

from csa_plan.planner.record import record
from csa_plan.planner.units import ceil_div
from csa_plan.planner.descriptor import CacheFormat, Descriptor
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


def layer_kind(compression_ratio: int) -> LayerKind:
    return {4: LayerKind.CSA, 128: LayerKind.HCA, 0: LayerKind.SWA}.get(compression_ratio, LayerKind.UNSUPPORTED)


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
