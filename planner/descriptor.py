"""The state-group descriptor: a layer's declared properties, nothing else.

The gate reads these fields and never a model name or a shape allow-list, so any
model that declares the same properties is judged the same way.

Cross-layer sharing (DeepSeek-V4.1-style, ratios 1 and 2) is one more declared property,
``Descriptor.sharing``: the model's source topology as this layer sees it. A layer without
it is judged exactly as before (V4's per-layer state), so V4 results cannot change.
"""

from __future__ import annotations

from dataclasses import fields, replace
from enum import Enum

from csa_plan.planner.record import record


class CacheFormat(str, Enum):
    F32 = "f32"
    FP8_E4M3_BLOCK64 = "fp8_e4m3_block64"
    FP4_E2M1_BLOCK32 = "fp4_e2m1_block32"


CACHE_FORMAT_NAMES: tuple[str, ...] = tuple(f.value for f in CacheFormat)

SUPPORTED_RATIOS: frozenset[int] = frozenset({4, 128})
SHARED_RATIOS: frozenset[int] = frozenset({1, 2})
"""Ratios that exist only with an explicit source topology: 1 = one record per token, 2 = one per two."""
MAX_SEQ_LEN_LIMIT = 1 << 20
FROZEN_HEAD_DIM = 512
FROZEN_ROPE_DIM = 64
REQUIRED_INDEX_HEAD_DIM = 128


class StateEdge(str, Enum):
    """State inputs of the op; their ONNX input index is the value's position."""

    COMPRESSED = "compressed"  # input 6
    CARRY = "carry"  # input 7
    INDEX_KEY = "index_key"  # input 17 (ratio 4)
    INDEX_CARRY = "index_carry"  # input 18 (ratio 4)


STATE_EDGE_INPUT_INDEX: dict[StateEdge, int] = {
    StateEdge.COMPRESSED: 6,
    StateEdge.CARRY: 7,
    StateEdge.INDEX_KEY: 17,
    StateEdge.INDEX_CARRY: 18,
}


def required_edges(compression_ratio: int) -> tuple[StateEdge, ...]:
    if compression_ratio == 4:
        return tuple(StateEdge)
    return (StateEdge.COMPRESSED, StateEdge.CARRY)


class LayerMode(str, Enum):
    """What a layer keeps of compressed state when state is shared across layers."""

    WINDOW_ONLY = "window_only"  # ratio 0: its own sliding window, nothing compressed
    OWN_SOURCE = "own_source"  # a kv source: compressor, compressed cache, index keys (and carry)
    READER = "reader"  # reads the cache of the nearest source at or below it; keeps only its window


class RecordFormat(str, Enum):
    """Compressed-record and window-row formats of shared-state models (DEEPSEEK_V41.md §4).

    Widths follow from head_dim and the RoPE dims (``layout.shared_record_bytes``); the names
    are the formats, not byte counts, so a different head_dim gives its own width.
    """

    NVFP4 = "nvfp4"  # e2m1 values + one e4m3 scale per 16: 256 + 32 = 288 B at head_dim 512
    MXFP8 = "mxfp8"  # fp8 values incl. RoPE + one ue8m0 scale per 32: 512 + 16 = 528 B
    FP8_V4 = "fp8_v4"  # V4's packed record: 448 fp8 + 64 bf16 RoPE + 7 ue8m0, padded to 8: 584 B


class IndexKeyFormat(str, Enum):
    """Index-key formats of shared-state models: MXFP4 (64 + 4 = 68 B) or FP8 (128 + one fp32 scale = 132 B)."""

    MXFP4 = "mxfp4"
    FP8 = "fp8"


RECORD_FORMAT_NAMES: tuple[str, ...] = tuple(f.value for f in RecordFormat)
INDEX_KEY_FORMAT_NAMES: tuple[str, ...] = tuple(f.value for f in IndexKeyFormat)


@record(kw_only=True)
class Sharing:
    """The source topology as one layer sees it (cross-layer shared compressed state).

    Only the ``kv_sources`` own a compressor, a compressed cache and index keys; the
    ``index_sources`` run an indexer (with the keys of their kv source); every other
    ratio-1/2 layer reads the nearest kv source at or below it. The whole topology is
    carried on every layer so the gate can judge one layer alone (a linter per layer), and
    the nearest sources are resolved by the loader, not guessed by the layout.

    The compressed-record format is the descriptor's ``cache_format`` (a ``RecordFormat`` name
    here, so ``--kv-format nvfp4`` reaches it); the window rows and index keys have their own.

    ``kv_source`` / ``index_source`` are None where no source lies at or below the layer
    (the gate refuses that for ratios 1 and 2); ``kv_source_ratio`` is the ratio the source
    layer declares, so a reader of another ratio is refused rather than sized.
    """

    kv_sources: tuple[int, ...]
    index_sources: tuple[int, ...]
    kv_source: int | None = None
    kv_source_ratio: int | None = None
    index_source: int | None = None
    candidate_source: int | None = None  # the layer whose candidate blocks this layer's indexer scores inside
    candidate_topk_blocks: int = 0
    candidate_block_size: int = 0
    window_format: str = RecordFormat.MXFP8.value  # every layer's sliding-window rows
    index_key_format: str = IndexKeyFormat.MXFP4.value  # index keys (owners)

    def as_dict(self) -> dict[str, object]:
        return {
            "kv_sources": list(self.kv_sources),
            "index_sources": list(self.index_sources),
            "kv_source": self.kv_source,
            "kv_source_ratio": self.kv_source_ratio,
            "index_source": self.index_source,
            "candidate_source": self.candidate_source,
            "candidate_topk_blocks": self.candidate_topk_blocks,
            "candidate_block_size": self.candidate_block_size,
            "window_format": self.window_format,
            "index_key_format": self.index_key_format,
        }


@record(kw_only=True)
class Descriptor:
    """One CSA/HCA layer node as the gate sees it (CONTRACT §1).

    ``cache_format`` stays a plain string so an unknown name can be carried to the
    gate and refused there (UnknownCacheFormat) instead of failing in parsing.
    """

    layer_id: int
    compression_ratio: int
    cache_format: str = CacheFormat.FP8_E4M3_BLOCK64.value
    num_heads: int
    head_dim: int = FROZEN_HEAD_DIM
    qk_rope_head_dim: int = FROZEN_ROPE_DIM
    index_num_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0
    window: int = 128
    max_seq_len: int
    batch: int = 1
    device_count: int = 1
    present_edges: frozenset[StateEdge] = frozenset(StateEdge)
    is_mtp: bool = False
    sharing: Sharing | None = None  # cross-layer shared state (ratios 0/1/2); None = V4's per-layer state

    @property
    def mode(self) -> LayerMode | None:
        """Window only, own source or reader: None for a layer without a source topology (V4)."""
        s = self.sharing
        if s is None:
            return None
        if self.compression_ratio == 0:
            return LayerMode.WINDOW_ONLY
        return LayerMode.OWN_SOURCE if self.layer_id in s.kv_sources else LayerMode.READER

    @property
    def is_index_source(self) -> bool:
        return self.sharing is not None and self.layer_id in self.sharing.index_sources

    def with_(self, **changes: object) -> "Descriptor":
        return replace(self, **changes)

    @property
    def known_format(self) -> CacheFormat | None:
        try:
            return CacheFormat(self.cache_format)
        except ValueError:
            return None


DESCRIPTOR_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Descriptor) if f.name != "sharing")
"""The scalar fields (a spec's defaults, the report's descriptor): ``sharing`` is structured and
shown on its own, only where a layer has it, so V4 documents are unchanged."""
