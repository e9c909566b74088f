"""Tensors as a checkpoint stores them: shape, stored dtype and the scale tensors of each weight.

Sizes are exact integers. A sub-byte format is stored packed (FP4 e2m1: two values per
I8 byte, shape ``[out, in / 2]``), so a stored element is always a whole number of bytes.
"""

from __future__ import annotations

from enum import Enum
from functools import cached_property
from typing import Iterator

from csa_plan.planner.record import record
from csa_plan.planner.units import ceil_div


class StoredDType(str, Enum):
    """Element types by their safetensors names; the value is the name in a header."""

    F64 = "F64"
    F32 = "F32"
    F16 = "F16"
    BF16 = "BF16"
    F8_E4M3 = "F8_E4M3"
    F8_E5M2 = "F8_E5M2"
    F8_E8M0 = "F8_E8M0"
    I64 = "I64"
    I32 = "I32"
    I16 = "I16"
    I8 = "I8"
    U8 = "U8"
    BOOL = "BOOL"

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self]


ITEMSIZE: dict[StoredDType, int] = {
    StoredDType.F64: 8, StoredDType.F32: 4, StoredDType.F16: 2, StoredDType.BF16: 2,
    StoredDType.F8_E4M3: 1, StoredDType.F8_E5M2: 1, StoredDType.F8_E8M0: 1,
    StoredDType.I64: 8, StoredDType.I32: 4, StoredDType.I16: 2, StoredDType.I8: 1, StoredDType.U8: 1,
    StoredDType.BOOL: 1,
}


