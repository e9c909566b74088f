"""What each engine keeps of the card and reserves at start-up besides weights and the state pool.

Each engine is a ``StartupRules`` entry in ``STARTUP`` (a new engine is a new entry). The
figures are the engines' own rules from their releases (file:line into vLLM 0.33.0 and
SGLang 0.5.23); a figure no rule gives is marked as csa-plan's estimate, and ``--reserved``
replaces all of them.
"""

from __future__ import annotations

from typing import Any, Callable

from csa_plan.planner.budget.stage import StageContext
from csa_plan.planner.budget.steps import Step, StepKind, Usable
from csa_plan.planner.errors import BadInput
from csa_plan.planner.record import record
from csa_plan.planner.units import MiB, ceil_div, round_up, scale_ceil, scale_trunc


@record
class StartupRules:
    """One engine's start-up rules: its usable share of the card, its reserves, its resolved settings."""

    name: str
    usable: Callable[[StageContext], Usable]
    reserves: Callable[[StageContext], tuple[Step, ...]]
    resolved: Callable[[StageContext], dict[str, Any]]   # the settings after defaults, for the output


# --- vLLM 0.33.0 -----------------------------------------------------------------------------------

VLLM_UTIL_DEFAULT = 0.92  # config/cache.py:215


def _vllm_defaults(c: StageContext, release: str) -> tuple[int, int, str]:
    """(max_num_batched_tokens, max_num_seqs, rule) by the engine model's default rule for that release
    (one copy: ``engines/vllm/startup.py default_batched_tokens``, by card memory, device name and usage;
    0.25-0.27 lack 0.28's >= 160 GiB tier)."""
    from csa_plan.planner.engines.settings import gpu_target
    from csa_plan.planner.engines.vllm.startup import VLLM_RELEASES, default_batched_tokens

    rel = {m.release.engine: m.release for m in VLLM_RELEASES}[release]  # 0.34: 0.33's get_batch_defaults body
    return default_batched_tokens(gpu_target(c.settings.gpu, memory_bytes=c.card_bytes),
                                  c.settings.usage or "serve", rel)


def _vllm_mnbt(c: StageContext, release: str = "vllm-0.33") -> tuple[int, str]:
    """vLLM's max_num_batched_tokens: the option, else the release's default rule."""
    if c.settings.max_num_batched_tokens is not None:
        return c.settings.max_num_batched_tokens, "option --max-num-batched-tokens"
    tokens, _, rule = _vllm_defaults(c, release)
    return tokens, rule


def vllm_batched_tokens(c: StageContext, release: str = "vllm-0.33") -> int:
    """vLLM's max_num_batched_tokens at this stage (its Engram staging buffer is sized by it)."""
    return _vllm_mnbt(c, release)[0]


def _vllm_max_num_seqs(c: StageContext, release: str) -> int:
    if c.settings.max_num_seqs is not None:
        return c.settings.max_num_seqs
    # a defaulted max_num_seqs is capped by max_num_batched_tokens (engine/arg_utils.py, as engines/vllm/startup.resolve)
    return min(_vllm_defaults(c, release)[1], _vllm_mnbt(c, release)[0])


def _vllm_usable(c: StageContext) -> Usable:
    util = c.settings.gpu_memory_utilization
    source = "option --gpu-memory-utilization" if util is not None else "config/cache.py:215 default"
    util = VLLM_UTIL_DEFAULT if util is None else util
    if not 0 < util <= 1:
        raise BadInput("options", "--gpu-memory-utilization", f"must be in (0, 1], got {util}")
    requested = scale_ceil(c.card_bytes, util)  # ceil(total x Fraction(str(util))): v1/worker/utils.py:716-726
    return Usable(requested, f"gpu_memory_utilization {util}",
                  f"requested = ceil(total x {util}) (v1/worker/utils.py:716-726; {source})")


def _rope_tables(c: StageContext) -> int:
    """Distinct RoPE kinds on the stage: YaRN on compressed layers, plain on sliding-window ones."""
    if c.dims is None:
        return 0
    ratios = c.dims.ratios_of(c.layers)
    return int(any(r > 1 for r in ratios)) + int(any(r <= 1 for r in ratios))



