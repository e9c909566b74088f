"""``sglang-0.5.23``: SGLang 0.5.23's DeepSeek-V4 pools on CUDA (H200-class defaults).

From the release (file:line are pointers into sglang-0.5.23, under ``sglang/srt/``):

* Pools (``mem_cache/deepseek_v4_memory_pool.py`` ``DeepSeekV4TokenToKVPool``): a paged SWA
  pool of every main layer (256-token pages, ``KVLayout.V4`` 584 B per token, page padded
  to 576: 149,760 B per layer per page), the c4 and c128 KV pools (page = 256 // ratio
  slots: 37,440 / 1,728 B), the c4 indexer pool (64 keys x 132 B FP8 or 68 B FP4, not
  padded), the c4 compressor and indexer states *per SWA page* (8 rows per page, fp32,
  last dim 2 x 2 x head_dim) and the c128 state *per request slot* (128 rows x 2 x 512 fp32,
  ``max_running_requests + 1`` slots). Every paged pool allocates
  ``cdiv(size + 256, page)`` pages (``_num_dsv4_physical_kv_pages``: one logical page spare);
  state pools hold ``size + ring + 1`` rows padded to the ratio (``CompressStatePool``).
* Sizing (``model_executor/pool_configurator.py`` ``DSV4PoolConfigurator``, cap mode, the
  default when max_running_requests is set — 256 for V4, ``arg_groups/deepseek_v4_hook.py``):
  the SWA pool is ``compute_swa_request_cap`` (per request: window + eviction interval x
  drafts + page + decode allocation = 768 tokens) x max_running_requests + 2 chunks in
  flight x chunked_prefill_size + page, plus prefix-tail headroom 4 x max_running_requests x
  (window + page), page-aligned; those SWA tokens and the c128 state are fixed bytes; the
  rest of the KV memory is divided by bytes_per_full_token (compressed + indexer pages per
  token; the NVIDIA FP4 indexer keeps the FP8 estimate) into max_total_num_tokens, page
  floored. Float arithmetic is done in the engine's own order.
* A decoding request holds cdiv(L, 256) full pages in the c4/c128/indexer pools, 2 SWA
  pages after eviction (``schedule_batch.py`` ~4047-4066, ``mem_cache/common.py`` ~75-130:
  evict once 128 tokens left the window, keep ``ceil_align(max(window, page), page)``), the
  c4 state rows of those pages, and its c128 state slot; SGLang's own per-request SWA
  budget is 768 tokens (3 pages).
* Speculative decoding (``--num-speculative-tokens N`` = speculative_num_draft_tokens,
  EAGLE/MTP top-k 1): rings of 16 / 256 rows, per-token bytes inflated by (layers + 1) /
  layers for the draft worker, and a per-request SWA budget of window + 128 x N + page +
  2 x N (the overlap allocator).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from csa_plan.planner.engines.engine import (EngineModel, EnginePlan, EngineRefusal, EngineRefused, Footprint,
                                              Phase, PoolSize, PoolSizing, PoolUse, Resolved, TpRule)
from csa_plan.planner.engines.settings import EngineSettings, GpuTarget, check_accepted, known, target_of
from csa_plan.planner.engines.sglang.v41 import (LOW_RATIO_INDEX_BYTES, C2_STATE_ROW_BYTES, V41Pools,
                                                  attention_backend, c2_ring_rows, index_page_slots, layouts)
from csa_plan.planner.layout import FP32_BYTES, StateClass
from csa_plan.planner.units import MiB, ceil_div, round_up

ENGINE = "sglang-0.5.23"
SRC = "sglang-0.5.23 sglang/srt"

# arg_groups/fields/model.py kv_cache_dtype choices: anything else is bad input (a known value the V4
# pools do not hold is the typed refusal)
CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")
KV_BYTES_PER_TOKEN = 448 + 64 * 2 + 448 // 64 + 1  # deepseek_v4_memory_pool.py get_bytes_per_token (V4 layout): 584
PAGE_ALIGN = 576  # kernels/ops/attention/dsv4/kv_layout.py KVLayout.V4 page_align
PAGE_TOKENS = 256  # arg_groups/model_overrides/deepseek_v4.py: page_size 256 on CUDA
DEFAULT_MAX_RUNNING = 256  # arg_groups/deepseek_v4_hook.py
EVICTION_INTERVAL = 128  # environ.py SGLANG_SWA_EVICTION_INTERVAL
MAX_PREFILL_TOKENS = 16384  # server args default max_prefill_tokens
ACCEPTS = ("gpu", "page_size", "kv_cache_dtype", "indexer_kv_dtype", "chunked_prefill_size", "max_running_requests",
           "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens", "mem_fraction_static",
           "moe_runner_backend", "shared_expert_tp1",
           "cuda_graph_max_bs", "disable_cuda_graph", "moe_a2a_backend",  # these three: start-up memory only
           "enable_encoder_swa_bounded_replay",
           "load_balance_method")  # the replay's DP dispatch only (serving/balancer.py)


def _refuse(rule: str, setting: str, expected: str, actual: str, message: str) -> EngineRefused:
    return EngineRefused(EngineRefusal(ENGINE, rule, setting, expected, actual, f"{ENGINE}: {message} ({rule})"))


def page_bytes(slots: int) -> int:
    """KVLayout.V4.page_bytes: slots x 584 rounded up to 576."""
    return round_up(slots * KV_BYTES_PER_TOKEN, PAGE_ALIGN)


def physical_pages(size: int, page: int, logical_page: int = PAGE_TOKENS) -> int:
    """_num_dsv4_physical_kv_pages: the allocator reserves one page at the logical page size."""
    return ceil_div(size + logical_page, page)


def indexer_key_bytes(index_head_dim: int, fp4: bool) -> int:
    """get_dsv4_indexer_bytes_per_token."""
    return index_head_dim // 2 + index_head_dim // 32 if fp4 else index_head_dim + index_head_dim // 128 * 4


def moe_runner(runner: str | None, gpu: GpuTarget) -> Resolved:
    """--moe-runner-backend: the runner decides how the FP4 experts are sharded and padded
    (planner/weights/rules.py sglang_runner_rules); Marlin's MXFP4 path needs sm_90 or sm_120
    (layers/quantization/mxfp4_marlin_moe.py process_weights_after_loading)."""
    from csa_plan.planner.weights.rules import SGLANG_MOE_RUNNERS

    name = runner or "auto"
    if name not in SGLANG_MOE_RUNNERS:
        raise _refuse(f"{SRC}/arg_groups/choices.py MOE_RUNNER_BACKEND_CHOICES (modelled: "
                      f"{', '.join(SGLANG_MOE_RUNNERS)})", "--moe-runner-backend", " | ".join(SGLANG_MOE_RUNNERS),
                      name, f"--moe-runner-backend {name!r} is not a runner csa-plan models for DeepSeek-V4")
    if name == "marlin" and gpu.capability not in ((9, 0), (12, 0)):
        raise _refuse(f"{SRC}/layers/quantization/mxfp4_marlin_moe.py process_weights_after_loading",
                      "--moe-runner-backend", "marlin on sm_90 or sm_120", f"marlin on {gpu.sm} ({gpu.name})",
                      f"MXFP4 Marlin requires SM90 or SM120; {gpu.name} is {gpu.sm}")
    if runner is None:
        return Resolved("--moe-runner-backend", "flashinfer_mxfp4", f"auto -> flashinfer_mxfp4 for FP4 experts on "
                        f"sm_90/sm_100/sm_120 ({SRC}/arg_groups/model_overrides/deepseek_v4.py:66-88)")
    return Resolved("--moe-runner-backend", name, "given")


def speculative_draft_tokens(settings: EngineSettings) -> tuple[int, list[Resolved]]:
    """SGLang's speculative_num_draft_tokens from its own three options (EAGLE/MTP on DeepSeek-V4):
    no --speculative-num-steps means no speculative decoding here, and then top-k or draft tokens alone
    trip SGLang's assertion (arg_groups/speculative_hook.py:1159-1163: the three are chosen together);
    DeepSeek-V4 takes top-k 1 only (arg_groups/deepseek_v4_hook.py:155-158), and at top-k 1 the draft
    tokens are adjusted to steps + 1 (speculative_hook.py:1255-1266)."""
    steps, topk, given = (settings.speculative_num_steps, settings.speculative_eagle_topk,
                          settings.speculative_num_draft_tokens)
    if steps is None:
        if topk is not None or given is not None:
            option = "--speculative-eagle-topk" if topk is not None else "--speculative-num-draft-tokens"
            raise _refuse(f"{SRC}/arg_groups/speculative_hook.py:1159-1163 (assert topk and draft tokens are None "
                          "when speculative_num_steps is)", option, "with --speculative-num-steps", "without",
                          f"{option} needs --speculative-num-steps (SGLang chooses the three together)")
        return 0, [Resolved("--speculative-num-steps", 0, "no speculative decoding")]
    if steps < 1:
        raise _refuse(f"{SRC}/arg_groups/speculative_hook.py", "--speculative-num-steps", ">= 1", str(steps),
                      "speculative_num_steps must be positive")
    k = 1 if topk is None else topk
    if k != 1:
        raise _refuse(f"{SRC}/arg_groups/deepseek_v4_hook.py:155-158", "--speculative-eagle-topk", "1", str(k),
                      "Only EAGLE speculative algorithm with topk == 1 is supported for DeepseekV4ForCausalLM")
    drafts = steps + 1
    note = ("given" if given == drafts else
            f"given {given}, adjusted to steps + 1 at top-k 1 ({SRC}/arg_groups/speculative_hook.py:1255-1266)"
            if given is not None else f"steps + 1 at top-k 1 ({SRC}/arg_groups/speculative_hook.py:1255-1266)")
    return drafts, [Resolved("--speculative-num-steps", steps, "given"),
                    Resolved("--speculative-eagle-topk", 1, "given" if topk is not None else
                             "1 (DeepSeek-V4 supports top-k 1 only)"),
                    Resolved("--speculative-num-draft-tokens", drafts, note)]


def ring_size(ratio: int, draft_tokens: int) -> int:
    """get_compress_state_ring_size (offline c128)."""
    if draft_tokens > 0:
        return 16 if ratio == 4 else 256
    return 8 if ratio == 4 else 128


def state_rows(size: int, ring: int, ratio: int) -> int:
    """CompressStatePool: size + ring + 1 rows, padded to the ratio."""
    return round_up(size + ring + 1, ratio)


def chunked_prefill_default(gpu: GpuTarget) -> tuple[int, str]:
    """arg_groups/memory_hook.py _handle_gpu_memory_settings tiers (MiB of the card)."""
    mib = gpu.memory_bytes // MiB
    rule = f"{SRC}/arg_groups/memory_hook.py _handle_gpu_memory_settings"
    if mib < 35 * 1024:
        return 4096, rule + " (< 35 GiB)"
    if mib < 60 * 1024:
        return 4096, rule + " (< 60 GiB)"
    if mib < 90 * 1024:
        return 8192, rule + " (< 90 GiB)"
    if mib < 160 * 1024:
        return 8192, rule + " (H20/H200: < 160 GiB)"
    return 16384, rule + " (>= 160 GiB)"


@dataclass(frozen=True)
class SglangSettings:
    gpu: GpuTarget
    page_size: int
    indexer_fp4: bool
    chunked_prefill_size: int
    max_running_requests: int  # per DP-attention worker: requested // dp_size (pool_configurator.py:956)
    draft_tokens: int
    mem_fraction_static: float | None
    requested_max_running_requests: int = 0  # --max-running-requests as given (or 256), for the whole server
    dp_size: int = 1  # --dp-size with DP attention (csa-plan's --dp)
    kv_cache_dtype: str = "fp8_e4m3"
    encoder_replay: bool = False  # --enable-encoder-swa-bounded-replay
    indexer_given: bool = False  # --indexer-kv-dtype was given (it sizes ratio-4 keys only)
    speculative_steps_given: bool = False  # --speculative-num-steps / --speculative-eagle-topk (EAGLE/MTP) given
    tensor_parallel_size: int = 1  # csa-plan's --tp: SGLang's attention TP (SGLang's --tp is tp x dp)


def dspark_draft_tokens(settings: EngineSettings) -> tuple[int, list[Resolved]]:
    """DeepSeek-V4.1's speculative decoding is DSpark (no MTP module; the hook accepts EAGLE and DSPARK,
    ``arg_groups/deepseek_v4_hook.py:138-155``, and EAGLE needs a draft model V4.1 does not ship):
    ``--speculative-num-draft-tokens`` is DSpark's verify window gamma + 1, at least 2
    (``arg_groups/speculative_hook.py:807-850``); the EAGLE options cannot apply."""
    for option, value in (("--speculative-num-steps", settings.speculative_num_steps),
                          ("--speculative-eagle-topk", settings.speculative_eagle_topk)):
        if value is not None:
            raise _refuse(f"{SRC}/arg_groups/deepseek_v4_hook.py:138-155", option, "DSpark: --speculative-num-draft-"
                          "tokens only", f"{option} {value}", f"{option} is an EAGLE/MTP option; DeepSeek-V4.1 has no "
                          "MTP module and drafts with DSpark (--speculative-num-draft-tokens = gamma + 1)")
    drafts = settings.speculative_num_draft_tokens
    if drafts is None:
        return 0, [Resolved("--speculative-num-draft-tokens", 0, "no speculative decoding")]
    if drafts < 2:
        raise _refuse(f"{SRC}/arg_groups/speculative_hook.py:845-850", "--speculative-num-draft-tokens", ">= 2",
                      str(drafts), "DSpark speculative_num_draft_tokens must be >= 2 (= gamma + 1)")
    return drafts, [Resolved("--speculative-num-draft-tokens", drafts, "given: DSpark (speculative_algorithm DSPARK), "
                             f"gamma {drafts - 1}")]


def resolve(settings: EngineSettings, shared: bool = False) -> tuple[SglangSettings, tuple[Resolved, ...]]:
    """The engine's settings; ``shared``: a model with cross-layer shared compressed state (V4.1)."""
    check_accepted(settings, ENGINE, ACCEPTS)
    gpu, gpu_source = target_of(settings)
    out = [Resolved("--gpu", gpu.name, gpu_source)]
    if gpu.vendor != "nvidia":
        raise _refuse(f"{SRC}/arg_groups/model_overrides/deepseek_v4.py", "--gpu", "an NVIDIA card (CUDA)",
                      f"{gpu.name} ({gpu.vendor})", f"DeepSeek-V4's ROCm path on {gpu.name} is not modelled")
    if gpu.capability[0] < 9:
        raise _refuse(f"{SRC}/arg_groups/model_overrides/deepseek_v4.py", "--gpu", "sm_90 or sm_100", gpu.sm,
                      f"DeepSeek-V4's CUDA paths are modelled for sm_90/sm_100 only, not {gpu.sm}")
    page = settings.page_size or PAGE_TOKENS
    if page != PAGE_TOKENS:
        raise _refuse(f"{SRC}/mem_cache/kv_cache_configurator.py (assert page_size == 256 for DeepSeek-V4 off NPU)",
                      "--page-size", "256", str(page), f"DeepSeek-V4 on CUDA needs --page-size 256, got {page}")
    out.append(Resolved("--page-size", page, "given" if settings.page_size else
                        f"{SRC}/arg_groups/model_overrides/deepseek_v4.py (256 on CUDA)"))
    kv = settings.kv_cache_dtype or "auto"
    known("--kv-cache-dtype", kv, CACHE_DTYPES, f"{SRC}/arg_groups/fields/model.py kv_cache_dtype choices")
    if kv not in ("auto", "fp8_e4m3"):
        raise _refuse(f"{SRC}/arg_groups/overrides.py _deepseek_v4_kv_cache_dtype", "--kv-cache-dtype",
                      "auto | fp8_e4m3", kv, f"the V4 paged layout stores fp8 latents; --kv-cache-dtype {kv} is not "
                                             "what this model's pools hold")
    out.append(Resolved("--kv-cache-dtype", "fp8_e4m3", "given" if settings.kv_cache_dtype else
                        f"auto -> fp8_e4m3 ({SRC}/arg_groups/overrides.py), KVLayout.V4 584 B/token"))
    idx = settings.indexer_kv_dtype or "fp8"
    known("--indexer-kv-dtype", idx, ("fp8", "fp4"), "csa-plan's spelling of --enable-deepseek-v4-fp4-indexer")
    if idx not in ("fp8", "fp4"):
        raise _refuse(f"{SRC}/arg_groups/fields/exec_.py enable_deepseek_v4_fp4_indexer", "--indexer-kv-dtype",
                      "fp8 | fp4", idx, f"unknown indexer dtype {idx!r}")
    fp4 = idx == "fp4"
    if shared and settings.indexer_kv_dtype is not None:
        raise _refuse(f"{SRC}/model_executor/pool_configurator.py:1170-1172", "--indexer-kv-dtype",
                      "not given (ratio-1/2 keys are always FP4, 68 B)", idx,
                      "--indexer-kv-dtype (--enable-deepseek-v4-fp4-indexer) sizes ratio-4 keys; DeepSeek-V4.1's "
                      "ratio-1/2 index pools are built with force_fp4=True, so the option cannot apply")
    if fp4 and gpu.capability[0] not in (10, 12):
        raise _refuse(f"{SRC}/arg_groups/serving_hook.py:464-470", "--indexer-kv-dtype",
                      "fp8 on sm_90 (fp4 needs SM100/SM120)", f"fp4 on {gpu.sm} ({gpu.name})",
                      "--enable-deepseek-v4-fp4-indexer requires SM100, SM120, or gfx95 GPUs with FP4 indexer support")
    out.append(Resolved("--indexer-kv-dtype", idx, "given (--enable-deepseek-v4-fp4-indexer)" if fp4 else
                        "given" if settings.indexer_kv_dtype else f"{SRC}/arg_groups/fields/exec_.py:439 (fp4 off)"))
    chunk_default, chunk_rule = chunked_prefill_default(gpu)
    chunk = settings.chunked_prefill_size or chunk_default
    out.append(Resolved("--chunked-prefill-size", chunk, "given" if settings.chunked_prefill_size else chunk_rule))
    requested = settings.max_running_requests or DEFAULT_MAX_RUNNING
    dp = settings.dp_attention_size or 1
    # SGLang sizes every worker's pools for requested // dp_size requests (at least 1): compute_swa_request_cap
    # (model_executor/pool_configurator.py:956), SWARequestCapPoolConfigurator (:1141-1145), resolve_max_num_reqs
    # (mem_cache/kv_cache_configurator.py:3119-3130) and the req_to_token pool (:3284)
    mrr = max(1, requested // dp)
    source = "given" if settings.max_running_requests else \
        f"{SRC}/arg_groups/deepseek_v4_hook.py:138-145 (256 for DeepSeek-V4)"
    if dp > 1:
        source = (f"{source}: {requested} for the server; per DP-attention worker max(1, {requested} // {dp}) = {mrr} "
                  f"({SRC}/model_executor/pool_configurator.py:956, mem_cache/kv_cache_configurator.py:3128)")
    out.append(Resolved("--max-running-requests", mrr, source))
    if settings.enable_encoder_swa_bounded_replay and not shared:
        raise _refuse(f"{SRC}/arg_groups/fields/exec_.py:165-180", "--enable-encoder-swa-bounded-replay",
                      "a DeepSeek-V4.1 model", "a model without shared compressed state",
                      "encoder SWA bounded replay is V4.1's (its encoder layers); it cannot apply to this model")
    drafts, spec_lines = dspark_draft_tokens(settings) if shared else speculative_draft_tokens(settings)
    out += spec_lines
    if drafts and not shared:
        for ratio in (4, 128):
            ring, window = ring_size(ratio, drafts), ratio * (2 if ratio == 4 else 1)
            pad = ring - window + 2 if ring > window else 0  # get_compress_state_write_pad
            if drafts > pad:
                raise _refuse(f"{SRC}/model_executor/pool_configurator.py _assert_ring_serves_draft_tokens",
                              "--speculative-num-steps", f"<= {pad - 1}", str(drafts - 1),
                              f"speculative_num_draft_tokens={drafts} exceeds what the c{ratio} compress state ring "
                              f"can keep resident (ring_size={ring} serves at most {pad} draft tokens)")
    out.append(moe_runner(settings.moe_runner_backend, gpu))
    frac = settings.mem_fraction_static
    out.append(Resolved("--mem-fraction-static", frac, "given" if frac is not None else
                        f"{SRC}/arg_groups/memory_hook.py (from the card; the device budget's step)"))
    replay = bool(settings.enable_encoder_swa_bounded_replay)
    if replay:
        out.append(Resolved("--enable-encoder-swa-bounded-replay", True, "given"))
    return SglangSettings(gpu, page, fp4, chunk, mrr, drafts, frac, requested, dp,
                          "fp8_e4m3", replay, settings.indexer_kv_dtype is not None,
                          settings.speculative_num_steps is not None or settings.speculative_eagle_topk is not None,
                          settings.tensor_parallel_size or 1), tuple(out)


@dataclass(frozen=True)
class Layers:
    main: int  # every main layer keeps SWA
    c4: int
    c128: int
    window: int
    head_dim: int
    index_head_dim: int


@dataclass(frozen=True)
class SglangPlan(EnginePlan):
    model_name: str
    max_seq_len: int
    settings: tuple[Resolved, ...]
    resolved: SglangSettings
    layers: Layers
    _engine: EngineModel = field(repr=False)
    v41: V41Pools | None = None  # DeepSeek-V4.1: the shared-state pools (planner/engines/sglang/v41.py)

    @property
    def engine(self) -> EngineModel:
        return self._engine

    # -- per-unit bytes ---------------------------------------------------------------------

    @property
    def rings(self) -> tuple[int, int]:
        d = self.resolved.draft_tokens
        return ring_size(4, d), ring_size(128, d)

    @property
    def full_page_bytes(self) -> int:
        """One 256-token full page across the c4 KV, c4 indexer and c128 KV pools."""
        L, p = self.layers, self.resolved.page_size
        if self.v41 is not None:  # each source: its records' page and p // r FP4 keys
            v = self.v41
            return sum(n * (v.compressed.page_bytes(p // r) + p // r * LOW_RATIO_INDEX_BYTES) for r, n in v.sources)
        key = indexer_key_bytes(L.index_head_dim, self.resolved.indexer_fp4)
        return L.c4 * (page_bytes(p // 4) + p // 4 * key) + L.c128 * page_bytes(p // 128)

    @property
    def c4_state_row_bytes(self) -> int:
        L = self.layers
        return (2 * 2 * L.head_dim + 2 * 2 * L.index_head_dim) * FP32_BYTES * L.c4

    @property
    def swa_page_bytes(self) -> int:
        """One 256-token SWA page across every main layer, with its c4 state rows (8 per page)."""
        if self.v41 is not None:
            return 0 if self.v41.encoder_replay else self.layers.main * self.v41.window.page_bytes(self.resolved.page_size)
        return self.layers.main * page_bytes(self.resolved.page_size) + self.rings[0] * self.c4_state_row_bytes

    @property
    def c128_slot_bytes(self) -> int:
        """A request slot's fixed compressor state: c128 rings (V4), ratio-2 pair rings (V4.1)."""
        if self.v41 is not None:
            return c2_ring_rows(self.resolved.draft_tokens) * C2_STATE_ROW_BYTES * self.v41.owners(2)
        return self.rings[1] * 2 * self.layers.head_dim * FP32_BYTES * self.layers.c128

    @property
    def unit_bytes(self) -> int:
        return self.swa_page_bytes

    # -- per request ------------------------------------------------------------------------

    def swa_budget_tokens(self) -> int:
        """compute_swa_request_cap per request: window + eviction x drafts + page + decode allocation."""
        d = self.resolved.draft_tokens
        p = self.resolved.page_size
        decode_alloc = p if d == 0 else 2 * d
        return self.layers.window + EVICTION_INTERVAL * (d or 1) + p + decode_alloc

    def swa_pages_held(self, tokens: int, phase: Phase | str) -> int:
        p = self.resolved.page_size
        if phase == Phase.DECODE:
            # mem_cache/common.py free_swa_out_of_window_slots (prefix sharing on): evict below
            # page_floor(L - ceil_align(max(window, page), page)); the live tokens [that, L) span one
            # page more than the kept span (2 pages for window 128, page 256)
            keep = round_up(max(self.layers.window, p), p)
            return min(ceil_div(tokens, p), keep // p + 1)
        # prefill: the chunk in flight plus the window before it, page-aligned on both ends
        span = min(tokens, self.resolved.chunked_prefill_size + self.layers.window)
        return min(ceil_div(tokens, p), ceil_div(span, p) + 1)

    def _uses(self, full_pages: int, swa_pages: int) -> tuple[PoolUse, ...]:
        L = self.layers
        p = self.resolved.page_size
        if self.v41 is not None:
            v = self.v41
            full_content = sum(n * (p // r) * (v.compressed.bytes_per_token + LOW_RATIO_INDEX_BYTES) for r, n in v.sources)
            swa_content = 0 if v.encoder_replay else L.main * p * v.window.bytes_per_token
            names = " + ".join(f"ratio-{r} KV + keys ({n} source{'s' if n > 1 else ''})" for r, n in v.sources)
            return (
                PoolUse(f"full pages: {names}", full_pages, self.full_page_bytes, StateClass.COMPRESSED, full_content),
                PoolUse(f"SWA pages ({L.main} layers)", 0 if v.encoder_replay else swa_pages, self.swa_page_bytes,
                        StateClass.DENSE_RING, swa_content),
                PoolUse("ratio-2 carry slot", 1 if v.owners(2) else 0, self.c128_slot_bytes, StateClass.CARRY),
            )
        key = indexer_key_bytes(L.index_head_dim, self.resolved.indexer_fp4)
        swa_content = L.main * p * KV_BYTES_PER_TOKEN + self.rings[0] * self.c4_state_row_bytes
        full_content = L.c4 * (p // 4 * (KV_BYTES_PER_TOKEN + key)) + L.c128 * (p // 128 * KV_BYTES_PER_TOKEN)
        return (
            PoolUse("full pages: c4 KV + c4 indexer + c128 KV", full_pages, self.full_page_bytes,
                    StateClass.COMPRESSED, full_content),
            PoolUse("SWA pages (+ c4 state rows)", swa_pages, self.swa_page_bytes, StateClass.DENSE_RING, swa_content),
            PoolUse("c128 state slot", 1 if L.c128 else 0, self.c128_slot_bytes, StateClass.CARRY),
        )

    def footprint(self, tokens: int, phase: Phase = Phase.DECODE) -> Footprint:
        full = ceil_div(tokens, self.resolved.page_size)
        in_flight = 1 + self.resolved.draft_tokens if phase == Phase.DECODE else self.resolved.chunked_prefill_size
        return Footprint(tokens, Phase(phase).value, in_flight, self._uses(full, self.swa_pages_held(tokens, phase)))

    def startup_budget(self) -> Footprint:
        full = ceil_div(self.max_seq_len, self.resolved.page_size)
        swa = ceil_div(self.swa_budget_tokens(), self.resolved.page_size)
        return Footprint(self.max_seq_len, "startup", 1 + self.resolved.draft_tokens, self._uses(full, swa))

    # -- pools --------------------------------------------------------------------------------

    def pool_config(self, kv_memory_bytes: int) -> dict[str, Any]:
        """DSV4PoolConfigurator.calculate_pool_sizes (cap mode), floats in the engine's order."""
        if self.v41 is not None:
            return self._pool_config_v41(kv_memory_bytes)
        r, L = self.resolved, self.layers
        p, mrr = r.page_size, r.max_running_requests
        ring4, ring128 = self.rings
        base = page_bytes(p) / p
        bytes_per_swa_token = base * L.main + (ring4 / p) * (2 * 2 * L.head_dim * 4 + 2 * 2 * L.index_head_dim * 4) * L.c4
        index_estimate = indexer_key_bytes(L.index_head_dim, False)  # NVIDIA FP4 keeps the FP8 estimate
        per_ratio = {}
        if L.c4:
            per_ratio[4] = 1 / (4 * 1) * (page_bytes(p // 4) / (p // 4)) + 1 / 4 * index_estimate
        if L.c128:
            per_ratio[128] = 1 / 128 * (page_bytes(p // 128) / (p // 128))
        counts = {4: L.c4, 128: L.c128}
        bytes_per_full_token = 0 * bytes_per_swa_token + sum(per_ratio[k] * counts[k] for k in per_ratio)
        if r.draft_tokens:
            infl = (L.main + 1) / L.main
            bytes_per_full_token *= infl
            bytes_per_swa_token *= infl
        tails = 4 * mrr
        cap = self.swa_budget_tokens() * max(1, mrr) + 2 * r.chunked_prefill_size + p
        swa_tokens = round_up(cap + tails * (L.window + p), p)
        slots = mrr + 1
        c128_fixed = 0
        if L.c128:
            c128_fixed = round_up(slots * ring128 + ring128 + 1, 128) * 2 * L.head_dim * 4 * L.c128
        swa_fixed = swa_tokens * bytes_per_swa_token
        fixed = c128_fixed + swa_fixed
        avail = max(kv_memory_bytes - fixed, 0)
        full = int(avail / bytes_per_full_token) // p * p
        while full > 0 and full * bytes_per_full_token + 0 > avail:
            full -= p
        return {"full": full, "swa": swa_tokens, "c4": full // 4, "c128": full // 128,
                "c4_state": swa_tokens // p * ring4, "c128_state": slots * ring128,
                "bytes_per_full_token": bytes_per_full_token, "bytes_per_swa_token": bytes_per_swa_token,
                "c128_state_fixed": c128_fixed, "swa_fixed": swa_fixed}

    def _pool_config_v41(self, kv_memory_bytes: int) -> dict[str, Any]:
        """calculate_pool_sizes for V4.1 (pool_configurator.py:1638-1700): owners only, the layout's paged
        bytes, the ratio-2 rings and the encoder-replay rings as fixed bytes, the low-ratio padding loop."""
        r, L, v = self.resolved, self.layers, self.v41
        p, mrr, d = r.page_size, r.max_running_requests, r.draft_tokens
        bytes_per_swa_token = v.bytes_per_swa_token(p)
        bytes_per_full_token = 0 * bytes_per_swa_token + v.bytes_per_full_token(p)
        if d and not v.encoder_replay:  # the draft worker: (T + 1) / T
            infl = (L.main + 1) / L.main
            bytes_per_full_token *= infl
            bytes_per_swa_token *= infl
        if v.encoder_replay:
            swa_tokens = 0
        else:
            cap = self.swa_budget_tokens() * max(1, mrr) + 2 * r.chunked_prefill_size + p
            swa_tokens = round_up(cap + 4 * mrr * (L.window + p), p)
        slots = mrr + 1
        c2_fixed = v.c2_state_bytes(slots, d)
        window_fixed = v.request_window_bytes(mrr, r.chunked_prefill_size, p, L.window, d, L.head_dim)
        swa_fixed = window_fixed + swa_tokens * bytes_per_swa_token
        fixed = 0 + c2_fixed + swa_fixed + 0 + 0
        avail = max(kv_memory_bytes - fixed, 0)
        full = int(avail / bytes_per_full_token) // p * p
        while full > 0 and full * bytes_per_full_token + v.padding_bytes(full, p) > avail:
            full -= p
        return {"full": full, "swa": swa_tokens, "c4": full // 4, "c128": full // 128, "c4_state": 0,
                "c128_state": 0, "bytes_per_full_token": bytes_per_full_token,
                "bytes_per_swa_token": bytes_per_swa_token, "c128_state_fixed": 0, "c2_state_fixed": c2_fixed,
                "swa_fixed": swa_fixed, "request_window_fixed": window_fixed,
                "padding": v.padding_bytes(full, p) if full > 0 else 0}

    def pool_config_for(self, max_running_requests: int, kv_memory_bytes: int) -> dict[str, Any]:
        """``pool_config`` had the server been started with ``--max-running-requests`` this value."""
        from dataclasses import replace

        plan = replace(self, resolved=replace(self.resolved, max_running_requests=max_running_requests))
        return plan.pool_config(kv_memory_bytes)

    def max_running_requests_that_fit(self, kv_memory_bytes: int) -> int | None:
        """The largest --max-running-requests below this plan's whose SWA pool cap leaves a full KV
        pool of at least one max_seq_len request in ``kv_memory_bytes`` (else one of any size; None:
        not even 1 leaves a full pool)."""
        from csa_plan.planner.bisection import largest_passing

        def full_tokens(mrr: int) -> int:
            return self.pool_config_for(mrr, kv_memory_bytes)["full"]

        high = max(1, self.resolved.max_running_requests - 1)
        one_request = largest_passing(lambda m: full_tokens(m) >= self.max_seq_len, 1, high)
        return one_request if one_request is not None else largest_passing(lambda m: full_tokens(m) > 0, 1, high)

    def size_pool(self, kv_memory_bytes: int) -> PoolSizing:
        r, L = self.resolved, self.layers
        p = r.page_size
        cfg = self.pool_config(kv_memory_bytes)
        if cfg["full"] <= 0:
            rule = f"{SRC}/model_executor/pool_configurator.py calculate_pool_sizes"
            why = (f"The DSV4 SWA pool cap ({cfg['swa']} tokens, {cfg['swa_fixed'] / (1 << 30):.2f} GB) leaves "
                   f"no room for the full KV pool within the available {kv_memory_bytes / (1 << 30):.2f} GB. ")
            fits = self.max_running_requests_that_fit(kv_memory_bytes)
            if fits is not None:  # the cap grows with max_running_requests: name the value that fixes it
                one = self.max_seq_len if self.pool_config_for(fits, kv_memory_bytes)["full"] >= self.max_seq_len else 0
                room = f"a request of {one:,} tokens" if one else "a full KV pool"
                if r.dp_size > 1:  # the cap is per DP-attention worker: name the worker's figures and the server's
                    most = fits * r.dp_size + r.dp_size - 1  # the largest server value whose // dp_size is fits
                    raise _refuse(rule, "--max-running-requests", f"<= {most:,} ({fits:,} per worker)",
                                  f"{r.requested_max_running_requests} ({r.max_running_requests:,} per worker)",
                                  why + f"Per DP-attention worker: {r.requested_max_running_requests} // {r.dp_size} "
                                  f"= {r.max_running_requests:,} requests; {fits:,} per worker leaves room for {room}, "
                                  f"i.e. --max-running-requests {most:,} (or fewer) with --dp {r.dp_size}; or "
                                  "increase --mem-fraction-static.")
                raise _refuse(rule, "--max-running-requests", f"<= {fits:,}", str(r.max_running_requests),
                              why + f"--max-running-requests {fits:,} (or fewer) leaves room for {room}; "
                              "or increase --mem-fraction-static.")
            raise _refuse(rule, "--kv-memory", f"> {int(cfg['swa_fixed'] + cfg['c128_state_fixed']):,} bytes",
                          str(kv_memory_bytes), why + "Even --max-running-requests 1 leaves none: lower "
                          "--swa-prefix-tails or SGLANG_SWA_EVICTION_INTERVAL, or increase --mem-fraction-static.")
        ring4, ring128 = self.rings
        key = indexer_key_bytes(L.index_head_dim, r.indexer_fp4)
        if self.v41 is not None:
            return self._size_pool_v41(kv_memory_bytes, cfg)
        pools = [PoolSize("SWA KV (every main layer)", physical_pages(cfg["swa"], p), L.main * page_bytes(p),
                          f"{cfg['swa']:,} tokens in {p}-token pages of {page_bytes(p):,} B per layer, one spare page")]
        if L.c4:
            pools += [
                PoolSize("c4 KV", physical_pages(cfg["c4"], p // 4), L.c4 * page_bytes(p // 4),
                         f"{cfg['c4']:,} records, {p // 4}-slot pages"),
                PoolSize("c4 indexer keys", physical_pages(cfg["c128"] * 32, p // 4), L.c4 * (p // 4) * key,
                         f"{key} B keys, not padded"),
                PoolSize("c4 state (per SWA page)", state_rows(cfg["c4_state"], ring4, 4),
                         2 * 2 * L.head_dim * FP32_BYTES * L.c4, f"{ring4} fp32 rows per SWA page"),
                PoolSize("c4 indexer state (per SWA page)", state_rows(cfg["c4_state"], ring4, 4),
                         2 * 2 * L.index_head_dim * FP32_BYTES * L.c4, ""),
            ]
        if L.c128:
            size = max(cfg["c128_state"], (r.max_running_requests + 1) * ring128)
            pools += [
                PoolSize("c128 KV", physical_pages(cfg["c128"], p // 128), L.c128 * page_bytes(p // 128),
                         f"{cfg['c128']:,} records, {p // 128}-slot pages"),
                PoolSize("c128 state (per request slot)", state_rows(size, ring128, 128),
                         2 * L.head_dim * FP32_BYTES * L.c128,
                         f"{ring128} rows x {r.max_running_requests + 1} slots, sized at start-up"),
            ]
        pools.append(PoolSize("req_to_token (int32 per slot)", r.max_running_requests + 1 + 1, self.max_seq_len * 4,
                              "ReqToTokenPool: max_running_requests + 1 slots + a padding row; not from the KV budget"))
        reserved = sum(pp.bytes for pp in pools if "state (per request slot)" in pp.name or pp.name.startswith("SWA")
                       or "per SWA page" in pp.name)
        return self._sizing(kv_memory_bytes, cfg, tuple(pools), reserved, cfg["c4_state"], swa_fits=True, extra=(
            ("c4_state_rows", cfg["c4_state"]), ("c128_state_rows", cfg["c128_state"]),
            ("bytes_per_full_token", cfg["bytes_per_full_token"]), ("bytes_per_swa_token", cfg["bytes_per_swa_token"]),
            ("swa_fixed_bytes", cfg["swa_fixed"]), ("c128_state_fixed_bytes", cfg["c128_state_fixed"])))

    def _sizing(self, kv_memory_bytes: int, cfg: dict[str, Any], pools: tuple[PoolSize, ...], reserved: int,
                c4_state: int, swa_fits: bool, extra: tuple[tuple[str, Any], ...]) -> PoolSizing:
        """The pools SGLang sized as its scheduler and its log see them (V4 and V4.1 alike): full pages are the
        admission unit; the SWA pool caps how many fit unless the windows live in per-request rings."""
        r = self.resolved
        p = r.page_size
        full_pages = cfg["full"] // p
        swa_pages = cfg["swa"] // p
        per_request = self.startup_budget()
        fit_full = full_pages // max(per_request.uses[0].units, 1)
        fit_swa = swa_pages // max(per_request.uses[1].units, 1) if swa_fits else r.max_running_requests
        concurrency = min(fit_full, fit_swa, r.max_running_requests)
        lines = (
            f"DSV4 pool sizes: full={cfg['full']}, swa={cfg['swa']}, c4={cfg['c4']}, c128={cfg['c128']}, "
            f"c4_state={c4_state}, c128_state=0",
            f"max_total_num_tokens={cfg['full']}, chunked_prefill_size={r.chunked_prefill_size}, "
            f"max_prefill_tokens={MAX_PREFILL_TOKENS}, max_running_requests={r.max_running_requests}, "
            f"context_len={self.max_seq_len}",
        )
        return PoolSizing(
            kv_memory_bytes=kv_memory_bytes, unit_name="page", unit_bytes=self.full_page_bytes,
            total_units=full_pages, usable_units=full_pages, max_running=r.max_running_requests,
            max_seq_len=self.max_seq_len, budget_units_per_request=per_request.uses[0].units,
            concurrency=float(concurrency), tokens=cfg["full"], pools=pools, reserved_bytes=reserved,
            log_lines=lines,
            extra=(("max_total_num_tokens", cfg["full"]), ("swa_tokens", cfg["swa"]), ("c4_tokens", cfg["c4"]),
                   ("c128_tokens", cfg["c128"])) + extra + (("swa_pages", swa_pages),) + self._sizing_tail(cfg))

    def _sizing_tail(self, cfg: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
        v = self.v41
        if v is None:
            return ()
        return (("attention_backend", v.backend), ("window_layout", v.window.name), ("compressed_layout", v.compressed.name))

    def _v41_pools(self, cfg: dict[str, Any]) -> list[PoolSize]:
        """The V4.1 pools as DeepSeekV4TokenToKVPool allocates them (deepseek_v4_memory_pool.py:1590-1645)."""
        r, L, v = self.resolved, self.layers, self.v41
        p, full = r.page_size, cfg["full"]
        pools = []
        if v.encoder_replay:
            pools.append(PoolSize("encoder-replay request windows (rings)", 1, cfg["request_window_fixed"],
                                  f"{L.main} layers x (max_running_requests + 1) rings of the {L.window}-token "
                                  "window, scratch and the DSpark ring (pool_configurator.py:1208-1235)"))
        else:
            pools.append(PoolSize(f"SWA KV (every main layer, {v.window.name})", physical_pages(cfg["swa"], p),
                                  L.main * v.window.page_bytes(p),
                                  f"{cfg['swa']:,} tokens in {p}-token pages of {v.window.page_bytes(p):,} B per "
                                  "layer, one spare page"))
        for ratio, n in v.sources:
            size = full // ratio
            pools.append(PoolSize(f"ratio-{ratio} KV ({n} kv source{'s' if n > 1 else ''}, {v.compressed.name})",
                                  physical_pages(size, p // ratio), n * v.compressed.page_bytes(p // ratio),
                                  f"{size:,} records, {p // ratio}-slot pages of "
                                  f"{v.compressed.page_bytes(p // ratio):,} B"))
            pools.append(PoolSize(f"ratio-{ratio} index keys (FP4, {LOW_RATIO_INDEX_BYTES} B)",
                                  v.index_pages(full, p, ratio), n * v.index_page * LOW_RATIO_INDEX_BYTES,
                                  f"{(full + p) // ratio:,} keys in {v.index_page}-slot pages"))
        if v.owners(2):
            rows = v.c2_state_rows(r.max_running_requests + 1, r.draft_tokens)
            pools.append(PoolSize("ratio-2 pair state (per request slot)", rows, v.owners(2) * C2_STATE_ROW_BYTES,
                                  f"{c2_ring_rows(r.draft_tokens)} fp32 rows x {r.max_running_requests + 1} slots"))
        pools.append(PoolSize("req_to_token (int32 per slot)", r.max_running_requests + 1 + 1, self.max_seq_len * 4,
                              "ReqToTokenPool: max_running_requests + 1 slots + a padding row; not from the KV budget"))
        return pools

    def _size_pool_v41(self, kv_memory_bytes: int, cfg: dict[str, Any]) -> PoolSizing:
        pools = self._v41_pools(cfg)
        reserved = sum(pp.bytes for pp in pools if pp.name.startswith(("SWA", "encoder", "ratio-2 pair")))
        return self._sizing(kv_memory_bytes, cfg, tuple(pools), reserved, 0, swa_fits=not self.v41.encoder_replay,
                            extra=(("c4_state_rows", 0), ("c128_state_rows", 0),
                                   ("bytes_per_full_token", cfg["bytes_per_full_token"]),
                                   ("bytes_per_swa_token", cfg["bytes_per_swa_token"]),
                                   ("swa_fixed_bytes", cfg["swa_fixed"]), ("c2_state_fixed_bytes", cfg["c2_state_fixed"]),
                                   ("c128_state_fixed_bytes", 0), ("low_ratio_padding_bytes", cfg["padding"])))

    def _describe_v41(self) -> dict[str, Any]:
        return _describe_v41_of(self)

    @property
    def runtime_modelled(self) -> bool:
        return True

    def runtime(self, sizing: PoolSizing, trace, options):
        """SGLang's scheduler and its two page pools over ``trace`` (``planner/engines/sglang``): the full pool's
        max_total_num_tokens and the SWA pool as ``size_pool`` sized them; ``--disable-radix-cache``
        (``options.enable_prefix_caching`` False) turns the radix cache off."""
        from csa_plan.planner.engines.sglang.compiled import replay_for
        from csa_plan.planner.engines.sglang.runtime import SglangRuntime
        from csa_plan.planner.engines.sglang.scheduler import SchedulerConfig

        r, extra = self.resolved, dict(sizing.extra)
        p = r.page_size
        pools = None
        if self.v41 is not None:
            if self.v41.encoder_replay:
                raise _refuse(f"{SRC}/model_executor/pool_configurator.py:1198-1240", "--enable-encoder-swa-bounded-"
                              "replay", "off for simulate", "on", "with encoder SWA bounded replay the windows live in "
                              "per-request rings and the scheduler's SWA accounting changes; csa-plan's SGLang "
                              "replay models the paged SWA pool only (check sizes the rings)")
            owners = sum(n for _, n in self.v41.sources)
            pools = (f"full pages (ratio-1/2 {self.v41.compressed.name} records + FP4 keys of the {owners} kv sources)",
                     f"SWA pages ({self.layers.main} layers, {self.v41.window.name})")
        radix = True if options.enable_prefix_caching is None else bool(options.enable_prefix_caching)
        cfg = SchedulerConfig(full_pages=extra["max_total_num_tokens"] // p, swa_pages=extra["swa_tokens"] // p,
                              page=p, window=self.layers.window, max_running_requests=r.max_running_requests,
                              chunked_prefill_size=r.chunked_prefill_size, max_prefill_tokens=MAX_PREFILL_TOKENS,
                              context_len=self.max_seq_len, radix_cache=radix)
        drafts = max(0, r.draft_tokens - 1)  # speculative_num_draft_tokens counts the verified token
        return SglangRuntime(cfg, trace, f"{ENGINE} ({'radix cache' if radix else '--disable-radix-cache'})",
                             compiled=replay_for, pools=pools, drafts=drafts,
                             acceptance=options.spec_acceptance)

    def charge(self, tokens: int) -> Footprint:
        """The simulator's charge: the full pages only. The SWA pool and every slot's c128 state are
        allocated at start-up (size_pool's reserved bytes), so admission draws on the full pages."""
        full = self.footprint(tokens, Phase.PREFILL)
        return Footprint(tokens, "charge", full.in_flight_tokens, full.uses[:1])

    def admission_units(self, tokens: int) -> int:
        return ceil_div(min(tokens, self.max_seq_len), self.resolved.page_size)

    def admits(self, sizing: PoolSizing, used_units: int, running: int, tokens: int) -> bool:
        """running < max_running_requests; the request's full pages free (``used_units`` counts full pages);
        the SWA pool is sized for max_running_requests requests at SGLang's own per-request budget."""
        if running >= sizing.max_running:
            return False
        need = ceil_div(min(tokens, self.max_seq_len), self.resolved.page_size)
        return need <= sizing.usable_units - used_units

    def tp_rules(self) -> tuple[TpRule, ...]:
        src = (f"{SRC}/mem_cache/deepseek_v4_memory_pool.py: every pool holds the single-head latent "
               "(qk_nope + qk_rope) per layer, so each attention-TP rank allocates the same pools")
        return tuple(TpRule(name, "replicated", src) for name in
                     ("SWA KV", "c4 KV", "c4 indexer keys", "c4 state", "c4 indexer state", "c128 KV", "c128 state"))

    def describe(self) -> dict[str, Any]:
        r, L = self.resolved, self.layers
        p = r.page_size
        if self.v41 is not None:
            return self._describe_v41()
        key = indexer_key_bytes(L.index_head_dim, r.indexer_fp4)
        return {
            "startup_note": (f"SGLang budgets each request {self.swa_budget_tokens()} SWA tokens "
                             f"({ceil_div(self.swa_budget_tokens(), p)} pages) and sizes the SWA pool for "
                             f"--max-running-requests {r.max_running_requests} of them at start-up, plus every "
                             f"request slot's c128 state; a decoding request holds "
                             f"{self.swa_pages_held(self.max_seq_len, Phase.DECODE)} SWA pages after eviction. "
                             "--max-running-requests is the setting that moves the fixed part."),
            "startup_budget_setting": "--max-running-requests",
            "page_size": p,
            "full_page_bytes": self.full_page_bytes,
            "swa_page_bytes": self.swa_page_bytes,
            "c128_slot_bytes": self.c128_slot_bytes,
            "layers": {"main": L.main, "c4": L.c4, "c128": L.c128},
            "pools": [
                {"name": "SWA KV", "scope": f"{p}-token pages, {L.main} layers", "unit": "page",
                 "unit_bytes": L.main * page_bytes(p)},
                {"name": "c4 KV", "scope": f"{p // 4} records per page, {L.c4} layers", "unit": "page",
                 "unit_bytes": L.c4 * page_bytes(p // 4)},
                {"name": "c4 indexer keys", "scope": f"{p // 4} keys of {key} B, {L.c4} layers", "unit": "page",
                 "unit_bytes": L.c4 * (p // 4) * key},
                {"name": "c4 + indexer state", "scope": f"{self.rings[0]} rows per SWA page", "unit": "row",
                 "unit_bytes": self.c4_state_row_bytes},
                {"name": "c128 KV", "scope": f"{p // 128} records per page, {L.c128} layers", "unit": "page",
                 "unit_bytes": L.c128 * page_bytes(p // 128)},
                {"name": "c128 state", "scope": f"{self.rings[1]} rows per request slot", "unit": "slot",
                 "unit_bytes": self.c128_slot_bytes},
            ],
        }


def _describe_v41_of(plan: "SglangPlan") -> dict[str, Any]:
    r, L, v = plan.resolved, plan.layers, plan.v41
    p = r.page_size
    pools = [] if v.encoder_replay else [
        {"name": "SWA KV", "scope": f"{p}-token pages, {L.main} layers, {v.window.name}", "unit": "page",
         "unit_bytes": L.main * v.window.page_bytes(p)}]
    for ratio, n in v.sources:
        pools.append({"name": f"ratio-{ratio} KV", "scope": f"{p // ratio} records per page, {n} kv sources, "
                      f"{v.compressed.name}", "unit": "page", "unit_bytes": n * v.compressed.page_bytes(p // ratio)})
        pools.append({"name": f"ratio-{ratio} index keys", "scope": f"{LOW_RATIO_INDEX_BYTES} B FP4 keys, "
                      f"{v.index_page}-slot pages, {n} kv sources", "unit": "page",
                      "unit_bytes": n * v.index_page * LOW_RATIO_INDEX_BYTES})
    if v.owners(2):
        pools.append({"name": "ratio-2 pair state", "scope": f"{c2_ring_rows(r.draft_tokens)} fp32 rows per request "
                      "slot", "unit": "slot", "unit_bytes": plan.c128_slot_bytes})
    per_token = v.bytes_per_full_token(p)
    return {
        "startup_note": (f"SGLang 0.5.23 runs DeepSeek-V4.1 with --dsv4-attn-backend {v.backend}: windows "
                         f"{v.window.name} on all {L.main} layers, ratio-1/2 records {v.compressed.name} on the "
                         f"{sum(n for _, n in v.sources)} kv sources only, {LOW_RATIO_INDEX_BYTES} B FP4 keys; "
                         f"{per_token:g} B per full token of compressed state (paged"
                         + (f"; {per_token * ((L.main + 1) / L.main):.2f} with the draft worker's (T + 1) / T"
                            if r.draft_tokens and not v.encoder_replay else "") + "). "
                         + ("Encoder SWA bounded replay: target windows in per-request rings. " if v.encoder_replay
                            else f"The SWA pool is sized for --max-running-requests {r.max_running_requests}. ")
                         + "--max-running-requests is the setting that moves the fixed part."),
        "startup_budget_setting": "--max-running-requests",
        "page_size": p,
        "full_page_bytes": plan.full_page_bytes,
        "swa_page_bytes": plan.swa_page_bytes,
        "c2_slot_bytes": plan.c128_slot_bytes,
        "attention_backend": v.backend,
        "bytes_per_full_token": per_token,
        "layers": {"main": L.main, "kv_sources": dict((f"ratio_{r_}", n) for r_, n in v.sources),
                   "draft": v.draft_layers},
        "pools": pools,
    }


@dataclass(frozen=True)
class Sglang0523(EngineModel):
    def configure(self, model, settings: EngineSettings, max_seq_len: int) -> SglangPlan:
        if any(d.sharing is not None for d in model.layers):
            return self._configure_v41(model, settings, max_seq_len)
        resolved, out = resolve(settings)
        main = [d for d in model.layers if not d.is_mtp]
        for d in main:
            if d.compression_ratio not in (0, 4, 128):
                raise _refuse(f"{SRC}/mem_cache/deepseek_v4_memory_pool.py collect_sources_by_ratio",
                              "compress_ratios", "0, 4 or 128 (1/2 need kv_source layers of V4.1)",
                              str(d.compression_ratio),
                              f"layer {d.layer_id}: compress ratio {d.compression_ratio} is not modelled")
        if not main:
            raise _refuse(f"{SRC}/mem_cache/deepseek_v4_memory_pool.py", "model", "main layers", "none",
                          "the model has no main layers")
        c4 = [d for d in main if d.compression_ratio == 4]
        if not any(d.compression_ratio in (4, 128) for d in main):
            raise _refuse(f"{SRC}/model_executor/pool_configurator.py calculate_pool_sizes", "compress_ratios",
                          "at least one ratio-4 or ratio-128 layer", "sliding-window layers only",
                          "DSV4 pool sizing divides the KV memory by bytes_per_full_token, which is 0 without "
                          "compressed layers")
        head_dim = main[0].head_dim
        index_head_dim = c4[0].index_head_dim if c4 else 128
        layers = Layers(main=len(main), c4=len(c4), c128=sum(1 for d in main if d.compression_ratio == 128),
                        window=max(d.window for d in main), head_dim=head_dim, index_head_dim=index_head_dim)
        return SglangPlan(model_name=model.name, max_seq_len=max_seq_len, settings=out, resolved=resolved,
                          layers=layers, _engine=self)


    def _configure_v41(self, model, settings: EngineSettings, max_seq_len: int) -> SglangPlan:
        """DeepSeek-V4.1: owners by collect_sources_by_ratio, the layouts by the attention backend
        (planner/engines/sglang/v41.py)."""
        resolved, out = resolve(settings, shared=True)
        main = [d for d in model.layers if not d.is_mtp]
        drafts = [d for d in model.layers if d.is_mtp]
        kv_sources = main[0].sharing.kv_sources if main[0].sharing is not None else ()
        ratio_of = {d.layer_id: d.compression_ratio for d in main}
        for d in main:
            if d.compression_ratio not in (0, 1, 2):
                raise _refuse(f"{SRC}/mem_cache/deepseek_v4_memory_pool.py:94-115", "compress_ratios",
                              "0, 1 or 2 in a model with kv_source_layer_ids", str(d.compression_ratio),
                              f"layer {d.layer_id}: ratio {d.compression_ratio} mixed into a shared-state model "
                              "is not modelled")
        sources = tuple((r, n) for r in (1, 2)
                        if (n := sum(1 for i in kv_sources if ratio_of.get(i) == r)))
        if not sources:
            raise _refuse(f"{SRC}/model_executor/pool_configurator.py:1437-1446", "kv_source_layer_ids",
                          "a ratio-1/2 kv source", "none", "bytes_per_full_token is 0 without a compressed source")
        attn_tp = resolved.tensor_parallel_size  # csa-plan's --tp is SGLang's attention TP (its --tp is tp x dp)
        backend, why = attention_backend(True, resolved.gpu.capability, resolved.kv_cache_dtype, attn_tp)
        window, compressed = layouts(backend)
        v41 = V41Pools(backend=backend, backend_source=why, window=window, compressed=compressed,
                       index_page=index_page_slots(resolved.gpu.capability), sources=sources,
                       layers_total=len(main), draft_layers=len(drafts), encoder_replay=resolved.encoder_replay)
        lines = []
        for line in out:
            if line.option == "--kv-cache-dtype":
                given = "given" if settings.kv_cache_dtype else f"auto -> fp8_e4m3 ({SRC}/arg_groups/overrides.py)"
                line = Resolved("--kv-cache-dtype", resolved.kv_cache_dtype, f"{given}; --dsv4-attn-backend "
                                f"{backend} ({why}): windows {window.name} {window.bytes_per_token} B, ratio-1/2 "
                                f"records {compressed.name} {compressed.bytes_per_token} B "
                                f"({SRC}/mem_cache/deepseek_v4_memory_pool.py:174-234)")
            elif line.option == "--indexer-kv-dtype":
                line = Resolved("--indexer-kv-dtype", "fp4", f"ratio-1/2 keys always FP4, {LOW_RATIO_INDEX_BYTES} B, "
                                f"{v41.index_page}-slot index pages ({SRC}/model_executor/pool_configurator.py:"
                                "1170-1172, mem_cache/deepseek_v4_memory_pool.py:530-542)")
            lines.append(line)
        layers = Layers(main=len(main), c4=0, c128=0, window=max(d.window for d in main), head_dim=main[0].head_dim,
                        index_head_dim=main[0].index_head_dim)
        return SglangPlan(model_name=model.name, max_seq_len=max_seq_len, settings=tuple(lines), resolved=resolved,
                          layers=layers, _engine=self, v41=v41)


SGLANG_0523 = Sglang0523(
    name=ENGINE, engine_name="SGLang", version="0.5.23",
    models_shared_state=True,
    summary="SGLang 0.5.23: paged SWA pool sized for max_running_requests, c4/c128/indexer pages per 256 tokens, "
            "c4 state per SWA page, c128 state per request slot",
    options=ACCEPTS,
    sources=(f"{SRC}/model_executor/pool_configurator.py", f"{SRC}/mem_cache/deepseek_v4_memory_pool.py",
             f"{SRC}/mem_cache/deepseek_v4_compress_state.py", f"{SRC}/arg_groups/deepseek_v4_hook.py",
             f"{SRC}/arg_groups/memory_hook.py", f"{SRC}/managers/schedule_batch.py", f"{SRC}/mem_cache/common.py"),
)