class Quant(str, Enum):
    """How a linear weight is stored; each format knows its stored tensors for a logical [out, in]."""

    NONE = "none"
    FP8_BLOCK128 = "fp8_e4m3_block128x128"  # F8_E4M3 [out, in] + one UE8M0 byte per 128x128 block
    FP4_BLOCK32 = "fp4_e2m1_block1x32"      # I8 [out, in/2] (two per byte) + one UE8M0 byte per 1x32 block
    FP8_BLOCK32 = "fp8_e4m3_block32x32"     # F8_E4M3 [out, in] + one UE8M0 byte per 32x32 block (V4.1)

    def stored(self, out_features: int, in_features: int, dtype: StoredDType) -> tuple[tuple[int, ...], StoredDType]:
        if self is Quant.FP4_BLOCK32:
            return (out_features, in_features // 2), StoredDType.I8
        if self in (Quant.FP8_BLOCK128, Quant.FP8_BLOCK32):
            return (out_features, in_features), StoredDType.F8_E4M3
        return (out_features, in_features), dtype

    def scale_shape(self, out_features: int, in_features: int) -> tuple[int, ...] | None:
        if self is Quant.FP4_BLOCK32:
            return (out_features, ceil_div(in_features, 32))
        if self is Quant.FP8_BLOCK128:
            return (ceil_div(out_features, 128), ceil_div(in_features, 128))
        if self is Quant.FP8_BLOCK32:
            return (ceil_div(out_features, 32), ceil_div(in_features, 32))
        return None

    def bytes_for(self, out_features: int, in_features: int, dtype: StoredDType) -> int:
        """Stored bytes of the weight and its scales for a logical ``[out, in]`` (a shard, or the whole)."""
        shape, stored = self.stored(out_features, in_features, dtype)
        total = _product(shape) * stored.itemsize
        scale = self.scale_shape(out_features, in_features)
        if scale is not None:
            total += _product(scale) * StoredDType.F8_E8M0.itemsize
        return total


def _product(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


@record
class TensorSpec:
    """One stored tensor."""

    name: str
    shape: tuple[int, ...]
    dtype: StoredDType

    @property
    def elements(self) -> int:
        return _product(self.shape)

    @property
    def nbytes(self) -> int:
        return self.elements * self.dtype.itemsize


class Role(str, Enum):
    """What a weight is, in the terms an engine's sharding rules are written in."""

    EMBED = "embed"
    HEAD = "head"
    FINAL_NORM = "final_norm"
    HC_HEAD = "hc_head"              # hyper-connection head mix (model level, and per MTP layer)
    ATTN_SINK = "attn_sink"
    WQ_A = "wq_a"
    WKV = "wkv"
    Q_NORM = "q_norm"
    KV_NORM = "kv_norm"
    WQ_B = "wq_b"
    WO_A = "wo_a"
    WO_B = "wo_b"
    COMPRESSOR_APE = "compressor_ape"
    COMPRESSOR_LINEAR = "compressor_linear"  # wkv and wgate
    COMPRESSOR_NORM = "compressor_norm"
    INDEXER_WQ_B = "indexer_wq_b"
    INDEXER_WEIGHTS_PROJ = "indexer_weights_proj"
    ROUTER_GATE = "router_gate"
    ROUTER_BIAS = "router_bias"
    TID2EID = "tid2eid"
    EXPERT_W13 = "expert_w13"        # routed expert w1 / w3: [moe_inter, hidden]
    EXPERT_W2 = "expert_w2"          # routed expert w2: [hidden, moe_inter]
    SHARED_W13 = "shared_w13"
    SHARED_W2 = "shared_w2"
    LAYER_NORM = "layer_norm"        # attn_norm, ffn_norm
    HC = "hc"                        # per-layer hyper-connection mixes
    MTP_PROJ = "mtp_proj"            # e_proj, h_proj
    MTP_NORM = "mtp_norm"            # enorm, hnorm, the MTP head norm
    INDEXER_WK = "indexer_wk"        # V4.1: index keys from the compressor's latent, on kv sources only
    ENGRAM = "engram"                # V4.1: an n-gram hash table (rows x row dim, FP8 + UE8M0 per 32)
    UNATTRIBUTED = "unattributed"    # the published checkpoint size less every inventoried weight


@record
class Weight:
    """A parameter as the checkpoint stores it: its tensor and, for a quantised linear, its scales.

    ``logical`` is the shape before packing (``[out, in]`` for linears); ``layer`` is the
    decoder-layer id (MTP layers continue after the main layers), None at model level;
    ``expert`` is the first routed-expert id, None elsewhere. ``copies`` identical weights
    share one entry (a layer's routed experts ``expert .. expert + copies - 1``), so a model
    with 256 experts per layer is a few thousand entries, not ~73,000; sizes count every copy.
    """

    role: Role
    logical: tuple[int, ...]
    quant: Quant
    tensor: TensorSpec
    scales: tuple[TensorSpec, ...] = ()
    layer: int | None = None
    is_mtp: bool = False
    expert: int | None = None
    copies: int = 1

    @property
    def tensors(self) -> tuple[TensorSpec, ...]:
        """The stored tensors of one copy."""
        return (self.tensor, *self.scales)

    @property
    def tensor_count(self) -> int:
        return (1 + len(self.scales)) * self.copies

    def stored_tensors(self) -> Iterator[TensorSpec]:
        """Every copy's tensors under the checkpoint's own names (``experts.[0-255].w1`` -> ``experts.7.w1``)."""
        if self.copies == 1:
            yield from self.tensors
            return
        first = self.expert or 0
        span = expert_span(first, self.copies)
        for e in range(first, first + self.copies):
            for t in self.tensors:
                yield TensorSpec(t.name.replace(span, str(e)), t.shape, t.dtype)

    @property
    def copy_nbytes(self) -> int:
        scales = self.scales  # the tensor and its scales, without building ``tensors`` (inventory totals)
        return self.tensor.nbytes + (sum(t.nbytes for t in scales) if scales else 0)

    @property
    def nbytes(self) -> int:
        """Every copy's bytes."""
        return self.copy_nbytes * self.copies

    @property
    def elements(self) -> int:
        """Every copy's stored elements."""
        scales = self.scales
        return (self.tensor.elements + (sum(t.elements for t in scales) if scales else 0)) * self.copies


def expert_span(first: int, copies: int) -> str:
    """How an entry that stands for several experts writes their ids in its tensor names."""
    return f"[{first}-{first + copies - 1}]"


def linear(name: str, role: Role, out_features: int, in_features: int, quant: Quant,
           dtype: StoredDType = StoredDType.BF16, **where: object) -> Weight:
    """A linear layer's weight ``name.weight`` and, when quantised, its scale ``name.scale``."""
    shape, stored = quant.stored(out_features, in_features, dtype)
    scale = quant.scale_shape(out_features, in_features)
    scales = () if scale is None else (TensorSpec(f"{name}.scale", scale, StoredDType.F8_E8M0),)
    return Weight(role, (out_features, in_features), quant, TensorSpec(f"{name}.weight", shape, stored), scales,
                  **where)  # type: ignore[arg-type]


def plain(name: str, role: Role, shape: tuple[int, ...], dtype: StoredDType, **where: object) -> Weight:
    """An unquantised parameter (norm, bias, mix, table)."""
    return Weight(role, shape, Quant.NONE, TensorSpec(name, shape, dtype), **where)  # type: ignore[arg-type]


Entry = tuple[int, "int | None", str]  # (block index, decoder layer or None at model level, name prefix)


@record
class Inventory:
    """Every weight of a model, derived from its config; totals are exact integers.

    A model repeats a few distinct layer blocks sixty times, so the inventory stores each
    distinct run of weights once (``blocks``, named as its first occurrence names them) and
    ``layout``, the checkpoint's order of (block, layer, name prefix) entries. Totals and the
    per-device shards are each block's figures times its multiplicity; ``weights``, the
    one-entry-per-layer listing (checkpoint comparisons, tests), is built only when read
    (start-up: docs/architecture.md).
    """

    architecture: str
    source: str                      # where the structure comes from (the reference code)
    blocks: tuple[tuple[Weight, ...], ...]
    layout: tuple[Entry, ...]
    num_main_layers: int
    num_mtp_layers: int
    dims: tuple[tuple[str, int], ...] = ()   # sizes sharding rules check (heads, o_groups, vocab, ...)

    def dim(self, name: str) -> int:
        return dict(self.dims)[name]

    @cached_property
    def weights(self) -> tuple[Weight, ...]:
        """Every weight, one entry per layer, in the checkpoint's order: each later occurrence of a
        block is its first one under the occurrence's layer id and name prefix."""
        out: list[Weight] = []
        first: dict[int, str] = {}
        for b, layer, prefix in self.layout:
            block = self.blocks[b]
            own = first.setdefault(b, prefix)
            if own == prefix:
                out += block
                continue
            cut = len(own)  # every name of a block starts with its prefix
            for w in block:
                t = w.tensor
                out.append(Weight(w.role, w.logical, w.quant, TensorSpec(prefix + t.name[cut:], t.shape, t.dtype),
                                  tuple(TensorSpec(prefix + x.name[cut:], x.shape, x.dtype) for x in w.scales),
                                  layer, w.is_mtp, w.expert, w.copies))
        return tuple(out)

    def uses(self) -> dict[int, int]:
        """How many times each block occurs."""
        count: dict[int, int] = {}
        for b, _, _ in self.layout:
            count[b] = count.get(b, 0) + 1
        return count

    @cached_property
    def _totals(self) -> tuple[int, int, int]:
        """Tensors, stored elements and bytes of every copy: each block's once, times its uses."""
        tensors = elements = nbytes = 0
        for b, n in self.uses().items():
            for w in self.blocks[b]:
                tensors += w.tensor_count * n
                elements += w.elements * n
                nbytes += w.nbytes * n
        return tensors, elements, nbytes

    @property
    def tensor_count(self) -> int:
        return self._totals[0]

    @property
    def element_count(self) -> int:
        return self._totals[1]

    @property
    def nbytes(self) -> int:
        return self._totals[2]

    def without_mtp(self) -> "Inventory":
        layout = tuple(e for e in self.layout if not any(w.is_mtp for w in self.blocks[e[0]]))
        return Inventory(self.architecture, self.source, self.blocks, layout, self.num_main_layers, 0, self.dims)