def _model_buffers(c: StageContext, mnbt: int, mtp_here: bool, tables: int, rope_src: str, hc_src: str,
                   mtp_src: str) -> list[Step]:
    """The buffers V4 and V4.1 allocate alike at model build (each release's file:line passed in): the RoPE
    cos/sin tables (one per RoPE kind), the first stage's hc broadcast, the MTP/DSpark hidden buffer."""
    d = c.dims
    steps = [Step(StepKind.RESERVE, f"RoPE cos/sin tables, {tables} x fp32 [{d.max_position_embeddings}, "
                  f"{d.rope_head_dim}]", tables * d.max_position_embeddings * d.rope_head_dim * 4,
                  f"{rope_src}; rotary_embedding/__init__.py:74-85 (cached by key)")]
    if c.first:
        mix = (2 + d.hc_mult) * d.hc_mult
        steps.append(Step(StepKind.RESERVE, f"hc_attn_fn_broadcast [{mix}, {d.hidden}] fp32", mix * d.hidden * 4,
                          hc_src))
    if mtp_here:
        steps.append(Step(StepKind.RESERVE, f"MTP hidden buffer [{mnbt}, {d.hc_mult * d.hidden}] bf16",
                          mnbt * d.hc_mult * d.hidden * 2, mtp_src))
    return steps


def _workspace_steps(c: StageContext, release: str, mnbt: int, requests: list[Any], mtp_here: bool,
                     v41: bool) -> list[Step]:
    """The profile run's FlashMLA, indexer and MoE requests share one buffer sized by the largest
    (budget/vllm_workspace.py); a V4.1 DSpark drafter under 0.33's Model Runner V2 has a lane of its own."""
    from csa_plan.planner.budget.vllm_nonkv import V2_RUNNER, moe_tp_of
    from csa_plan.planner.budget.vllm_workspace import (draft_lane_step, moe_experts, moe_request,
                                                        shared_workspace_step)
    from csa_plan.planner.engines.settings import gpu_target

    d = c.dims
    moe_tp = moe_tp_of(c.placement)
    pick = moe_experts(release, gpu_target(c.settings.gpu, memory_bytes=c.card_bytes).capability[0],
                       c.settings.moe_backend, d.expert_dtype, c.placement.dp)
    if pick.refused:  # the engine would not start: an option that cannot apply is refused, not costed
        raise BadInput("options", "--moe-backend", pick.why)
    if d.experts_per_token and d.moe_intermediate:
        moe = moe_request(release, d, moe_tp, mnbt, pick)
        requests = [*requests, *((moe,) if moe is not None else ())]
    steps = [shared_workspace_step(release, tuple(requests))]
    if v41 and mtp_here and release in V2_RUNNER and d.experts_per_token and d.moe_intermediate:
        steps.append(draft_lane_step(release, d, moe_tp, mnbt, pick))
    return steps


def _topk_buffer_step(mnbt: int, topk: int, drafter: bool, src: str, drafter_src: str) -> Step:
    """The model's top-k index buffer [mnbt, topk] int32, and the drafter's own copy when it drafts here."""
    return Step(StepKind.RESERVE, f"top-k index buffer [{mnbt}, {topk}] int32", mnbt * topk * 4 * (2 if drafter else 1),
                src + (f"; {drafter_src}" if drafter else ""))


