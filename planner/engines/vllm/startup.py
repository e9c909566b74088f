"""``vllm-0.33``: vLLM 0.33.0's memory planning for DeepSeek-V4 (H200-class defaults).

What vLLM builds, from the release (file:line are pointers into vllm-0.33.0):

* Specs per main layer (``models/deepseek_v4/attention.py``): every layer owns a
  ``DeepseekV4SWACache`` (``v1/attention/backends/mla/sparse_swa.py`` ~85-146: a
  SlidingWindowMLASpec, block 64, 584 B per row padded to 576, window = sliding_window);
  ratio-4/128 layers add the compressed MLAAttentionSpec (block = cache block size,
  tokens_per_state = ratio, 584 B, alignment 576; attention.py ~860-883) and a compressor
  state (``compressor.py`` ~157-192: SlidingWindowMLASpec, fp32, state_dim 2 x coff x
  head_dim, window coff x ratio, block 4 for ratio 4 / 8 for ratio 128); ratio-4 layers add
  the indexer key cache (attention.py ~911-926, ~1019-1030: 132 B FP8 or 68 B MXFP4 per key,
  alignment 576) and the indexer's own compressor state (head_dim = index_head_dim).
  Ratio-0 layers (compress_ratio 1 in vLLM) keep only the SWA cache.
* MTP layers are not part of the target model (``nvidia/model.py`` ~864); with
  speculative decoding (``--num-speculative-tokens N``, method mtp) each draft layer adds a
  SWA cache (``nvidia/mtp.py``), and a decode step carries 1 + N tokens.
* Layout block-outermost (the V4 indexer backend declares only BLHNC/BLNHC,
  ``v1/attention/backends/mla/indexer.py`` ~349-352) -> ``_get_packed_kv_cache_groups``;
  one shared block pool, every block costs ``bytes_per_block`` (see ``vllm_kv``).
* num_blocks = kv_memory // bytes_per_block, the null block included
  (``kv_cache_planning.py`` ``get_kv_cache_config_from_groups``); the memory check plans
  against kv_memory - one block (``get_kv_cache_configs``: "Reserve the null block").
* The start-up log: ``GPU KV cache size: N tokens, Maximum concurrency for L tokens per
  request: X.XXx`` (``v1/core/kv_cache_utils.py`` ``update_kv_cache_capacity``), with
  concurrency = num_blocks / sum of groups' blocks per request at max_model_len and the
  engine's in-flight tokens = max_concurrent_batches x max_num_batched_tokens
  (``config/vllm.py`` ~588-609: 2 batches with async scheduling, the default).
* Admission (``v1/core/kv_cache_manager.py`` ``allocate_slots``, scheduler_reserve_full_isl
  on): a new request needs sum of min(cdiv(tokens, block), cap) blocks free, and the
  running requests stay below max_num_seqs.
"""

from __future__ import annotations

from dataclasses import field, replace
from math import lcm
from typing import Any

from csa_plan.planner.descriptor import Descriptor
from csa_plan.planner.engines.engine import (EngineModel, EnginePlan, EngineRefusal, EngineRefused, Footprint,
                                              Phase, PoolSize, PoolSizing, PoolUse, Resolved, TpRule)
from csa_plan.planner.engines.settings import EngineSettings, GpuTarget, check_accepted, known, target_of
from csa_plan.planner.engines.vllm.kv_cache_utils import (KvGroup, KvSpec, SpecKind, bytes_per_block, kv_cache_groups,
                                                          largest_group_bytes, tuple_blocks_per_request,
                                                          tuple_bytes_per_block, tuple_groups, tuple_needed_bytes)
from csa_plan.planner.layout import FP32_BYTES, StateClass
from csa_plan.planner.record import record
from csa_plan.planner.units import GiB

ENGINE = "vllm-0.33"
SRC = "vllm-0.33.0"

RECORD_BYTES = 584  # attention.py: 448 B NoPE + 128 B RoPE + 8 B fp8 scale (state_content_bytes=584)
FP8_DS_MLA_ALIGNMENT = 576  # attention.py / compressor.py / sparse_swa.py: alignment=576 for fp8_ds_mla
SWA_BLOCK_TOKENS = 64  # sparse_swa.py DeepseekV4SWACache(block_size=64)
KERNEL_BLOCK_TOKENS = 256  # sparse_mla.py / indexer.py get_supported_kernel_block_sizes -> [256]
STATE_BLOCK = {4: 4, 128: 8}  # compressor.py CompressorStateCache: block_size 4 (C4) / 8 (C128)
INDEX_SCALE_BLOCK = 128  # attention.py DeepseekV4Indexer.quant_block_size
MXFP4_BLOCK = 32  # models/deepseek_v4/common/ops/fused_indexer_q.py MXFP4_BLOCK_SIZE
KV_DTYPES_FP8 = ("auto", "fp8", "fp8_ds_mla", "fp8_e4m3")  # _resolve_dsv4_kv_cache_dtype: startswith("fp8")
INDEXER_DTYPES = ("auto", "fp8", "mxfp4")  # indexer.py DSA_INDEXER_KV_DTYPES (+ "auto" -> fp8)
# Every value vLLM's own argument types take (anything else is bad input; a known value the V4 paths
# do not serve is the typed refusal): config/cache.py CacheDType, config/attention.py IndexerKVDType.
CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
                "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "octave_k3v4",
                "octave_k3v3", "octave_k3v3_compact", "ultraquant_4bit", "int4_per_token_head",
                "int8_per_token_head", "fp8_per_token_head", "nvfp4", "nvfp4_4over6")
INDEXER_KV_DTYPES = ("auto", "bf16", "fp8", "mxfp4", "nvfp4")
USAGES = ("serve", "llm")

@record
class VllmRelease:
    """What one modelled vLLM release decides differently; every other rule is shared (a release is its
    differences). The 0.25.0 / 0.26.0 pointers are into those wheels' v1/core/kv_cache_utils.py,
    v1/kv_cache_interface.py, config/vllm.py and engine/arg_utils.py."""

    engine: str  # registry name, e.g. "vllm-0.33"
    src: str  # the wheel the file:line pointers are into, e.g. "vllm-0.33.0"
    layer_tuples: bool  # 0.25/0.26: tuple groups (kv_cache_utils.py _get_kv_cache_groups_uniform_groups);
    #                     0.33: packed groups (kv_cache_planning.py _get_packed_kv_cache_groups)
    windows_in_flight: bool  # windows sized for max_in_flight_tokens (0.26+), else max_num_batched_tokens
    extra_retained: bool  # 0.33: SWA windows keep the MTP lookahead's extra_retained_tokens
    null_block_in_check: bool  # 0.33: the memory check plans against kv memory - one block
    tier_160_gib: bool  # 0.33: a >= 160 GiB tier of batch defaults (16384 / 1024)
    one_log_line: bool  # 0.33: tokens and concurrency on one log line; older: two lines
    fp4_keys_fp8_sized: bool = False  # 0.25/0.26: an FP4 indexer cache still allocates FP8's 132 B per key
    #                                   (models/deepseek_v4/attention.py ~730-733)
    tuple_pages_padded: bool = True  # layer tuples only: 0.25/0.26 pad window pages up to the full-attention
    #                                  pages, a block = each page size x its slots, concurrency divisor cdiv(sum of
    #                                  groups' pages x page sums, the first's); 0.27/0.28 do not pad, a block = the
    #                                  largest group's pages, divisor the groups' blocks summed (kv_cache_utils.py)
    shared_state: bool = False  # DeepSeek-V4.1's pools are modelled (v41_layer_specs): 0.33/0.34, whose
    #                             models/deepseek_v41/ code they follow; 0.25/0.26 cannot load V4.1 (0.30.0 added it)
    scheduler_replayed: bool = False  # runtime() steps this release's own scheduler (0.33 only: 0.25/0.26's
    #                                   v1/core/sched and kv cache managers differ from 0.33's; not modelled)
    extensible_kv_cache: bool = False  # 0.34: the KV cache is sized after warmup from measured memory, with
    #                                    gpu_memory_utilization 1.0 by default (config/cache.py:395, :493-501;
    #                                    v1/worker/extensible_kv_cache.py:592-618)


def _refuse_as(rel: VllmRelease, rule: str, setting: str, expected: str, actual: str, message: str) -> EngineRefused:
    return _refuse(rule, setting, expected, actual, message, engine=rel.engine)


ACCEPTS = ("gpu", "block_size", "kv_cache_dtype", "indexer_kv_dtype", "max_num_batched_tokens", "max_num_seqs",
           "async_scheduling", "num_speculative_tokens", "gpu_memory_utilization", "usage",
           # start-up memory only (the device budget's non-KV terms: budget/vllm_nonkv.py)
           "cudagraph_capture_sizes", "max_cudagraph_capture_size", "enforce_eager", "compilation_config",
           "estimate_cudagraphs", "moe_backend", "all2all_backend")


