"""``bf16-reference``: the accounting behind the published DeepSeek-V4 figures.

Source: docs/DEEPSEEK_V4.md, "Published figures, and how each is counted" (vLLM's
"9.62 GiB vs 83.9 GiB" for V4-Pro at 1,048,576 tokens). Not engine code:
BF16 records (head_dim x 2 = 1024 B) and BF16 index keys (index_head_dim x 2 = 256 B),
the 128-token window on compressed layers only, no carries, no scratch, nothing for
SWA-only or MTP layers. Classes: records -> compressed, window -> dense_ring,
index keys -> index.

This module also holds the published comparison baselines (V3.2) and the model-card
compressed-cache share, which are not per-group layouts but use the same accounting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fractions import Fraction


from csa_plan.planner.descriptor import Descriptor
from csa_plan.planner.layout import BF16_BYTES, ZERO, GroupBytes
from csa_plan.planner.profile import LayoutProfile
from csa_plan.planner.units import ceil_div

_SRC = "docs/DEEPSEEK_V4.md 'Published figures, and how each is counted' (published-figure accounting, not engine code)"

# V3.2 baseline (docs/DEEPSEEK_V4.md): 61 layers x L x (576 + 128) x 2 B in BF16 —
# 576 = MLA latent 512 + RoPE 64, 128 = indexer key width.
V32_LAYERS = 61
V32_MLA_WIDTH = 576
V32_INDEX_WIDTH = 128
# Model-card share (docs/DEEPSEEK_V4.md): V4 compressed caches with 584-B records and
# 68-B FP4 index keys against V3.2 in FP8 at 61 x (656 + 132) B per token.
CARD_RECORD_BYTES = 584
CARD_INDEX_KEY_BYTES = 68
V32_FP8_TOKEN_BYTES = 656
V32_FP8_INDEX_BYTES = 132


def bf16_group_bytes(d: Descriptor, query_len: int = 1) -> GroupBytes:
    b = d.batch
    records = ceil_div(d.max_seq_len, d.compression_ratio)
    width = d.head_dim * BF16_BYTES
    index = b * records * d.index_head_dim * BF16_BYTES if d.compression_ratio == 4 else 0
    return GroupBytes(
        compressed_bytes=b * records * width,
        index_bytes=index,
        dense_ring_bytes=b * d.window * width,
    )


def bf16_swa_bytes(d: Descriptor) -> GroupBytes:
    """The published accounting keeps the window on compressed layers only."""
    return ZERO


BF16_REFERENCE = LayoutProfile(
    name="bf16-reference",
    summary="published-figure accounting: BF16 records and index keys, window on compressed layers only, no carries",
    group_bytes=bf16_group_bytes,
    swa_bytes=bf16_swa_bytes,
    sources=(_SRC,),
)


def v32_bf16_baseline_bytes(max_seq_len: int, num_layers: int = V32_LAYERS) -> int:
    """DeepSeek-V3.2 KV at L tokens under the same BF16 accounting."""
    return num_layers * max_seq_len * (V32_MLA_WIDTH + V32_INDEX_WIDTH) * BF16_BYTES


def compressed_cache_share(ratios: tuple[int, ...]) -> Fraction:
    """Model-card share: V4 compressed caches per token over V3.2 FP8 per token (exact).

    Only ratio-4 and ratio-128 layers contribute (records, plus FP4 index keys on
    ratio 4); windows, carries and MTP are out of this accounting.
    """
    from fractions import Fraction  # here, not at import: fractions pulls in decimal (start-up)

    per_token = Fraction(0)
    for r in ratios:
        if r == 4:
            per_token += Fraction(CARD_RECORD_BYTES + CARD_INDEX_KEY_BYTES, 4)
        elif r == 128:
            per_token += Fraction(CARD_RECORD_BYTES, 128)
    return per_token / (V32_LAYERS * (V32_FP8_TOKEN_BYTES + V32_FP8_INDEX_BYTES))