def _vllm_reserves(c: StageContext, release: str = "vllm-0.33") -> tuple[Step, ...]:
    if c.dims is None:
        return (Step(StepKind.RESERVE, "engine buffers (not modelled: the config lacks DeepSeek-V4 fields)", 0,
                     "pass --reserved"),)
    d, mnbt = c.dims, _vllm_mnbt(c, release)[0]
    if d.shared:
        return _vllm_v41_reserves(c, release, mnbt)
    L = c.max_seq_len
    ratios = d.ratios_of(c.layers)
    mtp_here = c.settings.speculative_tokens > 0 and c.last
    steps = [_topk_buffer_step(mnbt, d.index_topk, mtp_here, "models/deepseek_v4/nvidia/model.py:848-852",
                               "drafter's: nvidia/mtp.py:221-225")]
    steps += _model_buffers(c, mnbt, mtp_here, _rope_tables(c),
                            "models/deepseek_v4/common/rope.py:28-52",
                            "models/deepseek_v4/nvidia/model.py:1210-1223",
                            "models/deepseek_v4/nvidia/model.py:902-913")
    from csa_plan.planner.budget.vllm_workspace import flashmla_request, indexer_request, indexer_rows

    requests = []
    compressed = [r for r in ratios if r > 1]
    if compressed:  # the smallest ratio gathers the most rows (N = ceil(max_model_len / ratio))
        m = ceil_div(L, min(compressed)) + 128 + mnbt
        requests.append(flashmla_request(release, m, mnbt, d.index_topk))
    if 4 in ratios:
        requests.append(indexer_request(release, indexer_rows(release, L, 4)))
        steps.append(Step(StepKind.RESERVE, "sparse-indexer logits dummy (transient)", 512 * MiB,
                          "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB, envs.py:62; sparse_attn_indexer.py:481-510 (a "
                          "torch.empty beside the workspace, not in it)"))
    steps += _workspace_steps(c, release, mnbt, requests, mtp_here, v41=False)
    from csa_plan.planner.budget.vllm_nonkv import vllm_nonkv_steps

    steps += vllm_nonkv_steps(c, release, mnbt, _vllm_max_num_seqs(c, release))
    return tuple(steps)


V41_CARRIED = ("; V4's band, carried: fitted on DeepSeek-V4 start-up logs, no DeepSeek-V4.1 vLLM start-up log "
               "is published")


def _vllm_v41_reserves(c: StageContext, release: str, mnbt: int) -> tuple[Step, ...]:
    """DeepSeek-V4.1's start-up buffers as vLLM 0.33.0's ``models/deepseek_v41/`` allocates them.

    Differences from V4 that move bytes: a candidate-block buffer beside the top-k one; YaRN RoPE on
    every compressed layer (ratio > 0, ratio 1 included); ratio-1 layers, whose compressed axis is
    the token axis, set the FlashMLA prefill workspace (M = max_model_len + window + mnbt) and the
    indexer K-gather workspace (T = the prefill buffer / 1); indexers sit on
    ``index_source_layer_ids``, not on ratio-4 layers. The fitted non-KV terms are V4's, carried.
    """
    from dataclasses import replace

    d = c.dims
    assert d is not None and d.index_layers is not None
    L = c.max_seq_len
    ratios = d.ratios_of(c.layers)
    mtp_here = c.settings.speculative_tokens > 0 and c.last
    steps = [_topk_buffer_step(mnbt, d.index_topk, mtp_here, "models/deepseek_v41/nvidia/model.py:758-763",
                               "DSpark drafter's: nvidia/dspark.py:108-112")]
    if d.candidate_topk_blocks:
        steps.append(Step(StepKind.RESERVE, f"candidate-block buffer [{mnbt}, {d.candidate_topk_blocks}] int32",
                          mnbt * d.candidate_topk_blocks * 4, "models/deepseek_v41/nvidia/model.py:765-779"))
    steps += _model_buffers(c, mnbt, mtp_here, int(any(r > 0 for r in ratios)) + int(any(r == 0 for r in ratios)),
                            "models/deepseek_v41/common/rope.py:17-50 (YaRN on ratio > 0, plain on ratio 0)",
                            "models/deepseek_v41/nvidia/model.py:440-449, 1488-1498",
                            "models/deepseek_v41/nvidia/model.py:930-941")
    from csa_plan.planner.budget.vllm_workspace import flashmla_request, indexer_request, indexer_rows

    compressed = [r for r in ratios if r > 0]
    n, top_k = (ceil_div(L, min(compressed)), d.index_topk) if compressed else (0, 0)
    # ratio-1 layers: M = max_model_len + window + mnbt (attention.py:209 chunk 4, :312 window 128;
    # flash_mla_mega_attn.py:318-332 alike)
    requests = [flashmla_request(release, n + 128 + mnbt, mnbt, top_k, v41=True)]
    indexed = [d.compress_ratios[i] for i in c.layers if i in d.index_layers and d.compress_ratios[i] > 0]
    if indexed:  # FP8 index cache (indexer_kv_dtype auto); models/deepseek_v41/attention.py:1410-1412
        requests.append(indexer_request(release, indexer_rows(release, L, min(indexed))))
        steps.append(Step(StepKind.RESERVE, "sparse-indexer logits dummy (transient)", 512 * MiB,
                          "VLLM_SPARSE_INDEXER_MAX_LOGITS_MB, envs.py:62; sparse_attn_indexer.py:501-506"))
        from csa_plan.planner.budget.vllm_nonkv import graph_plan

        mode = graph_plan(c, release, _vllm_max_num_seqs(c, release), mnbt).mode
        if c.placement.tp > 1 and mode != "FULL":  # mixed mode not FULL (FULL_AND_PIECEWISE: PIECEWISE)
            rows = mnbt * d.index_topk * 4
            steps.append(Step(StepKind.RESERVE, "top-k row-shard exchange (transient, TP > 1)", 2 * rows,
                              "sparse_attn_indexer.py:408-435, 510 (2 x the top-k buffer); "
                              "v1/attention/backends/mla/indexer.py:246-263 (TP > 1, cudagraph mixed mode "
                              "not FULL, default envs)"))
    steps += _workspace_steps(c, release, mnbt, requests, mtp_here, v41=True)
    from csa_plan.planner.budget.vllm_nonkv import vllm_nonkv_steps

    steps += [replace(s, source=s.source + V41_CARRIED) if s.estimate else s
              for s in vllm_nonkv_steps(c, release, mnbt, _vllm_max_num_seqs(c, release))]
    return tuple(steps)


