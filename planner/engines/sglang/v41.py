"""SGLang 0.5.23's pools for DeepSeek-V4.1 (cross-layer shared compressed state, ratios 1 and 2).

Why a module of its own: V4.1's pools differ from V4's in who owns storage and in what a record
is, and both are decided by rules of the release that csa-plan must not mix into the V4 path
(file:line under ``sglang/``, from the 0.5.23 wheel):

* Owners (``srt/mem_cache/deepseek_v4_memory_pool.py:94-115`` ``collect_sources_by_ratio``): for
  ratios 1 and 2 only the ``kv_source_layer_ids`` own a compressed cache and its index keys;
  every other ratio-1/2 layer reads the nearest source below it. Windows stay on every layer.
* Record layouts (``kernels/ops/attention/dsv4/kv_layout.py`` ``KVLayout``): ``V4`` 584 B per
  token padded per page to 576, ``V41`` 528 B (MXFP8) padded to 512, ``V41_FP4`` 288 B (NVFP4)
  padded to 256. ``select_dsv4_kv_layout`` (``deepseek_v4_memory_pool.py:202-234``) keeps
  ``SGLANG_DSV4_KV_LAYOUT`` = ``v4`` (``srt/environ.py:1754``) unless the attention backend is
  ``flashmla_mega``, which selects ``V41`` windows and (``resolve_compressed_kv_layout``,
  ``:174-199``) ``V41_FP4`` ratio-1/2 caches. ``flashmla_mega`` is the default
  (``srt/arg_groups/deepseek_v4_hook.py:45-60``) only for V4.1 on SM100 with fp8_e4m3 KV and
  *no attention tensor parallelism* ("MegaAttention pads each rank to a 64-head tile under
  attention TP"): attention TP is SGLang's tp // dp-attention size (``srt/runtime_context.py:73-76``),
  i.e. csa-plan's ``--tp`` (csa-plan's ``--dp`` is SGLang's DP attention, its ``--tp`` tp x dp).
  So 8 x B200 at TP 8 without DP attention runs ``flashmla`` with V4 records (1,632.5 B/token),
  and the 890 B/token of DeepSeek's reference needs DP attention (attention TP 1).
* Index keys of ratios 1/2: always FP4, 68 B (``srt/model_executor/pool_configurator.py:1170-1172``,
  pools built with ``force_fp4=True``, ``deepseek_v4_memory_pool.py:1632-1644``), in pages of
  ``DSV41_INDEX_PAGE_SIZE`` slots (``:530-542``: 128 where DeepGEMM has the paged sparse MQA
  logits kernels, i.e. on Blackwell; 64 otherwise).
* Cost per full token per ratio-r source: (paged record + 68) / r (``pool_configurator.py:1390-1403``);
  the reserved pages on top (``_get_low_ratio_kv_padding_bytes``, ``:1406-1435``).
* Ratio-2 carry (``pool_configurator.py:1530-1543``, ``deepseek_v4_memory_pool.py:60-82``): an fp32
  (kv, score) ring per request slot per ratio-2 source, 2 rows, or ``1 << (drafts + 1).bit_length()``
  with drafts; ``size + ring + 1`` rows padded to 2, 2 x 512 x 4 B each.
* ``--enable-encoder-swa-bounded-replay`` (``pool_configurator.py:1198-1240``): the target windows
  move into per-request rings (fixed bytes), the paged SWA pool and its per-token cost go to 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from csa_plan.planner.units import ceil_div, round_up

SRC = "sglang-0.5.23 sglang"


@dataclass(frozen=True)
class KvLayout:
    """One ``KVLayout`` of ``kernels/ops/attention/dsv4/kv_layout.py``: bytes per token and the
    page-stride padding unit."""

    name: str
    bytes_per_token: int
    page_align: int

    def page_bytes(self, slots: int) -> int:
        """KVLayout.page_bytes: slots x bytes per token, rounded up to page_align."""
        return round_up(slots * self.bytes_per_token, self.page_align)


V4 = KvLayout("V4", 576 + 8, 576)  # 448 fp8 + 64 bf16 RoPE, 7 ue8m0 (+1 pad)
V41 = KvLayout("V41", 512 + 16, 512)  # 512 fp8 incl. RoPE, 16 ue8m0
V41_FP4 = KvLayout("V41_FP4", 256 + 32, 256)  # 512 e2m1, 32 e4m3 scales
LOW_RATIO_INDEX_BYTES = 128 // 2 + 128 // 32  # get_dsv4_indexer_bytes_per_token(128, fp4=True) = 68
C2_STATE_ROW_BYTES = 2 * 512 * 4  # fp32 (kv, score) of the 512-wide latent
KV_BYTES = 448 + 64 * 2 + 8  # DSV4PoolConfigurator.kv_bytes (pool_configurator.py:1108): the replay ring row


def c2_ring_rows(draft_tokens: int) -> int:
    """get_compress_state_ring_size(2, drafts): a pair, or a power of two above the draft window."""
    return 2 if draft_tokens <= 0 else 1 << (draft_tokens + 1).bit_length()


def index_page_slots(capability: tuple[int, int]) -> int:
    """DSV41_INDEX_PAGE_SIZE: 128 with DeepGEMM's paged sparse MQA logits (Blackwell), else 64."""
    return 128 if capability[0] == 10 else 64


