"""``vllm`` / ``vllm-fp4``: vLLM's paged DeepSeek-V4 layout (fp8_ds_mla KV cache).

Sources (vllm-project/vllm; commit beside each file):
- vllm/models/deepseek_v4/attention.py @0484480bc73081c4a5133b3cb53018323fce632d
  (``DeepseekV4Attention.get_kv_cache_spec``, ``DeepseekV4Indexer.__init__``)
- vllm/v1/kv_cache_interface.py @0484480bc73081c4a5133b3cb53018323fce632d
  (``MLAAttentionSpec.storage_block_size``, ``_apply_alignment_padding``,
  ``FullAttentionSpec.max_memory_usage_bytes``, ``SlidingWindowSpec.max_admission_blocks_per_request``)
- vllm/models/deepseek_v4/compressor.py @01cc1d3e7640a8ada37f99ca60cc3ee66490cf38
  (``CompressorStateCache``)
- vllm/v1/attention/backends/mla/sparse_swa.py @03dc564956172b5b2835be7a84ddde5de1d5dba6
  (``DeepseekV4SWACache``, ``DeepseekSparseSWABackend``)

Per request, per layer (``cdiv`` = ceil division):
- compressed: ``cdiv(L, 256)`` blocks; a block's page holds ``256 // ratio`` 584-B
  records, rounded up to a multiple of 576 B (C4: 37,440 B; C128: 1,728 B);
- index (ratio 4): same blocks, ``64 x 132`` (FP8) or ``64 x 68`` (FP4) B per page,
  rounded up to 576 (8,640 / 4,608 B);
- carry / index_carry: the fp32 compressor-state pools, a sliding window of
  ``coff x ratio`` token slots (8 for C4, 128 for C128) in blocks of 4 (C4) or 8
  (C128) slots, ``2 x coff x head_dim x 4`` B per slot, pages rounded up to 576;
  held blocks = ``cdiv(min(window - 1 + query_len, L), block) + 1``;
- dense_ring: the SWA cache of every layer, 64-token blocks of 584-B rows rounded up
  to 576 (37,440 B), held blocks by the same sliding-window rule;
- scratch: 0 — vLLM's workspaces are per batch, sized by max_num_batched_tokens,
  not per request.
The engine stores its own format; ``--kv-format`` does not change these widths.
"""

from __future__ import annotations

from csa_plan.planner.descriptor import Descriptor
from csa_plan.planner.layout import FP32_BYTES, GroupBytes
from csa_plan.planner.engines.base import indexer_variants
from csa_plan.planner.units import ceil_div, round_up

_ATTN = "vllm-project/vllm vllm/models/deepseek_v4/attention.py @0484480b"
_SPEC = "vllm-project/vllm vllm/v1/kv_cache_interface.py @0484480b"
_COMP = "vllm-project/vllm vllm/models/deepseek_v4/compressor.py @01cc1d3e"
_SWA = "vllm-project/vllm vllm/v1/attention/backends/mla/sparse_swa.py @03dc5649"

RECORD_BYTES = 584  # attention.py get_kv_cache_spec: state_content_bytes=584 (448 NoPE + 128 RoPE + 8 scale)
PAGE_ALIGNMENT_BYTES = 576  # attention.py: alignment=576 for fp8_ds_mla; kv_cache_interface.py _apply_alignment_padding: round_up(page, alignment)
BLOCK_TOKENS = 256  # sparse_swa.py DeepseekSparseSWABackend.get_preferred_block_size -> 256; compressor.py: "KV block shape [256//4, head_dim] = [64, 584]"
# kv_cache_interface.py MLAAttentionSpec.storage_block_size = block_size // compress_ratio (records per page)
INDEX_FP8_KEY_BYTES = 132  # attention.py DeepseekV4Indexer: head_dim + head_dim // 128 * 4 = 128 fp8 + 4 fp32 scale
INDEX_FP4_KEY_BYTES = 68  # attention.py DeepseekV4Indexer: head_dim // 2 + head_dim // MXFP4_BLOCK_SIZE(32) = 64 + 4
STATE_BLOCK_SLOTS = {4: 4, 128: 8}  # compressor.py CompressorStateCache: block_size = 4 (ratio 4) / 8 (ratio 128)
STATE_SLIDING_WINDOW_FACTOR = {4: 2, 128: 1}  # compressor.py: coff = 1 + (ratio == 4); sliding_window = coff * ratio
SWA_BLOCK_TOKENS = 64  # sparse_swa.py DeepseekV4SWACache: self.block_size = 64
SWA_ROW_BYTES = 584  # sparse_swa.py get_kv_cache_shape: (num_blocks, block_size, 584) for fp8_ds_mla