def _vllm_resolved(c: StageContext, release: str = "vllm-0.33") -> dict[str, Any]:
    mnbt, src = _vllm_mnbt(c, release)
    util = c.settings.gpu_memory_utilization
    out = {"max_num_batched_tokens": {"value": mnbt, "source": src},
           "gpu_memory_utilization": {"value": VLLM_UTIL_DEFAULT if util is None else util,
                                      "source": "given" if util is not None else "config/cache.py:215"}}
    if c.dims is not None:
        from csa_plan.planner.budget.vllm_nonkv import graph_plan

        g = graph_plan(c, release, _vllm_max_num_seqs(c, release), mnbt)
        out["cudagraph_mode"] = {"value": g.mode, "source": g.mode_source}
        out["cudagraph_capture_sizes"] = {"value": list(g.sizes), "source": "the release's capture list "
                                          "(config/vllm.py _set_cudagraph_sizes) or --cudagraph-capture-sizes"}
        out["estimate_cudagraphs"] = {"value": g.estimated, "source": "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS "
                                      "(default 1) or --estimate-cudagraphs/--no-estimate-cudagraphs"}
    return out


VLLM = StartupRules("vllm-0.33", _vllm_usable, _vllm_reserves, _vllm_resolved)
# 0.25.0 / 0.26.0: the same start-up rules (csa-plan reads the same buffers in their model code), with
# get_batch_defaults lacking 0.33's >= 160 GiB tier (0.26.0 engine/arg_utils.py ~2460-2479).
VLLM_026 = StartupRules("vllm-0.26", _vllm_usable, lambda c: _vllm_reserves(c, "vllm-0.26"),
                        lambda c: _vllm_resolved(c, "vllm-0.26"))
VLLM_025 = StartupRules("vllm-0.25", _vllm_usable, lambda c: _vllm_reserves(c, "vllm-0.25"),
                        lambda c: _vllm_resolved(c, "vllm-0.25"))
# 0.27.0 / 0.28.0: the same buffers; their release-specific non-KV rules (capture list, model runner, graph
# estimate) are budget/vllm_nonkv.py's, their batch defaults engines/vllm/startup.py's.
VLLM_027 = StartupRules("vllm-0.27", _vllm_usable, lambda c: _vllm_reserves(c, "vllm-0.27"),
                        lambda c: _vllm_resolved(c, "vllm-0.27"))
VLLM_028 = StartupRules("vllm-0.28", _vllm_usable, lambda c: _vllm_reserves(c, "vllm-0.28"),
                        lambda c: _vllm_resolved(c, "vllm-0.28"))