# The engine's checks of its own arguments (it raises on them before it loads or profiles anything): a
# refusal by one of these leaves no budget to size (the budget reads those very settings).
ARGUMENT_RULES = ("config/scheduler.py", "config/vllm.py _set_cudagraph_sizes")


def refuses_its_arguments(refusal: Any) -> bool:
    """Whether ``refusal`` is one of vLLM's own argument checks (``ARGUMENT_RULES``)."""
    rule = getattr(refusal, "rule", "") or ""
    return any(r in rule for r in ARGUMENT_RULES)


def _refuse(rule: str, setting: str, expected: str, actual: str, message: str, engine: str = ENGINE) -> EngineRefused:
    return EngineRefused(EngineRefusal(engine, rule, setting, expected, actual, f"{engine}: {message} ({rule})"))


def format_gib(b: int) -> str:
    """utils/mem_utils.py format_gib: round(bytes / GiB, 2), as Python prints it."""
    return f"{round(b / GiB, 2)}"


def default_batched_tokens(gpu: GpuTarget, usage: str, rel: "VllmRelease | None" = None) -> tuple[int, int, str]:
    """engine/arg_utils.py get_batch_defaults: (max_num_batched_tokens, max_num_seqs, rule) by GPU memory
    tier (0.33: ~2983-2996, with a >= 160 GiB tier; 0.25/0.26: no such tier)."""
    rel = rel or V033
    rule = f"{rel.src} engine/arg_utils.py default_max_num_batched_tokens"
    if rel.tier_160_gib and gpu.memory_bytes >= 160 * GiB:
        return 16384, 1024, rule + " (>= 160 GiB)"
    # vLLM matches "a100" in the driver's device name and keeps GB10 (cc 12.1) on the small tier
    if gpu.memory_bytes >= 70 * GiB and "a100" not in (gpu.device_name or gpu.name).lower() \
            and gpu.capability != (12, 1):
        return (8192 if usage == "serve" else 16384), 1024, rule + " (>= 70 GiB)"
    return (2048 if usage == "serve" else 8192), 256, rule + " (other GPUs)"


@record
class VllmSettings:
    """The engine arguments the plan reads, each resolved to the value vLLM would use."""

    gpu: GpuTarget
    usage: str
    block_size: int
    kv_cache_dtype: str
    indexer_fp4: bool
    max_num_batched_tokens: int
    max_num_seqs: int
    async_scheduling: bool
    num_speculative_tokens: int
    gpu_memory_utilization: float
    pp: int = 1
    ring_rows: int = 0  # DeepSeek-V4.1: rows of each ratio-2 compressor ring (CircularBufferSpec block_size)

    @property
    def sm100(self) -> bool:
        """current_platform.is_device_capability_family(100): V4.1's MXFP8 window record and mega attention."""
        return self.gpu.capability[0] == 10

    @property
    def max_concurrent_batches(self) -> int:
        """config/vllm.py VllmConfig.max_concurrent_batches (model runner V2, the default)."""
        return self.pp + 1 if self.async_scheduling else self.pp

    @property
    def max_in_flight_tokens(self) -> int:
        return self.max_concurrent_batches * self.max_num_batched_tokens


def resolve(settings: EngineSettings, rel: "VllmRelease | None" = None,
            shared: bool = False) -> tuple[VllmSettings, tuple[Resolved, ...]]:
    """The settings as the release resolves them; ``shared`` for DeepSeek-V4.1 (cross-layer shared compressed
    state, ``models/deepseek_v41/``), whose block size and record formats depend on the card."""
    rel = rel or V033
    SRC = rel.src

    def _refuse(*args: str) -> EngineRefused:
        return _refuse_as(rel, *args)

    check_accepted(settings, rel.engine, ACCEPTS)
    gpu, gpu_source = target_of(settings)
    usage = settings.usage or "serve"
    if usage not in USAGES:
        raise _refuse("usage context", "--usage", "|".join(USAGES), usage, f"unknown usage context {usage!r}")
    if gpu.vendor != "nvidia":
        raise _refuse(f"{SRC} models/deepseek_v4/__init__.py (current_platform.is_rocm(): models/deepseek_v4/amd)",
                      "--gpu", "an NVIDIA card (sm_90/sm_100)", f"{gpu.name} ({gpu.vendor})",
                      f"DeepSeek-V4 on {gpu.name} runs vLLM's ROCm path, whose memory planning csa-plan does not "
                      "model")
    if gpu.capability[0] < 9:
        raise _refuse(f"{SRC} models/deepseek_v4/nvidia/model.py _select_dsv4_attn_cls", "--gpu", "sm_90 or sm_100",
                      gpu.sm, f"DeepSeek-V4's FlashMLA sparse path is modelled for sm_90/sm_100 only, not {gpu.sm}")
    if shared and gpu.capability[0] not in (9, 10):
        raise _refuse(f"{SRC} models/deepseek_v41/nvidia/model.py:201-258 _select_dsv4_attn_cls", "--gpu",
                      "sm_90 or sm_100", gpu.sm, f"DeepSeek-V4.1 on {gpu.sm} takes the FlashInfer sparse path, "
                      "whose KV pages csa-plan does not model (only sm_90's FlashMLA and sm_100's mega attention)")
    out: list[Resolved] = [Resolved("--gpu", gpu.name, gpu_source),
                           Resolved("--usage", usage, "given" if settings.usage else "vllm serve")]

    block = settings.block_size
    if shared:
        block, kv_dtype, fp4 = _resolve_v41(settings, gpu, rel, out)
    elif block is None:
        block = KERNEL_BLOCK_TOKENS
        out.append(Resolved("--block-size", block, f"{SRC} platforms/interface.py _preferred_block_size_for_backends"
                                                   " (FLASHMLA_SPARSE_DSV4 [256], DEEPSEEK_V4_INDEXER [256])"))
    else:
        _check_block_size(block, _refuse, rel)
        out.append(Resolved("--block-size", block, "given"))
    if not shared:
        kv_dtype, fp4 = _resolve_v4_dtypes(settings, gpu, rel, out)
    _resolve_batch(settings, rel, gpu, usage, out)  # the scheduler settings: checked, appended
    mnbt = settings.max_num_batched_tokens
    seqs = settings.max_num_seqs
    spec = settings.num_speculative_tokens or 0
    # compressor.py:224-226 CompressorStateCache: drafts + the bonus token + the previous row, a power of two >= 8
    rows = max(8, 1 << (spec + 2 - 1).bit_length()) if shared else 0
    util = settings.gpu_memory_utilization
    mnbt_default, seqs_default, tier_rule = _batch_defaults(settings, rel, gpu, usage)
    resolved = VllmSettings(gpu=gpu, usage=usage, block_size=block, kv_cache_dtype=kv_dtype, indexer_fp4=fp4,
                            max_num_batched_tokens=mnbt or mnbt_default, max_num_seqs=seqs or seqs_default,
                            async_scheduling=True if settings.async_scheduling is None else settings.async_scheduling,
                            num_speculative_tokens=spec,
                            gpu_memory_utilization=util if util is not None else 0.92, ring_rows=rows)
    return resolved, tuple(out)


def _resolve_v4_dtypes(settings: EngineSettings, gpu: GpuTarget, rel: VllmRelease,
                       out: list[Resolved]) -> tuple[str, bool]:
    """DeepSeek-V4's record (always fp8_ds_mla, 584 B) and its indexer key format."""
    SRC = rel.src

    def _refuse(*args: str) -> EngineRefused:
        return _refuse_as(rel, *args)

    kv_dtype = settings.kv_cache_dtype or "auto"
    known("--kv-cache-dtype", kv_dtype, CACHE_DTYPES, f"{SRC} config/cache.py CacheDType")
    if kv_dtype not in KV_DTYPES_FP8 and not kv_dtype.startswith("fp8"):
        raise _refuse(f"{SRC} models/deepseek_v4/attention.py _resolve_dsv4_kv_cache_dtype", "--kv-cache-dtype",
                      "auto | fp8 | fp8_ds_mla", kv_dtype,
                      f"the fp8_ds_mla layout only supports fp8 kv-cache, got {kv_dtype!r}")
    out.append(Resolved("--kv-cache-dtype", "fp8_ds_mla",
                        f"{'given ' + kv_dtype if settings.kv_cache_dtype else 'auto'} -> fp8_ds_mla "
                        f"({SRC} attention.py _resolve_dsv4_kv_cache_dtype)"))

    idx = settings.indexer_kv_dtype or "auto"
    known("--indexer-kv-dtype", idx, INDEXER_KV_DTYPES, f"{SRC} config/attention.py IndexerKVDType")
    if idx not in INDEXER_DTYPES:
        raise _refuse(f"{SRC} v1/attention/backends/mla/indexer.py dsa_indexer_uses_fp4", "--indexer-kv-dtype",
                      "auto | fp8 | mxfp4", idx, f"indexer_kv_dtype={idx!r} is not supported by the sparse indexer")
    fp4 = idx == "mxfp4"
    if fp4 and gpu.capability[0] != 10:
        raise _refuse(f"{SRC} v1/attention/backends/mla/indexer.py dsa_indexer_uses_fp4", "--indexer-kv-dtype",
                      "fp8 on sm_90 (mxfp4 needs sm_10x)", f"mxfp4 on {gpu.sm} ({gpu.name})",
                      "indexer_kv_dtype='mxfp4' requires Blackwell datacenter GPUs (sm_10x, e.g. B200/GB200)")
    out.append(Resolved("--indexer-kv-dtype", "mxfp4" if fp4 else "fp8",
                        "given" if settings.indexer_kv_dtype else f"auto -> fp8 ({SRC} config/attention.py "
                                                                  "resolve_indexer_kv_dtype)"))
    return "fp8_ds_mla", fp4