def sliding_blocks(window: int, block: int, query_len: int, max_seq_len: int) -> int:
    """kv_cache_interface.py SlidingWindowSpec.max_admission_blocks_per_request, with the
    in-flight tokens of one step = query_len: cdiv(min(window - 1 + q, L), block) + 1."""
    return ceil_div(min(window - 1 + query_len, max_seq_len), block) + 1


def _coff(ratio: int) -> int:
    return STATE_SLIDING_WINDOW_FACTOR[ratio]


def compressed_page_bytes(ratio: int) -> int:
    return round_up(BLOCK_TOKENS // ratio * RECORD_BYTES, PAGE_ALIGNMENT_BYTES)


def index_page_bytes(key_bytes: int) -> int:
    return round_up(BLOCK_TOKENS // 4 * key_bytes, PAGE_ALIGNMENT_BYTES)


def state_slot_bytes(ratio: int, head_dim: int) -> int:
    """compressor.py: state_dim = 2 * coff * head_dim (kv_state + score_state), fp32."""
    return 2 * _coff(ratio) * head_dim * FP32_BYTES


def state_page_bytes(ratio: int, head_dim: int) -> int:
    return round_up(STATE_BLOCK_SLOTS[ratio] * state_slot_bytes(ratio, head_dim), PAGE_ALIGNMENT_BYTES)


def swa_page_bytes() -> int:
    return round_up(SWA_BLOCK_TOKENS * SWA_ROW_BYTES, PAGE_ALIGNMENT_BYTES)


def _state_bytes(ratio: int, head_dim: int, query_len: int, max_seq_len: int) -> int:
    blocks = sliding_blocks(_coff(ratio) * ratio, STATE_BLOCK_SLOTS[ratio], query_len, max_seq_len)
    return blocks * state_page_bytes(ratio, head_dim)


def _swa_ring(d: Descriptor, query_len: int) -> int:
    return sliding_blocks(d.window, SWA_BLOCK_TOKENS, query_len, d.max_seq_len) * swa_page_bytes()


def _group(key_bytes: int):
    def group_bytes(d: Descriptor, query_len: int = 1) -> GroupBytes:
        ratio, b = d.compression_ratio, d.batch
        blocks = ceil_div(d.max_seq_len, BLOCK_TOKENS)
        index = index_carry = 0
        if ratio == 4:
            index = b * blocks * index_page_bytes(key_bytes)
            index_carry = b * _state_bytes(4, d.index_head_dim, query_len, d.max_seq_len)
        return GroupBytes(
            compressed_bytes=b * blocks * compressed_page_bytes(ratio),
            carry_bytes=b * _state_bytes(ratio, d.head_dim, query_len, d.max_seq_len),
            index_bytes=index,
            index_carry_bytes=index_carry,
            dense_ring_bytes=b * _swa_ring(d, query_len),
        )

    def padding_bytes(d: Descriptor, query_len: int = 1) -> int:
        ratio, b = d.compression_ratio, d.batch
        content = ceil_div(d.max_seq_len, ratio) * RECORD_BYTES
        content += _coff(ratio) * ratio * state_slot_bytes(ratio, d.head_dim)
        if ratio == 4:
            content += ceil_div(d.max_seq_len, 4) * key_bytes
            content += 8 * state_slot_bytes(4, d.index_head_dim)
        content += min(d.window, d.max_seq_len) * SWA_ROW_BYTES
        return group_bytes(d, query_len).total_bytes - b * content

    return group_bytes, padding_bytes


def vllm_swa_bytes(d: Descriptor) -> GroupBytes:
    """Every vLLM V4 attention layer (SWA-only and MTP too) owns a DeepseekV4SWACache."""
    return GroupBytes(dense_ring_bytes=d.batch * _swa_ring(d, 1))


def vllm_swa_padding(d: Descriptor) -> int:
    return vllm_swa_bytes(d).total_bytes - d.batch * min(d.window, d.max_seq_len) * SWA_ROW_BYTES


_SOURCES = (_ATTN, _SPEC, _COMP, _SWA)
VLLM, VLLM_FP4 = indexer_variants(
    "vllm",
    "vLLM fp8_ds_mla: 584-B records, 256-token blocks, pages rounded to 576 B, FP8 indexer (132 B), fp32 state pools",
    "vLLM as above with the MXFP4 indexer cache (68 B per key)",
    _group, vllm_swa_bytes, vllm_swa_padding, _SOURCES, INDEX_FP8_KEY_BYTES, INDEX_FP4_KEY_BYTES,
)