def _vllm_034_refused(c: StageContext) -> Usable:
    """vLLM 0.34.0's extensible KV cache (on by default on CUDA: config/cache.py:395, config/vllm.py:3180-3263)
    sizes the pool after warmup and CUDA-graph capture from measured free memory, at gpu_memory_utilization 1.0
    (config/cache.py:493-501): KV = min(requested - non-KV in use, free + committed - max(1 GiB, 0.75 x peak))
    - max(peak, torch growth) (v1/worker/extensible_kv_cache.py:592-618, :64-71). The memory in use before
    vLLM's first snapshot and the measured peak have no fitted figure for 0.34: refused, not guessed."""
    from csa_plan.planner.engines.engine import EngineRefusal, EngineRefused

    raise EngineRefused(EngineRefusal(
        "vllm-0.34", "csa-plan (not modelled): vllm-0.34.0 config/cache.py:395 enable_extensible_kv_cache, "
        "v1/worker/extensible_kv_cache.py:592-618 measure_kv_cache_bytes", "--kv-memory",
        "the KV memory of the log's 'Memory after warmup' line", "a device budget from flags",
        "vllm-0.34: its KV cache is sized after warmup from measured memory (the extensible KV cache, on by "
        "default: vllm-0.34.0 config/cache.py:395, v1/worker/extensible_kv_cache.py:592-618), which csa-plan does "
        "not model from flags; give the pool with --kv-memory (the 'KV cache blocks (N GiB)' of its 'Memory after "
        "warmup' log line), or name --engine vllm-0.33 for the estimate-based sizing"))


VLLM_034 = StartupRules("vllm-0.34", _vllm_034_refused, lambda c: (), lambda c: {})


# --- SGLang 0.5.23 ---------------------------------------------------------------------------------

def sglang_tier(card_bytes: int, tp_size: int) -> tuple[int, int, str]:
    """(chunked_prefill_size, decode CUDA-graph max_bs) by card memory (arg_groups/memory_hook.py:88-170);
    tp_size is SGLang's, i.e. tp x dp here."""
    mib = card_bytes // MiB
    if mib < 20 * 1024:
        return 2048, 8, "arg_groups/memory_hook.py:90-100 (< 20 GiB)"
    if mib < 35 * 1024:
        return 4096, (48 if tp_size < 4 else 160), "arg_groups/memory_hook.py:101-117 (20-35 GiB)"
    if mib < 60 * 1024:
        return 4096, (32 if tp_size < 4 else 160), "arg_groups/memory_hook.py:118-131 (35-60 GiB)"
    if mib < 90 * 1024:
        return 8192, (256 if tp_size < 4 else 512), "arg_groups/memory_hook.py:132-145 (60-90 GiB: H100, A100)"
    if mib < 160 * 1024:
        return 8192, (256 if tp_size < 4 else 512), "arg_groups/memory_hook.py:146-159 (90-160 GiB: H20, H200)"
    return 16384, 512, "arg_groups/memory_hook.py:160-170 (>= 160 GiB: B200)"


def sglang_reserved_mib(c: StageContext) -> tuple[float, str]:
    """memory_hook.py:281-343 and reserve_for_graph_mb (:357-399); DSv4 has no prefill-graph term."""
    p = c.placement
    tp_size = p.tp * p.dp
    chunk, max_bs, _ = sglang_tier(c.card_bytes, tp_size)
    if c.settings.chunked_prefill_size is not None:
        chunk = c.settings.chunked_prefill_size
    if c.settings.cuda_graph_max_bs is not None:
        max_bs = c.settings.cuda_graph_max_bs
    reserved = 512 + max(chunk, 2048) * 1.5 + tp_size * p.pp / 8 * 1024
    graphs_on = not c.settings.disable_cuda_graph   # --disable-cuda-graph: decode backend DISABLED (:365-369)
    graph = max_bs * 2.0 if graphs_on else 0.0
    if p.dp > 1:  # DP attention (:371-378, whatever the graph backend)
        graph += max_bs * p.dp * 3
        if max_bs > 300:
            graph += max_bs * p.dp * 1.5
    reserved += graph
    mib = c.card_bytes // MiB
    floor = mib > 60 * 1024 and reserved < 10 * 1024
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    deepep = 2 * 1024 if graphs_on and c.settings.moe_a2a_backend == "deepep" else 0  # :402-414, after the floor
    reserved += deepep
    how = (f"512 + max({chunk}, 2048) x 1.5 + {tp_size} x {p.pp} / 8 x 1024 + graphs {graph:g}"
           + (" (--disable-cuda-graph)" if not graphs_on else "") + (" -> floor 10 GiB" if floor else "")
           + (" + DeepEP a2a 2048 (--moe-a2a-backend deepep)" if deepep else ""))
    return reserved, how


