"""The state-group descriptor: a layer's declared properties, nothing else.

The gate reads these fields and never a model name or a shape allow-list, so any
model that declares the same properties is judged the same way.
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

    def with_(self, **changes: object) -> "Descriptor":
        return replace(self, **changes)

    @property
    def known_format(self) -> CacheFormat | None:
        try:
            return CacheFormat(self.cache_format)
        except ValueError:
            return None


DESCRIPTOR_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Descriptor))