def _batch_defaults(settings: EngineSettings, rel: VllmRelease, gpu: GpuTarget, usage: str) -> tuple[int, int, str]:
    """max_num_batched_tokens / max_num_seqs defaults, a defaulted max_num_seqs capped by the batched tokens."""
    mnbt_default, seqs_default, tier_rule = default_batched_tokens(gpu, usage, rel)
    tokens = settings.max_num_batched_tokens or mnbt_default
    if settings.max_num_seqs is None and seqs_default > tokens:
        seqs_default, tier_rule = tokens, (f"{tier_rule}, capped at max_num_batched_tokens {tokens:,} ({rel.src} "
                                           "engine/arg_utils.py: max_num_seqs = min(default, max_num_batched_tokens))")
    return mnbt_default, seqs_default, tier_rule


def _resolve_batch(settings: EngineSettings, rel: VllmRelease, gpu: GpuTarget, usage: str,
                   out: list[Resolved]) -> None:
    """The scheduler's settings as the engine checks and defaults them."""
    SRC = rel.src

    def _refuse(*args: str) -> EngineRefused:
        return _refuse_as(rel, *args)

    mnbt_default, seqs_default, tier_rule = default_batched_tokens(gpu, usage, rel)

    mnbt = settings.max_num_batched_tokens
    if mnbt is not None and mnbt < 1:
        raise _refuse(f"{SRC} config/scheduler.py", "--max-num-batched-tokens", ">= 1", str(mnbt),
                      "max_num_batched_tokens must be positive")
    out.append(Resolved("--max-num-batched-tokens", mnbt or mnbt_default, "given" if mnbt else tier_rule))
    seqs = settings.max_num_seqs
    if seqs is not None and seqs < 1:
        raise _refuse(f"{SRC} config/scheduler.py", "--max-num-seqs", ">= 1", str(seqs), "max_num_seqs must be positive")
    tokens = mnbt or mnbt_default
    if seqs is not None and tokens < seqs:  # the engine's own check, before anything is sized
        raise _refuse(f"{SRC} config/scheduler.py SchedulerConfig.verify_max_model_len", "--max-num-batched-tokens",
                      f">= max_num_seqs ({seqs:,})", f"{tokens:,}" + ("" if mnbt else " (the default)"),
                      f"max_num_batched_tokens ({tokens}) must be greater than or equal to max_num_seqs ({seqs})")
    if seqs is None and seqs_default > tokens:  # a defaulted max_num_seqs is capped by max_num_batched_tokens
        seqs_default, tier_rule = tokens, (f"{tier_rule}, capped at max_num_batched_tokens {tokens:,} ({SRC} "
                                           "engine/arg_utils.py: max_num_seqs = min(default, max_num_batched_tokens))")
    sizes, top = settings.cudagraph_capture_sizes, settings.max_cudagraph_capture_size
    if sizes and top is not None and max(sizes) != top:
        raise _refuse(f"{SRC} config/vllm.py _set_cudagraph_sizes", "--max-cudagraph-capture-size",
                      f"max(cudagraph_capture_sizes) = {max(sizes):,}", f"{top:,}",
                      f"customized max_cudagraph_capture_size ({top}) should be consistent with the max value of "
                      f"cudagraph_capture_sizes ({max(sizes)})")
    out.append(Resolved("--max-num-seqs", seqs or seqs_default, "given" if seqs else tier_rule))
    async_on = True if settings.async_scheduling is None else settings.async_scheduling
    out.append(Resolved("--async-scheduling", async_on, "given" if settings.async_scheduling is not None
                        else f"{SRC} config/vllm.py: on unless an incompatible option"))
    spec = settings.num_speculative_tokens or 0
    out.append(Resolved("--num-speculative-tokens", spec, "given" if settings.num_speculative_tokens is not None
                        else "no speculative decoding"))
    util = settings.gpu_memory_utilization
    if util is not None and not 0 < util <= 1:
        raise _refuse(f"{SRC} config/cache.py", "--gpu-memory-utilization", "0 < x <= 1", str(util),
                      "gpu_memory_utilization must be in (0, 1]")
    out.append(Resolved("--gpu-memory-utilization", util if util is not None else 0.92,
                        "given" if util is not None else f"{SRC} config/cache.py CacheConfig.gpu_memory_utilization"))


C128 = 128  # the largest compress ratio: a block must hold one compressed C128 record

# --- DeepSeek-V4.1 (models/deepseek_v41/, vllm-0.33.0; 0.34.0 the same on every row below) ------------------
V41_SWA_BLOCK = 32  # attention.py:562-580 DeepseekV4SWACache(block_size=32)
V41_SWA_BYTES = {True: 528, False: 584}  # attention.py:521 swa_bytes_per_token (SM100 MXFP8 / V4 record)
V41_NVFP4_BYTES = 288  # attention.py:522-526 compressed_bytes_per_token under nvfp4_ds_mla
V41_ALIGNMENT = {True: 512, False: 576}  # attention.py:530 kv_page_alignment
V41_RING_ROW_BYTES = 2 * 512 * FP32_BYTES  # compressor.py:306-311 state_dim 2 x head_dim, float32 (4,096 B)
V41_RATIOS = (0, 1, 2)  # attention.py:326-331


def v41_kernel_block(sm100: bool) -> int:
    """The compressed and index backends' one kernel block size: sparse_mla.py:115-116 (FlashMLA: 64 on SM90,
    else 128), :301-302 (mega attention: 128), v1/attention/backends/mla/indexer.py:366-367 (64 on SM90, else
    128); platforms/interface.py _preferred_block_size_for_backends takes it as the cache block size."""
    return 128 if sm100 else 64