def _sglang_fraction(c: StageContext) -> tuple[float, str]:
    if c.settings.mem_fraction_static is not None:
        f = c.settings.mem_fraction_static
        if not 0 < f <= 1:
            raise BadInput("options", "--mem-fraction-static", f"must be in (0, 1], got {f}")
        return f, "option --mem-fraction-static"
    mib = c.card_bytes // MiB
    reserved, how = sglang_reserved_mib(c)
    return round((mib - reserved) / mib, 3), f"round((gpu_mem - reserved) / gpu_mem, 3), reserved MiB = {how} " \
        "(arg_groups/memory_hook.py:281-343, 357-399)"


def _sglang_usable(c: StageContext) -> Usable:
    f, how = _sglang_fraction(c)
    usable = scale_trunc(c.card_bytes, f)  # int(Fraction(total) x Fraction(str(f)))
    return Usable(usable, f"mem_fraction_static {f}",
                  f"KV pool = free after load - pre-load memory x (1 - {f}) "
                  f"(mem_cache/kv_cache_configurator.py:2990-3038); {how}; the pre-load memory's share is its own step")


# SGLang's memory in use before the weights load (CUDA context, NCCL, custom all-reduce): the pool is
# free-after-load - pre-load free x (1 - f), so this much x f is not the pool's. Fitted on
# SemiAnalysisAI/InferenceX#2128 (8x H200, TP 8, "Load weight end ... avail mem=12.25 GB, mem usage=125.65 GB":
# 143,771 MiB - 137.90 GiB = 2.50 GiB); TP 1 has no posted figure (the TP > 1 one is used, band doubled).
SGLANG_PRELOAD_BYTES = 2_684_354_560  # 2.50 GiB
SGLANG_PRELOAD_BAND_PCT = 30
SGLANG_PRELOAD_SOURCE = ("pre_model_load_memory (mem_cache/kv_cache_configurator.py:2990-3038: KV = free after load - "
                         "pre-load free x (1 - f)); fitted on SemiAnalysisAI/InferenceX#2128 (SGLang, 8x H200 TP 8: "
                         "avail mem=12.25 GB + mem usage=125.65 GB of 143,771 MiB)")