def attention_backend(model_is_v41: bool, capability: tuple[int, int], kv_cache_dtype: str,
                      attention_tp: int) -> tuple[str, str]:
    """_default_dsv4_attention_backend: (backend, why)."""
    rule = f"{SRC}/srt/arg_groups/deepseek_v4_hook.py:45-60"
    if not model_is_v41:
        return "flashmla", rule
    if capability[0] != 10:
        return "flashmla", f"{rule} (not SM100: V4 layout, {SRC}/srt/environ.py:1754)"
    if kv_cache_dtype != "fp8_e4m3":
        return "flashmla", f"{rule} (kv cache {kv_cache_dtype})"
    if attention_tp > 1:
        return "flashmla", (f"{rule}: attention TP {attention_tp} > 1 (MegaAttention pads each rank to a 64-head "
                            "tile under attention TP), so the V4 layout; DP attention (attention TP 1) selects "
                            "flashmla_mega")
    return "flashmla_mega", f"{rule} (V4.1, SM100, fp8_e4m3, attention TP 1)"


def layouts(backend: str) -> tuple[KvLayout, KvLayout]:
    """(window layout, ratio-1/2 layout): select_dsv4_kv_layout + resolve_compressed_kv_layout."""
    if backend == "flashmla_mega":
        return V41, V41_FP4
    return V4, V4


@dataclass(frozen=True)
class V41Pools:
    """What decides V4.1's pool bytes under SGLang 0.5.23, resolved once at configure."""

    backend: str
    backend_source: str
    window: KvLayout
    compressed: KvLayout
    index_page: int
    sources: tuple[tuple[int, int], ...]  # (ratio, owner layers) in collect_sources_by_ratio order (1, 2)
    layers_total: int  # every main layer of the stage keeps a window
    draft_layers: int  # DSpark stages (window only)
    encoder_replay: bool

    def owners(self, ratio: int) -> int:
        return dict(self.sources).get(ratio, 0)

    def paged_bytes_per_token(self, page: int, ratio: int = 0) -> float:
        """_get_paged_kv_bytes_per_token: a page's padded bytes over its slots."""
        if ratio:
            slots = page // ratio
            return self.compressed.page_bytes(slots) / slots
        return self.window.page_bytes(page) / page

    def bytes_per_full_token(self, page: int) -> float:
        """sum over sources of _compressed_bytes_per_full_token: (paged record + 68) / r."""
        return sum((self.paged_bytes_per_token(page, r) + LOW_RATIO_INDEX_BYTES) / r * n for r, n in self.sources)

    def bytes_per_swa_token(self, page: int) -> float:
        """_get_bytes_per_swa_token: every layer's paged window (no c4 state in V4.1); 0 under encoder
        replay (the target windows live in request rings, DSpark's ring is budgeted there too)."""
        if self.encoder_replay:
            return 0.0
        return self.paged_bytes_per_token(page) * self.layers_total

    def padding_bytes(self, full_tokens: int, page: int) -> float:
        """_get_low_ratio_kv_padding_bytes: a reserved logical page of records and the index pool's pages."""
        total = 0.0
        for r, n in self.sources:
            main = page * self.paged_bytes_per_token(page, r)
            index_size = (full_tokens + page) // r
            slots = ceil_div(index_size + self.index_page, self.index_page) * self.index_page
            total += (main + (slots - full_tokens // r) * LOW_RATIO_INDEX_BYTES) * n
        return total

    def c2_state_bytes(self, req_slots: int, draft_tokens: int) -> int:
        """_get_c2_state_fixed_bytes: one ring per request slot per ratio-2 source."""
        n = self.owners(2)
        if not n:
            return 0
        ring = c2_ring_rows(draft_tokens)
        return round_up(req_slots * ring + ring + 1, 2) * C2_STATE_ROW_BYTES * n

    def c2_state_rows(self, req_slots: int, draft_tokens: int) -> int:
        ring = c2_ring_rows(draft_tokens)
        return round_up(req_slots * ring + ring + 1, 2)

    def request_window_bytes(self, mrr: int, chunked_prefill: int, page: int, window: int, draft_tokens: int,
                             head_dim: int) -> int:
        """pool_configurator.py:1208-1235: the encoder-replay rings (request windows, scratch, the DSpark ring)."""
        if not self.encoder_replay:
            return 0
        slots = mrr + 1
        extra = draft_tokens  # online_c128_mtp_max_draft_tokens = max_speculative_num_draft_tokens() or 0
        capacity = round_up(window + extra, page)
        scratch = max(chunked_prefill, slots * max(128, extra)) + slots * 128 + page
        draft_ring = ceil_div(window + extra, page) * page
        draft_layers = self.draft_layers if draft_tokens else 0  # DSpark's ring only when it drafts (:1203-1207)
        return ((slots * capacity + page) * self.layers_total * (KV_BYTES + 16) + 4 * scratch * (KV_BYTES + 16)
                + slots * 3 * 16 * head_dim * 8 + (slots * draft_ring + page) * draft_layers * KV_BYTES)

    def index_pages(self, full_tokens: int, page: int, ratio: int) -> int:
        """The ratio's index pool pages: (full + page) // r slots, one spare index page."""
        return ceil_div((full_tokens + page) // ratio + self.index_page, self.index_page)