def _resolve_v41(settings: EngineSettings, gpu: GpuTarget, rel: VllmRelease,
                 out: list[Resolved]) -> tuple[int, str, bool]:
    """DeepSeek-V4.1's block size, record format and index-key format, as 0.33 decides them by card."""
    SRC = rel.src
    sm100 = gpu.capability[0] == 10

    def _refuse(*args: str) -> EngineRefused:
        return _refuse_as(rel, *args)

    kernel = v41_kernel_block(sm100)
    block = settings.block_size
    if block is None:
        block = kernel
        out.append(Resolved("--block-size", block, f"{SRC} platforms/interface.py _preferred_block_size_for_backends "
                                                   f"(V4.1 sparse-MLA and indexer backends: [{kernel}] on {gpu.sm}, "
                                                   "models/deepseek_v41/sparse_mla.py:115-116)"))
    else:
        if block < 1 or block % kernel:
            raise _refuse(f"{SRC} models/deepseek_v41/sparse_mla.py:115-116 get_supported_kernel_block_sizes "
                          f"([{kernel}] on {gpu.sm}); v1/worker/utils.py _block_size_is_supported", "--block-size",
                          f"a multiple of {kernel} on {gpu.sm}", str(block),
                          f"--block-size {block} cannot be split into the V4.1 attention and indexer backends' "
                          f"{kernel}-token kernel blocks")
        out.append(Resolved("--block-size", block, "given"))
    kv_dtype = settings.kv_cache_dtype or "auto"
    known("--kv-cache-dtype", kv_dtype, CACHE_DTYPES, f"{SRC} config/cache.py CacheDType")
    # nvidia/model.py:244-258: mega attention is the SM100 default (TP leaving 8 heads per wo_a group: TP <= 8 for
    # 64 heads / 8 groups); its packed record is nvfp4_ds_mla (flash_mla_mega_attn.py:203-207), FlashMLA's
    # fp8_ds_mla (attention.py:206-215). auto / fp8 resolve to it (attention.py _resolve_dsv4_kv_cache_dtype).
    packed = "nvfp4_ds_mla" if sm100 else "fp8_ds_mla"
    rule = f"{SRC} models/deepseek_v41/attention.py:142-170 _resolve_dsv4_kv_cache_dtype"
    if kv_dtype in ("auto", "fp8"):
        resolved = packed
    elif kv_dtype.endswith("_ds_mla"):
        resolved = kv_dtype
    else:
        raise _refuse(rule, "--kv-cache-dtype", "auto | fp8 | fp8_ds_mla | nvfp4_ds_mla (sm_100)", kv_dtype,
                      f"DeepseekV4 packed KV layouts only support fp8 kv-cache, got {kv_dtype}")
    if resolved == "nvfp4_ds_mla" and not sm100:
        raise _refuse(f"{SRC} models/deepseek_v41/attention.py:532-536", "--kv-cache-dtype",
                      "fp8_ds_mla off sm_100", f"nvfp4_ds_mla on {gpu.sm} ({gpu.name})",
                      "nvfp4_ds_mla needs the V4.1 KV records, which FlashMLA decodes only on SM100")
    how = "given" if settings.kv_cache_dtype else "auto"
    out.append(Resolved("--kv-cache-dtype", resolved, f"{how} -> {resolved} ({rule}; "
                        + ("mega attention on sm_100, nvidia/model.py:244-258)" if packed == "nvfp4_ds_mla"
                           else "FlashMLA sparse)")))
    idx = settings.indexer_kv_dtype or "auto"
    known("--indexer-kv-dtype", idx, INDEXER_KV_DTYPES, f"{SRC} config/attention.py IndexerKVDType")
    if idx not in INDEXER_DTYPES:
        raise _refuse(f"{SRC} v1/attention/backends/mla/indexer.py dsa_indexer_uses_fp4", "--indexer-kv-dtype",
                      "auto | fp8 | mxfp4", idx, f"indexer_kv_dtype={idx!r} is not supported by the sparse indexer")
    fp4 = idx == "mxfp4"
    if fp4 and not sm100:
        raise _refuse(f"{SRC} v1/attention/backends/mla/indexer.py:60-68 dsa_indexer_uses_fp4", "--indexer-kv-dtype",
                      "fp8 off sm_100 (mxfp4 needs sm_100)", f"mxfp4 on {gpu.sm} ({gpu.name})",
                      "indexer_kv_dtype='mxfp4' requires Blackwell datacenter GPUs (sm_10x, e.g. B200/GB200)")
    out.append(Resolved("--indexer-kv-dtype", "mxfp4" if fp4 else "fp8",
                        "given" if settings.indexer_kv_dtype else f"auto -> fp8 ({SRC} config/attention.py "
                                                                  "resolve_indexer_kv_dtype)"))
    return block, resolved, fp4


def v41_layer_specs(layers: tuple[Descriptor, ...], s: VllmSettings, rel: "VllmRelease | None" = None) -> list[KvSpec]:
    """DeepSeek-V4.1's KV specs in registration order (static_forward_context insertion order:
    attention.py:423-429 registers the layer before its indexer's key cache (:441-490), its window cache
    (:562-580) and its compressor's ring (compressor.py:306-311)); the DSpark draft layers' windows after the
    main model's, with speculative decoding only (nvidia/dspark.py:85-129, tagged is_draft by
    v1/worker/gpu/spec_decode/speculator.py:242)."""
    rel = rel or V033
    SRC = rel.src
    sm100 = s.sm100
    swa_bytes = V41_SWA_BYTES[sm100]
    comp_bytes = V41_NVFP4_BYTES if s.kv_cache_dtype == "nvfp4_ds_mla" else swa_bytes
    align = V41_ALIGNMENT[sm100]
    kernel = v41_kernel_block(sm100)
    # sparse_swa.py:133-136 + attention.py:570-577: on SM100 the window block stride holds whole rows of both records
    swa_stride = lcm(swa_bytes, comp_bytes) if sm100 else 1
    out: list[KvSpec] = []
    for d in layers:
        if d.is_mtp and not s.num_speculative_tokens:
            continue
        i, r = d.layer_id, d.compression_ratio
        p = f"model.layers.{i}.self_attn"
        if r not in V41_RATIOS:
            raise _refuse_as(rel, f"{SRC} models/deepseek_v41/attention.py:326-331", "compress_ratios", "0, 1 or 2",
                             str(r), f"DeepSeek V4.1 layer {i} has compress_ratio={r}; only 0 (sliding window), 1 "
                             "and 2 are supported")
        sh = d.sharing
        owner = not d.is_mtp and sh is not None and i in sh.kv_sources and r > 0
        if owner:  # attention.py:1206-1231: kv sources only
            out.append(KvSpec(name=p, role=f"C{r} source records", layer_id=i, kind=SpecKind.FULL,
                              block_size=s.block_size, tokens_per_state=r, num_heads=1,
                              state_content_bytes=comp_bytes, alignment=align).with_kernel_stride(kernel))
            if i in sh.index_sources:  # attention.py:441-455, 1243-1310: the keys live on the kv source
                out.append(KvSpec(name=f"{p}.indexer.k_cache", role=f"C{r} source index keys", layer_id=i,
                                  kind=SpecKind.FULL, block_size=s.block_size, tokens_per_state=r, num_heads=1,
                                  state_content_bytes=index_key_bytes(d.index_head_dim, s.indexer_fp4),
                                  alignment=align).with_kernel_stride(kernel))
        out.append(KvSpec(name=f"{p}.swa_cache", role="DSpark SWA cache" if d.is_mtp else "SWA cache", layer_id=i,
                          kind=SpecKind.SLIDING, block_size=V41_SWA_BLOCK, tokens_per_state=1, num_heads=1,
                          state_content_bytes=swa_bytes, alignment=align, sliding_window=d.window,
                          stride_alignment=swa_stride, is_draft=d.is_mtp))
        if owner and r > 1:  # compressor.py:206-240: the ratio-2 ring, one block per request
            out.append(KvSpec(name=f"{p}.compressor.state_cache", role=f"C{r} carry ring", layer_id=i,
                              kind=SpecKind.CIRCULAR, block_size=s.ring_rows, tokens_per_state=1, num_heads=1,
                              state_content_bytes=V41_RING_ROW_BYTES, alignment=None))
    return out


def _check_block_size(block: int, refuse, rel: VllmRelease) -> None:
    """Block sizes as vLLM decides them: every block size its planning can size is planned (the worker
    then picks a kernel block size that divides it); one below 128 tokens leaves a C128 layer's page
    empty (``block_size // compress_ratio`` = 0 records) and vLLM's own start-up fails dividing by that
    zero page (``ZeroDivisionError``). 0.25/0.26 fail earlier on a small block: its sliding-window page
    outgrows every full-attention page and their grouping's assertion fails (``kv_cache_utils.tuple_groups``);
    that is also how they decide a size that is not a multiple of 128 (192 and 200 fail it, 320 plans:
    tools/crosscheck_engines.py drives their code on each)."""
    src = rel.src
    if block < 1:
        raise refuse(f"{src} config/cache.py CacheConfig.block_size", "--block-size", ">= 1", str(block),
                     "--block-size must be positive")
    if block < C128 and not (rel.layer_tuples and rel.tuple_pages_padded):
        raise refuse(f"{src} v1/kv_cache_interface.py MLAAttentionSpec.real_page_size_bytes", "--block-size",
                     f">= {C128} (one C128 record per block)", str(block),
                     f"--block-size {block} gives the compress-ratio-128 layers block_size // 128 = 0 records per "
                     "page: a 0-byte page, and vLLM's start-up fails with ZeroDivisionError dividing by it")
    if block > C128 and block % C128 and not rel.layer_tuples:
        raise refuse("csa-plan (not modelled)", "--block-size", f"a multiple of {C128}", str(block),
                     f"--block-size {block} is not a multiple of 128: a block would hold a partial C128 record, "
                     "which csa-plan does not model")


def index_key_bytes(index_head_dim: int, fp4: bool) -> int:
    """attention.py DeepseekV4Indexer: FP8 head_dim + head_dim//128*4 (132); MXFP4 head_dim//2 + head_dim//32 (68)."""
    if fp4:
        return index_head_dim // 2 + index_head_dim // MXFP4_BLOCK
    return index_head_dim + index_head_dim // INDEX_SCALE_BLOCK * 4