def _sglang_reserves(c: StageContext) -> tuple[Step, ...]:
    f, _ = _sglang_fraction(c)
    tp_many = c.placement.tp * c.placement.dp > 1
    pre = Step(StepKind.RESERVE, f"memory in use before the weights load x mem_fraction_static {f}",
               scale_trunc(SGLANG_PRELOAD_BYTES, f),
               SGLANG_PRELOAD_SOURCE + ("" if tp_many else "; TP 1: the TP 8 figure (no TP 1 log), an upper bound"),
               estimate=True, band_pct=SGLANG_PRELOAD_BAND_PCT * (1 if tp_many else 2))
    if c.dims is None or c.dims.shared:  # V4.1 under SGLang: its start-up buffers are not read here yet
        return (pre,)
    d = c.dims
    tables = _rope_tables(c)
    rope = Step(StepKind.RESERVE, f"RoPE freqs_cis, {tables} x complex64 [{d.max_position_embeddings}, "
                f"{d.rope_head_dim // 2}]", tables * d.max_position_embeddings * (d.rope_head_dim // 2) * 8,
                "kernels/ops/attention/dsv4/rope.py:27-68 (lru_cache(2)); models/deepseek_v4.py:1199-1200")
    return (pre, rope, *_sglang_deepep(c))


SGLANG_DEEPEP_RESERVE_MIB = 2 * 1024  # arg_groups/memory_hook.py:402-414: added to the reserve under deepep


def _sglang_deepep(c: StageContext) -> tuple[Step, ...]:
    """DeepEP's buffers under ``--moe-a2a-backend deepep`` (``--deepep-mode auto``, SGLang's default: both
    modes), sized by DeepEP's code (budget/deepep.py). SGLang builds them at the first dispatch
    (token_dispatcher/deepep.py:441, :733), after the KV pool is sized, so they come out of the reserve
    its memory hook widened by 2,048 MiB for deepep, not out of the pool: a 0-byte step that says whether
    they fit that widening."""
    d = c.dims
    if c.settings.moe_a2a_backend != "deepep" or d is None or not d.routed_experts:
        return ()
    from csa_plan.planner.budget.deepep import sglang_deepep_buffers

    p = c.placement
    ep = p.ep if p.ep is not None and p.ep > 1 else p.tp * p.dp
    try:
        b = sglang_deepep_buffers("auto", ep=ep, hidden=d.hidden, num_experts=d.routed_experts)
    except ValueError as exc:
        raise BadInput("options", "--moe-a2a-backend", f"deepep over {ep} ranks: {exc}") from None
    fits = b.total_bytes <= SGLANG_DEEPEP_RESERVE_MIB * MiB
    return (Step(StepKind.RESERVE, f"DeepEP buffers (auto, ep {ep}): NVLink {b.nvl_bytes:,} B + RDMA {b.rdma_bytes:,} B, "
                 f"{'inside' if fits else 'MORE than'} the {SGLANG_DEEPEP_RESERVE_MIB:,} MiB reserved for them", 0,
                 f"{b.why}; allocated at the first dispatch, after the pool (token_dispatcher/deepep.py:441, :733)"),)


def _sglang_resolved(c: StageContext) -> dict[str, Any]:
    chunk, max_bs, src = sglang_tier(c.card_bytes, c.placement.tp * c.placement.dp)
    f, how = _sglang_fraction(c)
    return {"chunked_prefill_size": {"value": c.settings.chunked_prefill_size or chunk, "source": src},
            "cuda_graph_max_bs": {"value": c.settings.cuda_graph_max_bs or max_bs, "source": src},
            "mem_fraction_static": {"value": f, "source": how}}


SGLANG = StartupRules("sglang-0.5.23", _sglang_usable, _sglang_reserves, _sglang_resolved)


# SGLang's A2A backends that set the EP size to the TP size (sglang-0.5.23 sglang/srt/arg_groups/overrides.py:1578-1620
# _A2A_EP_SPANNING_BACKENDS, _a2a_ep_size: "The expert parallel size is adjusted ... to the tensor parallel size")
SGLANG_EP_SPANNING_A2A = ("megamoe", "deepep", "deepep_v2", "mooncake", "nixl", "ascend_fuseep", "flashinfer",
                          "flashinfer_megamoe", "mori", "pplx")


def sglang_placement(placement: Any, engine: str | None, moe_a2a_backend: str | None) -> Any:
    """Under an A2A backend that spans the TP group, SGLang sets ep_size = tp_size (its tp_size is csa-plan's
    tp x dp): overrides.py:1611-1620."""
    if engine is None or not engine.startswith("sglang") or moe_a2a_backend not in SGLANG_EP_SPANNING_A2A:
        return placement
    from dataclasses import replace

    world = placement.tp * placement.dp
    return placement if placement.ep == world else replace(placement, ep=world)


# --- no engine named -------------------------------------------------------------------------------

REFERENCE = StartupRules(
    "reference",
    lambda c: Usable(c.card_bytes, "1", "no engine named: the whole card (no utilisation factor); "
                     "name one with --engine"),
    lambda c: (),
    lambda c: {},
)

STARTUP: dict[str, StartupRules] = {r.name: r for r in (REFERENCE, VLLM, VLLM_034, VLLM_028, VLLM_027, VLLM_026,
                                                         VLLM_025, SGLANG)}


def startup_for(engine: str | None) -> StartupRules:
    return STARTUP.get(engine or "reference", REFERENCE)
