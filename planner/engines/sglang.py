"""``sglang`` / ``sglang-fp4``: SGLang's six DeepSeek-V4 pools (CUDA, fp8, non-unified).

Sources (sgl-project/sglang):
- python/sglang/srt/mem_cache/deepseek_v4_memory_pool.py @007bddd4a95b44d3c8cd22c8a24d0ee1455955fd
  (``DeepSeekV4SingleKVPool``, ``DeepSeekV4IndexerPool``, ``get_dsv4_indexer_bytes_per_token``,
  ``get_compress_state_ring_size``, ``get_swa_ring_size``, ``DeepSeekV4TokenToKVPool``)
- python/sglang/srt/mem_cache/deepseek_v4_compress_state.py @067c8c86f49f6da8bf8c569039c6468d75fbf9d3
  (``CompressStatePool``)

The six pools and the classes they map to:
- full -> (the token-index space; it holds no per-layer bytes of its own in this layout)
- SWA -> dense_ring: a ring of ``sliding_window`` 584-B rows per request per layer
  (``get_swa_ring_size``), page padded to a multiple of 576 B;
- c4 / c128 -> compressed: pages of ``page_size // ratio`` 584-B records, padded to a
  multiple of 576 B (``_init_compressed_pools``: page_size // ratio; ``create_buffer``:
  ceil_div(page_size * 584, 576) * 576); the c4 indexer pool -> index, pages of
  ``page_size // 4`` keys of 132 B (FP8) or 68 B (FP4), not padded;
- c4 state -> carry (+ the c4 indexer state -> index_carry): a ring of 8 fp32 slots of
  ``2 x 2 x head_dim`` values (``CompressStatePool``: last_dim = 2*(1+overlap)*head_dim);
- c128 state -> carry: a ring of 128 slots of ``2 x head_dim`` fp32 per *request slot*
  (``c128_state_pool_size = max(..., num_req_slots * c128_ring_size)``): a fixed cost
  for every running-request slot whatever the request's length.
scratch: 0 (per-batch workspaces, not per request).

Assumptions (not fixed by the source read): the model-wide ``page_size`` is 256
tokens — SGLang requires a multiple of 128 so that a c128 page holds whole records
(``K_PER_BLOCK = {4: 32, 128: 1}`` per 128 tokens); offline C128 compression (online
C128 keeps 1 slot of 3 x head_dim instead of 128); no speculative decoding (rings of
8/128, SWA ring = sliding_window); the SWA ring is one padded page per layer.
"""

from __future__ import annotations

from csa_plan.planner.descriptor import Descriptor
from csa_plan.planner.layout import FP32_BYTES, GroupBytes
from csa_plan.planner.engines.base import indexer_variants
from csa_plan.planner.units import ceil_div, round_up

_POOL = "sgl-project/sglang python/sglang/srt/mem_cache/deepseek_v4_memory_pool.py @007bddd4"
_STATE = "sgl-project/sglang python/sglang/srt/mem_cache/deepseek_v4_compress_state.py @067c8c86"

RECORD_BYTES = 448 + 64 * 2 + 448 // 64 + 1  # deepseek_v4_memory_pool.py get_bytes_per_token: nope fp8 + rope bf16 + scales + scale_pad = 584
PAGE_ALIGNMENT_BYTES = 576  # deepseek_v4_memory_pool.py create_buffer: ceil_div(bytes_per_page_non_padded, 576) * 576
PAGE_TOKENS = 256  # assumption: any multiple of 128 is legal (K_PER_BLOCK {4: 32, 128: 1}); 256 matches vLLM's block
INDEX_FP8_KEY_BYTES = 128 + 128 // 128 * 4  # get_dsv4_indexer_bytes_per_token: index_head_dim + index_head_dim // 128 * 4 = 132
INDEX_FP4_KEY_BYTES = 128 // 2 + 128 // 32  # get_dsv4_indexer_bytes_per_token (fp4): index_head_dim // 2 + index_head_dim // 32 = 68
STATE_RING_SLOTS = {4: 8, 128: 128}  # get_compress_state_ring_size: 8 if ratio == 4 else 128 (not speculative, offline C128)
STATE_OVERLAP = {4: 1, 128: 0}  # CompressStatePool(overlap=ratio == 4): last_dim = 2 * (1 + overlap) * head_dim


def compressed_page_bytes(ratio: int, page_tokens: int = PAGE_TOKENS) -> int:
    return round_up(page_tokens // ratio * RECORD_BYTES, PAGE_ALIGNMENT_BYTES)


def index_page_bytes(key_bytes: int, page_tokens: int = PAGE_TOKENS) -> int:
    """DeepSeekV4IndexerPool._create_buffer: page_bytes = page_size * bytes_per_token (no padding)."""
    return page_tokens // 4 * key_bytes


def state_ring_bytes(ratio: int, head_dim: int) -> int:
    return STATE_RING_SLOTS[ratio] * 2 * (1 + STATE_OVERLAP[ratio]) * head_dim * FP32_BYTES


def swa_ring_bytes(window: int) -> int:
    return round_up(window * RECORD_BYTES, PAGE_ALIGNMENT_BYTES)


def _group(key_bytes: int):
    def group_bytes(d: Descriptor, query_len: int = 1) -> GroupBytes:
        ratio, b = d.compression_ratio, d.batch
        pages = ceil_div(d.max_seq_len, PAGE_TOKENS)
        index = index_carry = 0
        if ratio == 4:
            index = b * pages * index_page_bytes(key_bytes)
            index_carry = b * state_ring_bytes(4, d.index_head_dim)
        return GroupBytes(
            compressed_bytes=b * pages * compressed_page_bytes(ratio),
            carry_bytes=b * state_ring_bytes(ratio, d.head_dim),
            index_bytes=index,
            index_carry_bytes=index_carry,
            dense_ring_bytes=b * swa_ring_bytes(d.window),
        )

    def padding_bytes(d: Descriptor, query_len: int = 1) -> int:
        ratio = d.compression_ratio
        content = ceil_div(d.max_seq_len, ratio) * RECORD_BYTES + state_ring_bytes(ratio, d.head_dim)
        if ratio == 4:
            content += ceil_div(d.max_seq_len, 4) * key_bytes + state_ring_bytes(4, d.index_head_dim)
        content += d.window * RECORD_BYTES
        return group_bytes(d, query_len).total_bytes - d.batch * content

    return group_bytes, padding_bytes


def sglang_swa_bytes(d: Descriptor) -> GroupBytes:
    return GroupBytes(dense_ring_bytes=d.batch * swa_ring_bytes(d.window))


def sglang_swa_padding(d: Descriptor) -> int:
    return d.batch * (swa_ring_bytes(d.window) - d.window * RECORD_BYTES)


_SOURCES = (_POOL, _STATE, "assumed: page_size 256, offline C128, no speculative decoding")
SGLANG, SGLANG_FP4 = indexer_variants(
    "sglang",
    "SGLang six pools: 584-B records in 576-padded pages of 256 tokens, FP8 indexer, c128 state per request slot",
    "SGLang as above with the FP4 indexer pool (68 B per key)",
    _group, sglang_swa_bytes, sglang_swa_padding, _SOURCES, INDEX_FP8_KEY_BYTES, INDEX_FP4_KEY_BYTES,
)