def _state_spec(name: str, role: str, layer: int, ratio: int, head_dim: int, extra: int) -> KvSpec:
    """A compressor state cache: a SlidingWindowSpec too, so 0.33 tags it with extra_retained_tokens like the
    SWA caches (kv_cache_planning.py:1634-1641: every SlidingWindowSpec, multi-module MTP only)."""
    coff = 1 + (ratio == 4)
    return KvSpec(name=name, role=role, layer_id=layer, kind=SpecKind.SLIDING, block_size=STATE_BLOCK[ratio],
                  tokens_per_state=1, num_heads=1, state_content_bytes=2 * coff * head_dim * FP32_BYTES,
                  alignment=FP8_DS_MLA_ALIGNMENT, sliding_window=coff * ratio, extra_retained_tokens=extra)


def _swa_spec(name: str, layer: int, window: int, extra: int, draft: bool) -> KvSpec:
    return KvSpec(name=name, role="MTP SWA cache" if draft else "SWA cache", layer_id=layer, kind=SpecKind.SLIDING,
                  block_size=SWA_BLOCK_TOKENS, tokens_per_state=1, num_heads=1, state_content_bytes=RECORD_BYTES,
                  alignment=FP8_DS_MLA_ALIGNMENT, sliding_window=window, extra_retained_tokens=extra, is_draft=draft)


def layer_specs(layers: tuple[Descriptor, ...], s: VllmSettings, num_mtp_layers: int,
                rel: "VllmRelease | None" = None) -> list[KvSpec]:
    """Every KV spec in registration order (static_forward_context insertion order)."""
    rel = rel or V033
    SRC = rel.src

    def _refuse(*args: str) -> EngineRefused:
        return _refuse_as(rel, *args)

    spec_tokens = s.num_speculative_tokens
    lookahead = 0
    if spec_tokens:
        lookahead = spec_tokens if min(num_mtp_layers, spec_tokens) > 1 else 1  # num_prefill_lookahead_tokens
    # 0.33 kv_cache_planning.py get_global_kv_cache_groups: extra_retained_tokens (0.25/0.26: none)
    extra = max(0, lookahead - 1) if rel.extra_retained else 0
    out: list[KvSpec] = []
    for d in layers:
        if d.is_mtp:
            continue
        i, r = d.layer_id, d.compression_ratio
        p = f"model.layers.{i}.self_attn"
        if r not in (0, 1, 4, 128):
            raise _refuse(f"{SRC} models/deepseek_v4/compressor.py CompressorStateCache (assert compress_ratio in "
                          "[4, 128])", "compress_ratios", "0, 4 or 128", str(r),
                          f"layer {i}: compress ratio {r} is not one DeepSeek-V4's compressor supports")
        if r == 4:
            out.append(KvSpec(name=f"{p}.indexer.k_cache", role="C4 indexer keys", layer_id=i, kind=SpecKind.FULL,
                              block_size=s.block_size, tokens_per_state=4, num_heads=1,
                              state_content_bytes=index_key_bytes(d.index_head_dim,
                                                                  s.indexer_fp4 and not rel.fp4_keys_fp8_sized),
                              alignment=FP8_DS_MLA_ALIGNMENT).with_kernel_stride())
            out.append(_state_spec(f"{p}.indexer.compressor.state_cache", "C4 indexer state", i, 4, d.index_head_dim,
                                   extra))
        out.append(_swa_spec(f"{p}.swa_cache", i, d.window, extra, False))
        if r in (4, 128):
            out.append(KvSpec(name=p, role=f"C{r} attention", layer_id=i, kind=SpecKind.FULL, block_size=s.block_size,
                              tokens_per_state=r, num_heads=1, state_content_bytes=RECORD_BYTES,
                              alignment=FP8_DS_MLA_ALIGNMENT).with_kernel_stride())
            out.append(_state_spec(f"{p}.compressor.state_cache", f"C{r} state", i, r, d.head_dim, extra))
    if spec_tokens:
        mtp = [d for d in layers if d.is_mtp]
        if not mtp:
            raise _refuse(f"{SRC} config/speculative.py (method mtp needs num_nextn_predict_layers)",
                          "--num-speculative-tokens", "a model with MTP layers", "0 MTP layers",
                          "MTP speculative decoding needs the model's MTP layers")
        for d in mtp:
            out.append(_swa_spec(f"model.layers.{d.layer_id}.self_attn.swa_cache", d.layer_id, d.window, extra, True))
    return out


_CLASS = {"C4 attention": StateClass.COMPRESSED, "C128 attention": StateClass.COMPRESSED,
          "C4 indexer keys": StateClass.INDEX, "C4 state": StateClass.CARRY, "C128 state": StateClass.CARRY,
          "C4 indexer state": StateClass.INDEX_CARRY, "SWA cache": StateClass.DENSE_RING,
          "MTP SWA cache": StateClass.DENSE_RING, "DSpark SWA cache": StateClass.DENSE_RING,
          "C1 source records": StateClass.COMPRESSED, "C2 source records": StateClass.COMPRESSED,
          "C1 source index keys": StateClass.INDEX, "C2 source index keys": StateClass.INDEX,
          "C2 carry ring": StateClass.CARRY}


def group_class(g: KvGroup) -> StateClass:
    """The ledger class a group's blocks are booked under: its widest layer's class."""
    widest = max(g.specs, key=lambda s: s.page_bytes)
    return _CLASS[widest.role]


@record
class VllmPlan(EnginePlan):
    """One deployment's KV specs, groups and block size, as the release plans them."""

    model_name: str
    max_seq_len: int
    settings: tuple[Resolved, ...]
    resolved: VllmSettings
    specs: tuple[KvSpec, ...]
    groups: tuple[KvGroup, ...]
    repeats_per_group: int | None
    block_bytes: int
    _engine: EngineModel = field(repr=False)
    shared: bool = False  # DeepSeek-V4.1 (models/deepseek_v41/): DSpark drafts, bounded-replay windows, rings

    @property
    def engine(self) -> EngineModel:
        return self._engine

    @property
    def unit_bytes(self) -> int:
        return self.block_bytes

    def on_stage(self, layer_ids: "frozenset[int]") -> "VllmPlan":
        """This plan as one pipeline-parallel worker holds it (``--pp``): the global groups stay the scheduler's
        (every group keeps its block table), but the worker's bytes per block come from its own layers only —
        0.33 ``v1/core/kv_cache_planning.py`` ``_project_kv_cache_groups_to_worker`` (:1413-1458) filters each
        global group to the worker's layers and ``get_kv_cache_configs`` (:1560-1568) divides that worker's
        memory by ``_pool_bytes_per_block_from_builder`` of the projection (a group with none of its layers
        holds no tensor there). The 0.25/0.26 layer tuples are not projected (EngineRefused by the caller)."""
        if self.release.layer_tuples:
            raise NotImplementedError(f"{self.release.engine}: layer tuples are not projected per pipeline stage")
        projected = [KvGroup(g.index, tuple(s for s in g.specs if s.layer_id in layer_ids)) for g in self.groups]
        projected = [g for g in projected if g.specs]
        if not projected:
            return self
        return replace(self, block_bytes=bytes_per_block(projected))

    @property
    def release(self) -> VllmRelease:
        return getattr(self._engine, "release", V033)

    @property
    def window_tokens(self) -> int:
        """The in-flight tokens the windowed specs are sized for: 0.26+ ``VllmConfig.max_in_flight_tokens``
        (max_concurrent_batches x max_num_batched_tokens); 0.25 and older ``max_num_batched_tokens``
        (0.25.0 v1/kv_cache_interface.py SlidingWindowSpec.max_memory_usage_bytes)."""
        r = self.resolved
        return r.max_in_flight_tokens if self.release.windows_in_flight else r.max_num_batched_tokens

    def in_flight(self, phase: Phase | str) -> int:
        if phase == Phase.DECODE:
            return 1 + self.resolved.num_speculative_tokens
        return self.window_tokens

    def _uses(self, blocks: list[int]) -> tuple[PoolUse, ...]:
        return tuple(PoolUse(f"group {g.index}: {g.label}", n, self.block_bytes, group_class(g),
                             sum(s.unpadded_page_bytes for s in g.specs))
                     for g, n in zip(self.groups, blocks))

    def footprint(self, tokens: int, phase: Phase = Phase.DECODE) -> Footprint:
        q = self.in_flight(phase)
        blocks = [g.blocks_held(tokens, self.max_seq_len, q) for g in self.groups]
        return Footprint(tokens, Phase(phase).value, q, self._uses(blocks))

    def startup_budget(self) -> Footprint:
        q = self.window_tokens
        blocks = [g.blocks_per_request(self.max_seq_len, q) for g in self.groups]
        return Footprint(self.max_seq_len, "startup", q, self._uses(blocks))

    def budget_blocks_per_request(self) -> int:
        """The divisor of "Maximum concurrency" (``get_max_concurrency_for_kv_cache_config``)."""
        return self.blocks_per_request_for(self.window_tokens)

    def blocks_per_request_for(self, in_flight_tokens: int) -> int:
        """The "Maximum concurrency" divisor with windows sized for ``in_flight_tokens``: 0.27 on the groups'
        blocks per request summed; 0.25/0.26 cdiv(sum of groups' pages x page sums, the first group's page sum)
        (``kv_cache_utils.tuple_blocks_per_request``)."""
        if self.release.layer_tuples and self.release.tuple_pages_padded:
            return tuple_blocks_per_request(list(self.groups), self.max_seq_len, in_flight_tokens)
        return sum(g.blocks_per_request(self.max_seq_len, in_flight_tokens) for g in self.groups)

    def needed_bytes(self, max_model_len: int) -> int:
        """_max_memory_usage_bytes_from_groups: 0.33 bytes_per_block x sum of groups' blocks per request;
        0.25/0.26 the layer-tuple sum (``kv_cache_utils.tuple_needed_bytes``)."""
        q = self.window_tokens
        if self.release.layer_tuples:
            return tuple_needed_bytes(list(self.groups), max_model_len, q)
        return self.block_bytes * sum(g.blocks_per_request(max_model_len, q) for g in self.groups)

    def estimate_max_model_len(self, available: int) -> int:
        """_estimate_max_model_len_from_groups: binary search, 0 if one token does not fit."""
        if self.needed_bytes(1) > available:
            return 0
        left, right, result = 1, self.max_seq_len, 1
        while left <= right:
            mid = (left + right) // 2
            if self.needed_bytes(mid) <= available:
                result, left = mid, mid + 1
            else:
                right = mid - 1
        return result

    def size_pool(self, kv_memory_bytes: int) -> PoolSizing:
        bpb, rel = self.block_bytes, self.release
        # 0.33 get_kv_cache_configs: the null block is reserved for the check; 0.25/0.26 check the whole budget
        check = kv_memory_bytes - bpb if rel.null_block_in_check else kv_memory_bytes
        where = "v1/core/kv_cache_planning.py" if rel.null_block_in_check else "v1/core/kv_cache_utils.py"
        rule = f"{rel.src} {where} _check_enough_kv_cache_memory"
        if check <= 0:
            raise _refuse(rule, "--kv-memory", f"> {kv_memory_bytes - check} bytes", str(kv_memory_bytes),
                          "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
                          engine=rel.engine)
        needed = self.needed_bytes(self.max_seq_len)
        if needed > check:
            est = self.estimate_max_model_len(check)
            hint = f"Based on the available memory, the estimated maximum model length is {est}. " if est > 0 else ""
            raise _refuse(rule, "--kv-memory", f">= {needed + kv_memory_bytes - check} bytes", str(kv_memory_bytes),
                          f"To serve at least one request with the model's max seq len ({self.max_seq_len}), "
                          f"({format_gib(needed)} GiB KV cache is needed, which is larger than the available KV "
                          f"cache memory ({format_gib(check)} GiB). {hint}Try increasing `gpu_memory_utilization` "
                          "(which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when "
                          "initializing the engine.", engine=rel.engine)
        num_blocks = kv_memory_bytes // bpb
        per_request = self.budget_blocks_per_request()
        concurrency = num_blocks / per_request  # get_max_concurrency_for_kv_cache_config (float, as Python does)
        tokens = int(concurrency * self.max_seq_len)  # get_kv_cache_capacity
        size = f"GPU KV cache size: {tokens:,} tokens"
        conc = f"Maximum concurrency for {self.max_seq_len:,} tokens per request: {concurrency:.2f}x"
        lines = (f"{size}, {conc}",) if rel.one_log_line else (size, conc)
        pools = (PoolSize("shared block pool", num_blocks, bpb, "one block = every group's pages side by side; "
                          "block 0 is the null block"),)
        return PoolSizing(kv_memory_bytes=kv_memory_bytes, unit_name="block", unit_bytes=bpb, total_units=num_blocks,
                          usable_units=num_blocks - 1, max_running=self.resolved.max_num_seqs,
                          max_seq_len=self.max_seq_len, budget_units_per_request=per_request,
                          concurrency=concurrency, tokens=tokens, pools=pools, reserved_bytes=bpb,
                          log_lines=lines, extra=(("num_blocks", num_blocks), ("release", rel.engine),
                                                    ("blocks_per_request", per_request),
                                                    ("bytes_per_block", bpb)))

    def admits(self, sizing: PoolSizing, used_units: int, running: int, tokens: int) -> bool:
        """scheduler: running < max_num_seqs; kv_cache_manager.allocate_slots (full_sequence_must_fit):
        sum of min(cdiv(tokens, block), cap) <= free blocks."""
        if running >= sizing.max_running:
            return False
        need = self.footprint(min(tokens, self.max_seq_len), Phase.PREFILL).units
        return need <= sizing.usable_units - used_units

    @property
    def runtime_modelled(self) -> bool:
        return True

    @property
    def replay_refusal(self) -> str | None:
        rel = self.release
        if rel.scheduler_replayed:
            return None
        return (f"the step-by-step replay models vLLM {V033.src.removeprefix('vllm-')}'s scheduler; {rel.engine}'s "
                f"start-up is modelled (check --engine {rel.engine}), its scheduler is not: use --engine {V033.engine}")

    def prefill_lookahead(self) -> int:
        """VllmConfig.num_prefill_lookahead_tokens (config/vllm.py:655-675): N for multi-module MTP, 1 for one module."""
        n = self.resolved.num_speculative_tokens
        if not n:
            return 0
        if self.shared:  # DSpark is no multi-module MTP (speculative.py:2188-2194): the next token only
            return 1
        mtp = sum(1 for s in self.specs if s.is_draft)
        return n if min(mtp, n) > 1 else 1

    def hash_lookahead(self) -> int:
        """VllmConfig.num_hash_lookahead_tokens (config/vllm.py:677-690) with prefix caching on: MTP is an
        EAGLE-style drafter needing the block drop (speculative.py:2122-2149), no KV connector, and
        ``disable_lookahead_block_hashes`` off, so each block hash covers the prefill lookahead tokens after
        it (and the scheduler then turns the EAGLE block drop off, sched/scheduler.py:342-345)."""
        if self.shared:  # DSpark needs no EAGLE block drop (speculative.py:2122-2128): the legacy hashes
            return 0
        return self.prefill_lookahead()

    def runtime(self, sizing: PoolSizing, trace, options):
        """vLLM 0.33.0's scheduler and KV cache manager over ``trace`` (``scheduler``); only for a release
        whose scheduler that is (``replay_refusal``)."""
        if self.replay_refusal:
            raise NotImplementedError(self.replay_refusal)
        from csa_plan.planner.engines.vllm.compiled import compiled_replay
        from csa_plan.planner.engines.vllm.kv_cache_manager import GroupSpec
        from csa_plan.planner.engines.vllm.scheduler import VllmRuntime

        r = self.resolved
        q = r.max_in_flight_tokens
        # V4.1 (shared): rings never cached; windows under SWA bounded replay not cached either
        # (config/cache.py:367-372 swa_bounded_replay on with model runner V2, sparse_swa.py:128 bounded_replay)
        specs = tuple(GroupSpec(block_size=g.first.block_size,
                                window=g.first.sliding_window if g.first.kind is SpecKind.SLIDING else None,
                                extra_retained=g.first.extra_retained_tokens,
                                admission_cap=(g.blocks_per_request(self.max_seq_len, q)
                                               if g.first.kind is SpecKind.SLIDING else None),
                                ring=g.first.kind is SpecKind.CIRCULAR,
                                cacheable=not (self.shared and g.first.kind is not SpecKind.FULL))
                      for g in self.groups)
        replay = next((g.first.sliding_window for g in self.groups if self.shared and g.first.kind is SpecKind.SLIDING),
                      0)  # SlidingWindowMLASpec.prefix_replay_tokens (kv_cache_interface.py:1031-1033)
        caching = True if options.enable_prefix_caching is None else options.enable_prefix_caching
        prefix = None
        if caching:
            from csa_plan.planner.engines.vllm.prefix_caching import PrefixCache

            prefix = PrefixCache(trace, specs, self, hash_lookahead_tokens=self.hash_lookahead())
        return VllmRuntime(trace, specs, tuple(f"group {g.index}: {g.label}" for g in self.groups),
                           sizing.total_units, self.max_seq_len, r.max_num_batched_tokens, r.max_num_seqs,
                           r.async_scheduling, r.num_speculative_tokens, r.num_speculative_tokens,
                           self.prefill_lookahead(), prefix=prefix, label=self.engine.label(),
                           acceptance=options.spec_acceptance, compiled=compiled_replay,
                           prefix_replay_tokens=replay)

    def tp_rules(self) -> tuple[TpRule, ...]:
        src = (f"{self.release.src} every DeepSeek-V4 spec has num_kv_heads=1, max_tp_shards=1 (attention.py ~860-926, "
               "compressor.py ~181-192, sparse_swa.py ~120-146); kv_cache_planning.py kv_cache_groups_tp_replicas")
        roles = dict.fromkeys(s.role for s in self.specs)
        return tuple(TpRule(role, "replicated", src) for role in roles)

    def startup_note(self) -> str:
        r = self.resolved
        q, d = self.window_tokens, self.in_flight(Phase.DECODE)
        budget = self.budget_blocks_per_request()
        held = self.footprint(self.max_seq_len, Phase.DECODE).units
        alt_tokens = 2048 if r.max_num_batched_tokens > 2048 else r.max_num_batched_tokens
        alt_q = alt_tokens * (r.max_concurrent_batches if self.release.windows_in_flight else 1)
        alt = self.blocks_per_request_for(alt_q)
        mode = "async scheduling" if r.async_scheduling else "no async scheduling"
        batches = (f"{r.max_concurrent_batches} concurrent batches, {mode}, x" if self.release.windows_in_flight
                   else f"{self.release.src} sizes windows for one batch whatever the scheduling ({mode}):")
        return self._shared_note() + (f"{self.release.engine}: vLLM budgets every windowed group for {q:,} in-flight tokens ({batches} "
                f"--max-num-batched-tokens {r.max_num_batched_tokens:,}): "
                f"{budget:,} blocks per request at start-up, while a decoding request holds {held:,} "
                f"({d} token{'s' if d > 1 else ''} in flight). That budget is the divisor of its 'Maximum "
                f"concurrency'; --max-num-batched-tokens {alt_tokens:,} would make it {alt:,} blocks.")

    def shared_bytes_per_token(self) -> tuple[int, int] | None:
        """DeepSeek-V4.1: (compressed records + index keys per token, unpadded: DEEPSEEK_V41.md §4's 1,790 on
        sm_90 / 1,050 on sm_100 with nvfp4_ds_mla; the same as vLLM's pages hold them, block alignment
        included, x the block's tokens) — None for V4. Both exclude windows and rings (per request, not per token)."""
        if not self.shared:
            return None
        full = [s for s in self.specs if s.kind is SpecKind.FULL]
        exact = sum(s.state_content_bytes * self.resolved.block_size // s.tokens_per_state for s in full)
        paged = sum(s.page_bytes for s in full)
        return exact // self.resolved.block_size, paged / self.resolved.block_size

    def _shared_note(self) -> str:
        bpt = self.shared_bytes_per_token()
        if bpt is None:
            return ""
        recs = sorted({s.state_content_bytes for s in self.specs if s.role.endswith("records")})
        keys = sorted({s.state_content_bytes for s in self.specs if s.role.endswith("index keys")})
        owners = sorted({s.layer_id for s in self.specs if s.role.endswith("records")})
        windows = sum(1 for s in self.specs if s.kind is SpecKind.SLIDING)
        rings = [s for s in self.specs if s.kind is SpecKind.CIRCULAR]
        ring = (f"; {len(rings)} carry rings of {rings[0].block_size} rows x {V41_RING_ROW_BYTES:,} B, one block each "
                "per request" if rings else "")
        return (f"{self.release.engine} shared state: {len(owners)} kv sources {owners} own the compressed records "
                f"({'/'.join(map(str, recs))} B, {self.resolved.kv_cache_dtype}) and index keys "
                f"({'/'.join(map(str, keys))} B): {bpt[0]:,} B/token unpadded, {bpt[1]:,.1f} B/token as vLLM pages "
                f"them; {windows} windows ({V41_SWA_BYTES[self.resolved.sm100]} B rows, not prefix-cached: bounded "
                f"replay){ring}. ")

    def describe(self) -> dict[str, Any]:
        q = self.window_tokens
        d = self.in_flight(Phase.DECODE)
        return {
            "release": self.release.engine,
            "startup_note": self.startup_note(),
            "startup_budget_setting": "--max-num-batched-tokens",
            "layout": "BLHNC (block-outermost: the V4 indexer backend's supported layouts)"
                      + (f"; layer tuples ({self.release.src} grouping, window pages "
                         f"{'padded' if self.release.tuple_pages_padded else 'unpadded'})"
                         if self.release.layer_tuples else "; packed groups"),
            "bytes_per_block": self.block_bytes,
            "shared_state_bytes_per_token": (None if self.shared_bytes_per_token() is None
                                             else {"unpadded": self.shared_bytes_per_token()[0],
                                                   "paged": self.shared_bytes_per_token()[1]}),
            "repeats_per_group": self.repeats_per_group,
            "max_in_flight_tokens": q,
            "max_concurrent_batches": self.resolved.max_concurrent_batches,
            "groups": [{
                "index": g.index, "label": g.label, "spec": g.first.kind.value, "layers": len(g.specs),
                "block_tokens": g.first.block_size, "sliding_window": g.first.sliding_window,
                "page_sum_bytes": g.page_sum_bytes,
                "pages": sorted({s.page_bytes for s in g.specs}),
                "blocks_per_request_startup": g.blocks_per_request(self.max_seq_len, q),
                "blocks_decoding": g.blocks_held(self.max_seq_len, self.max_seq_len, d),
            } for g in self.groups],
            "specs": [{"name": s.name, "role": s.role, "spec": s.kind.value, "block_size": s.block_size,
                       "page_bytes": s.page_bytes, "unpadded_page_bytes": s.unpadded_page_bytes,
                       "sliding_window": s.sliding_window, "is_draft": s.is_draft} for s in self.specs],
        }


@record
class Vllm033(EngineModel):
    """One vLLM release's engine model; ``release`` holds what that release decides differently."""

    release: VllmRelease = field(default=None)  # type: ignore[assignment]  # set for every registered release

    def configure(self, model, settings: EngineSettings, max_seq_len: int) -> VllmPlan:
        rel = self.release or V033
        src = rel.src
        shared = any(d.sharing is not None for d in model.layers)
        if shared and not rel.shared_state:  # the commands refuse this before (shared_engines.py); kept typed here
            raise _refuse(f"{src} (no models/deepseek_v41/: vLLM 0.30.0 added it)", "--engine", "vllm >= 0.30",
                          rel.engine, "this release cannot load a model with cross-layer shared compressed state "
                          "(DeepSeek-V4.1)", engine=rel.engine)
        named = settings.release_named
        if shared and named:
            from csa_plan.planner.shared_engines import before_modelled

            if before_modelled(named):  # vLLM 0.30-0.32: the release map hands them 0.33's V4 rules, not its V4.1 ones
                raise _refuse(f"{named} (0.30.0-0.32.x models/deepseek_v41/: 528 / 584 B records only, no SWA "
                              "bounded replay, no mega attention: DEEPSEEK_V41.md §5)", "--engine", "vllm >= 0.33",
                              named, "this release runs DeepSeek-V4.1 with other KV rules than vLLM 0.33, which "
                              "csa-plan does not model (LayoutNotModelled); name --engine vllm-0.33 for 0.33's pool",
                              engine=named)
        resolved, out = resolve(replace(settings, release_named=None) if named else settings, rel, shared=shared)
        specs = (v41_layer_specs(model.layers, resolved, rel) if shared
                 else layer_specs(model.layers, resolved, model.num_mtp_layers, rel))
        where = "v1/core/kv_cache_utils.py" if rel.layer_tuples else "v1/core/kv_cache_planning.py"
        try:
            if rel.layer_tuples:
                groups, repeats = tuple_groups(specs, pad_window_pages=rel.tuple_pages_padded), None
                block_bytes = (tuple_bytes_per_block(groups) if rel.tuple_pages_padded
                               else largest_group_bytes(groups))
            else:
                groups, repeats = kv_cache_groups(specs)
                block_bytes = bytes_per_block(groups) if groups else 0
        except NotImplementedError as exc:
            raise _refuse(f"{src} {where} get_kv_cache_groups", "model", "DeepSeek-V4 specs",
                          "other", str(exc), engine=rel.engine) from None
        if not groups:
            raise _refuse(f"{src} {where} get_kv_cache_groups", "model", "KV cache layers",
                          "none", "the model has no KV cache layers", engine=rel.engine)
        return VllmPlan(model_name=model.name, max_seq_len=max_seq_len, settings=out, resolved=resolved,
                        specs=tuple(specs), groups=tuple(groups), repeats_per_group=repeats,
                        block_bytes=block_bytes, _engine=self, shared=shared)


V033 = VllmRelease(engine=ENGINE, src=SRC, layer_tuples=False, windows_in_flight=True, extra_retained=True,
                   null_block_in_check=True, tier_160_gib=True, one_log_line=True, scheduler_replayed=True,
                   shared_state=True)
# 0.34.0: 0.33's KV planning for DeepSeek-V4, unchanged where it decides the pool (read against 0.33.0):
# v1/core/kv_cache_planning.py _get_packed_kv_cache_groups (:958-1087, the same body), _approximate_gcd (:923),
# get_kv_cache_configs with the null block in the check (:215, :1635), extra_retained_tokens (:1742);
# v1/kv_cache_interface.py SlidingWindowSpec.max_memory_usage_bytes for max_in_flight_tokens (:548, :899, :966);
# the V4 specs (models/deepseek_v4/attention.py, compressor.py, v1/attention/backends/mla/sparse_swa.py: the same
# spec arguments); config/vllm.py max_concurrent_batches / max_in_flight_tokens (:560-577);
# engine/arg_utils.py get_batch_defaults (the >= 160 GiB tier :3010); the one-line log (kv_cache_utils.py:1169).
# What differs: the extensible KV cache, on by default on CUDA (config/cache.py:395; config/vllm.py:3180-3263),
# sizes the pool after warmup and CUDA-graph capture from measured memory with gpu_memory_utilization 1.0
# (v1/worker/gpu_worker.py:1225-1240, v1/worker/extensible_kv_cache.py:592-618).
# In motion 0.34.0 is 0.33.0's replay (read against 0.33.0; docs/vllm-runtime.md "vLLM 0.34"): the pool is settled
# once, before the scheduler exists (v1/engine/core.py:177 _initialize_kv_caches -> :408-418
# finalize_extensible_kv_cache + extend_kv_cache, then :194 Scheduler(...)), and nothing grows it while serving
# (extend_kv_cache has no other caller; ensure_kv_cache_blocks only in warmup, v1/worker/gpu/warmup.py:271-640);
# kv_cache_coordinator.py is unchanged; the scheduler's changes are off DeepSeek-V4's serving path: cache-aware
# admission defaults off (config/scheduler.py:223 window 0; sched/scheduler.py:428-438), async KV loads need a KV
# connector (:235-238, :1325-1334), resumed requests are sent as new ones (:1619-1626, output only), drafts
# skipped without Model Runner V2's condition (:321, the worker's skip_drafts only); the lookaheads come from the
# speculator config classes with 0.33's values (mtp/config.py, eagle/config.py:56, speculator_config.py:122-125,
# multi_module_mtp/config.py:14-18; config/vllm.py:633-655); block_pool.py's map and free paths keep 0.33's order
# (BlockHashToBlockMap :56-104, free_blocks :798-839 with evict_first unused); request.py's cache-hit limit is
# num_tokens - 1 without prompt logprobs (:352-377). tools/crosscheck_vllm_runtime.py checks it step by step.
V034 = VllmRelease(engine="vllm-0.34", src="vllm-0.34.0", layer_tuples=False, windows_in_flight=True,
                   extra_retained=True, null_block_in_check=True, tier_160_gib=True, one_log_line=True,
                   scheduler_replayed=True, extensible_kv_cache=True, shared_state=True)
# 0.34.0 builds DeepSeek-V4.1's specs as 0.33.0 does (read against 0.33.0): attention.py get_kv_cache_spec and
# DeepseekV4IndexerCache.get_kv_cache_spec, compressor.py CompressorStateCache (:236-266, the same ring rows),
# sparse_swa.py DeepseekV4SWACache, the backends' kernel block sizes and CircularBufferSpec are unchanged; mega
# attention's selection adds only ``lora_config is None`` (nvidia/model.py:264).
# 0.26.0: windows for max_in_flight_tokens (v1/kv_cache_interface.py ~566-597, config/vllm.py ~525-533)
V026 = VllmRelease(engine="vllm-0.26", src="vllm-0.26.0", layer_tuples=True, windows_in_flight=True,
                   extra_retained=False, null_block_in_check=False, tier_160_gib=False, one_log_line=False,
                   fp4_keys_fp8_sized=True)
# 0.25.0: the same grouping code as 0.26.0; windows for one max_num_batched_tokens
V025 = VllmRelease(engine="vllm-0.25", src="vllm-0.25.0", layer_tuples=True, windows_in_flight=False,
                   extra_retained=False, null_block_in_check=False, tier_160_gib=False, one_log_line=False,
                   fp4_keys_fp8_sized=True)
# 0.27.0 (0.27.1 the same on every rule: the wheels differ only in _version.py and models/qwen3_dspark.py):
# 0.26.0's layer tuples without the window-page padding (v1/core/kv_cache_utils.py:1670-1754), one block the
# largest group's pages (_get_packed_kv_cache_layout :1283-1305), the "Maximum concurrency" divisor the groups'
# blocks summed (:937-959), an MXFP4 indexer cache at 68 B a key (models/deepseek_v4/attention.py:782-785, no
# FP8-sized allocation); windows for max_in_flight_tokens (v1/kv_cache_interface.py:543), two log lines
# (kv_cache_utils.py:2235-2240), no extra retained tokens, no null block in the check, no 160 GiB tier.
V027 = replace(V026, engine="vllm-0.27", src="vllm-0.27.0", tuple_pages_padded=False, fp4_keys_fp8_sized=False)
# 0.28.0: 0.27.0's layer tuples (v1/core/kv_cache_utils.py:1623-1707, _get_packed_kv_cache_layout :1249,
# get_max_concurrency_for_kv_cache_config :917-939; the same bodies) with extra_retained_tokens on every
# SlidingWindowSpec under multi-module MTP (get_kv_cache_configs :2134-2147), the >= 160 GiB tier of
# get_batch_defaults (engine/arg_utils.py:2582) and one log line (update_kv_cache_capacity :1861-1875, called by
# v1/engine/core.py:325); the memory check still plans against the whole budget (_check_enough_kv_cache_memory
# :731, no null block). The V4 specs: 0.27's arguments, the 584 B record now passed as state_content_bytes
# (models/deepseek_v4/attention.py:737, v1/attention/backends/mla/sparse_swa.py:104), the same pages.
V028 = replace(V027, engine="vllm-0.28", src="vllm-0.28.0", extra_retained=True, tier_160_gib=True, one_log_line=True)


def _sources(src: str, planning: str) -> tuple[str, ...]:
    return (f"{src} {planning}", f"{src} v1/core/kv_cache_utils.py", f"{src} v1/kv_cache_interface.py",
            f"{src} models/deepseek_v4/attention.py", f"{src} models/deepseek_v4/compressor.py",
            f"{src} v1/attention/backends/mla/sparse_swa.py", f"{src} config/vllm.py", f"{src} engine/arg_utils.py")


TUPLES = "v1/core/kv_cache_utils.py _get_kv_cache_groups_uniform_groups"
PACKED = "v1/core/kv_cache_planning.py"


def _engine_model(rel: VllmRelease, planning: str, summary: str) -> Vllm033:
    """The registered engine model of one release (its name, version and sources from the release record)."""
    return Vllm033(name=rel.engine, engine_name="vLLM", version=rel.src.removeprefix("vllm-"), summary=summary,
                   options=ACCEPTS, sources=_sources(rel.src, planning), release=rel,
                   models_shared_state=rel.shared_state, decode_side_prefix_cache=True)


VLLM_033 = _engine_model(V033, PACKED, "vLLM 0.33.0: DeepSeek-V4 specs packed into one block pool (bytes_per_block = "
                                       "largest group), windowed groups budgeted for the in-flight tokens")
VLLM_034 = _engine_model(V034, PACKED, "vLLM 0.34.0: vLLM 0.33.0's DeepSeek-V4 KV planning (packed groups, one block "
                                       "pool, windows for the in-flight tokens); the pool sized after warmup by the "
                                       "extensible KV cache; 0.33.0's scheduler in motion")
VLLM_028 = _engine_model(V028, TUPLES, "vLLM 0.28.0: DeepSeek-V4 specs in unpadded layer tuples (one block = the "
                                       "largest group's pages), windows for the in-flight tokens and MTP's extra "
                                       "retained tokens, one log line")
VLLM_027 = _engine_model(V027, TUPLES, "vLLM 0.27.0: DeepSeek-V4 specs in unpadded layer tuples (one block = the "
                                       "largest group's pages), windowed groups budgeted for the in-flight tokens")
VLLM_026 = _engine_model(V026, TUPLES, "vLLM 0.26.0: DeepSeek-V4 specs in layer tuples (one full-attention group, "
                                       "window groups padded to its pages), windowed groups budgeted for the "
                                       "in-flight tokens")
VLLM_025 = _engine_model(V025, TUPLES, "vLLM 0.25.0: 0.26.0's layer tuples, windowed groups budgeted for one "
                                       "--max-num-batched-tokens")
# The newest modelled release: what ``--engine vllm`` names.
VLLM_RELEASES = (VLLM_034, VLLM_033, VLLM_028, VLLM_027, VLLM_026, VLLM_025)
