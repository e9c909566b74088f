"""Cross-check csa-plan's engine models against the engines' own planning code (outside CI).

Run it in a separate virtualenv that has vLLM 0.33.0 (``--no-deps``), a CPU build of torch,
the few small packages vLLM's planning modules import, and csa-plan itself (docs/engines.md,
"Cross-checking the engine models"). Nothing here is a csa-plan dependency.

vLLM: the DeepSeek-V4 specs are built with vLLM's own classes (``MLAAttentionSpec``,
``SlidingWindowMLASpec``) from the same arguments the model code passes
(``models/deepseek_v4/attention.py``, ``compressor.py``, ``sparse_swa.py``), with the
backends' ``customize_attention_spec`` applied; then vLLM's start-up planning runs on them:
``get_global_kv_cache_groups`` (-> ``_get_packed_kv_cache_groups``), ``get_kv_cache_configs``
(null block, bytes per block, the memory check), ``generate_scheduler_kv_cache_config``,
``get_kv_cache_capacity`` / ``update_kv_cache_capacity`` (the log line), and
``_max_memory_usage_bytes_from_groups``; the vLLM defaults come from
``EngineArgs.get_batch_defaults`` with the platform answering as an H200 (or B200).
Every figure is compared byte for byte with csa-plan's ``vllm-0.33`` engine model.

vLLM 0.25.0 / 0.26.0 / 0.27.x / 0.28.0 (run in a virtualenv with that release; the installed
``vllm.__version__`` picks the release): the specs are built with that release's classes and arguments, then
its own ``get_kv_cache_groups`` (the layer-tuple grouping), ``_bucket_layers_by_page_size`` (0.25/0.26) or
``_pool_bytes_per_block`` (0.27/0.28: ``_get_packed_kv_cache_layout``), ``_max_memory_usage_bytes_from_groups``,
``get_kv_cache_configs`` and ``get_kv_cache_capacity`` run on them (its log lines captured; 0.28's
``update_kv_cache_capacity`` on the scheduler's config, as its engine core calls it), with ``get_batch_defaults``
on an H200, B200 and L40S, block sizes 64 / 128 / 192 / 200 / 320 / 512, the cards' default batches, MXFP4
index keys on a B200 and a two-MTP-module model (0.28's extra retained tokens); every figure, and each group's
layers and pages, is compared with the ``vllm-0.25`` .. ``vllm-0.28`` engine model.

SGLang: ``kernels/ops/attention/dsv4/kv_layout.py`` (imports without torch) and the
``pool_configurator`` sizing functions (``DSV4PoolConfigurator``); where torchvision is missing (its
model-config registry imports it, the pool sizing never calls it) the stand-in of
``tools/crosscheck_answers.py`` is put in ``sys.modules`` first.

Exit 0 when every case agrees, 1 otherwise; one line per case.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import types
from dataclasses import replace

GiB = 1 << 30
MODELS = ("deepseek-v4-flash", "deepseek-v4-pro")


# -- vLLM -------------------------------------------------------------------------------------


class _Stub(types.SimpleNamespace):
    pass


def vllm_config_stub(max_model_len: int, mnbt: int, max_num_seqs: int, async_on: bool, spec_tokens: int,
                     num_mtp_layers: int, block_size: int):
    """The attributes vLLM's planning functions read, with its own properties evaluated on them."""
    from vllm.config import CacheConfig, VllmConfig

    cache = CacheConfig(block_size=block_size, cache_dtype="fp8_ds_mla")
    cache.kv_cache_layout = "BLHNC"
    speculative = None
    if spec_tokens:
        speculative = _Stub(method="mtp", num_speculative_tokens=spec_tokens,
                            draft_model_config=_Stub(hf_config=_Stub(num_nextn_predict_layers=num_mtp_layers)),
                            use_eagle_block_drop=lambda: False)
        speculative.use_eagle = lambda: True
        from vllm.config.speculative import SpeculativeConfig
        speculative.use_multi_module_mtp = lambda: SpeculativeConfig.use_multi_module_mtp.fget(speculative) \
            if isinstance(SpeculativeConfig.__dict__.get("use_multi_module_mtp"), property) \
            else SpeculativeConfig.use_multi_module_mtp(speculative)
        try:  # 0.34: the lookaheads come from the speculator's config class (speculator_config.py:378-388)
            from vllm.v1.worker.gpu.spec_decode.speculator_config import get_speculator_config_class
        except ImportError:  # 0.33: VllmConfig's own properties read use_eagle / multi-module MTP
            get_speculator_config_class = None
        if get_speculator_config_class is not None:
            # the draft config vLLM 0.34.0 builds for DeepSeek-V4 (speculative.py:863-874): deepseek_mtp, n_predict
            speculative.draft_model_config.hf_config.n_predict = num_mtp_layers
            speculative.draft_model_config.hf_config.model_type = "deepseek_mtp"
            speculative.custom_method = None
            speculative.index_share_for_mtp_iteration = None
            speculative.num_mtp_modules = lambda: SpeculativeConfig.num_mtp_modules(speculative)
            speculative.speculator_config = get_speculator_config_class(speculative)(speculative)
            speculative.uses_target_hidden_states = speculative.speculator_config.uses_target_hidden_states
    cfg = _Stub(
        cache_config=cache,
        scheduler_config=_Stub(max_num_batched_tokens=mnbt, max_num_seqs=max_num_seqs, async_scheduling=async_on,
                               disable_hybrid_kv_cache_manager=False),
        parallel_config=_Stub(pipeline_parallel_size=1, tensor_parallel_size=1, decode_context_parallel_size=1),
        attention_config=_Stub(hisparse_config=None),
        model_config=_Stub(max_model_len=max_model_len, original_max_model_len=max_model_len,
                           supports_kv_cache_grouping=False),
        device_config=_Stub(device_type="cuda"),
        speculative_config=speculative,
        diffusion_config=None,
        use_v2_model_runner=True,
    )
    for name in ("max_concurrent_batches", "max_in_flight_tokens", "num_speculative_tokens",
                 "num_prefill_lookahead_tokens"):
        prop = VllmConfig.__dict__[name]
        setattr(cfg, name, prop.fget(cfg))
    return cfg


def _customize(backend_sizes, spec):
    """v1/worker/utils.py customize_attention_spec, with each backend's declared kernel block sizes."""
    from vllm.v1.attention.backend import MultipleOf

    backend = types.SimpleNamespace(customize_spec=lambda s: s,
                                    get_supported_kernel_block_sizes=lambda s=None: backend_sizes)
    try:
        from vllm.v1.worker.utils import customize_attention_spec

        return customize_attention_spec(backend, spec)
    except Exception:  # pragma: no cover - fall back to the function's two lines
        fixed = [s for s in backend_sizes if isinstance(s, int)]
        if spec.block_stride_alignment is None and backend_sizes and fixed == backend_sizes:
            return replace(spec, block_stride_alignment=MultipleOf(max(fixed)))
        return spec


def vllm_specs(model, block_size: int, fp4: bool, spec_tokens: int, extra_retained: int) -> dict:
    """DeepSeek-V4's KV specs as the model code registers them, built with vLLM's classes."""
    import torch
    from vllm.v1.attention.backend import MultipleOf
    from vllm.v1.kv_cache_interface import MLAAttentionSpec, SlidingWindowMLASpec, get_kv_quant_mode

    mla_sizes = [256]  # DeepseekV4SparseMLABackend / DeepseekV4IndexerBackend.get_supported_kernel_block_sizes
    swa_sizes = [MultipleOf(32)]  # DeepseekSparseSWABackend
    state_sizes = [MultipleOf(1)]  # CompressorBackend
    specs: dict = {}

    def state(prefix, ratio, head_dim):
        coff = 1 + (ratio == 4)
        spec = SlidingWindowMLASpec(block_size=4 if ratio == 4 else 8, num_kv_heads=1, max_tp_shards=1,
                                    head_size=2 * coff * head_dim, dtype=torch.float32,
                                    sliding_window=coff * ratio, alignment=576)
        specs[prefix] = _customize(state_sizes, spec)

    def swa(prefix, window, draft=False):
        spec = SlidingWindowMLASpec(bounded_replay=False, block_size=64, num_kv_heads=1, max_tp_shards=1,
                                    head_size=512, dtype=torch.uint8, sliding_window=window,
                                    cache_dtype_str="fp8_ds_mla", state_content_bytes=584, alignment=576,
                                    block_stride_alignment=None, model_version="deepseek_v4",
                                    kv_quant_mode=get_kv_quant_mode("fp8_ds_mla"))
        spec = _customize(swa_sizes, spec)
        if draft:
            spec = replace(spec, is_draft=True)
        specs[prefix] = spec

    for d in model.layers:
        if d.is_mtp:
            continue
        p = f"model.layers.{d.layer_id}.self_attn"
        r = d.compression_ratio
        if r == 4:
            head = d.index_head_dim // 2 + d.index_head_dim // 32 if fp4 else d.index_head_dim + d.index_head_dim // 128 * 4
            specs[f"{p}.indexer.k_cache"] = _customize(mla_sizes, MLAAttentionSpec(
                block_size=block_size, num_kv_heads=1, max_tp_shards=1, head_size=head, dtype=torch.uint8,
                tokens_per_state=4, alignment=576))
            state(f"{p}.indexer.compressor.state_cache", 4, d.index_head_dim)
        swa(f"{p}.swa_cache", d.window)
        if r in (4, 128):
            specs[p] = _customize(mla_sizes, MLAAttentionSpec(
                block_size=block_size, num_kv_heads=1, max_tp_shards=1, head_size=d.head_dim, dtype=torch.uint8,
                tokens_per_state=r, cache_dtype_str="fp8_ds_mla", alignment=576, model_version="deepseek_v4",
                kv_quant_mode=get_kv_quant_mode("fp8_ds_mla"), state_content_bytes=584))
            state(f"{p}.compressor.state_cache", r, d.head_dim)
    if spec_tokens:
        for d in model.layers:
            if d.is_mtp:
                swa(f"model.layers.{d.layer_id}.self_attn.swa_cache", d.window, draft=True)
    return specs


def vllm_defaults(gpu: str) -> tuple[int, int]:
    """EngineArgs.get_batch_defaults with the platform answering as the named GPU (vllm serve)."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    from vllm.usage.usage_lib import UsageContext

    from csa_plan.planner.engines.settings import gpu_target

    target = gpu_target(gpu)
    cls = type(current_platform)
    saved = {k: getattr(cls, k, None) for k in ("get_device_total_memory", "get_device_name", "is_device_capability")}
    try:
        cls.get_device_total_memory = classmethod(lambda c, device_id=0: target.memory_bytes)
        cls.get_device_name = classmethod(lambda c, device_id=0: f"NVIDIA {target.name.upper()}")
        cls.is_device_capability = classmethod(lambda c, cap, device_id=0: tuple(cap) == target.capability)
        tokens, seqs = EngineArgs.get_batch_defaults(world_size=1)
    finally:
        for k, v in saved.items():
            if v is not None:
                setattr(cls, k, v)
    return tokens[UsageContext.OPENAI_API_SERVER], seqs[UsageContext.OPENAI_API_SERVER]


def vllm_case(model, max_model_len: int, kv_memory: int, mnbt: int, async_on: bool, spec_tokens: int,
              fp4: bool = False, gpu: str = "h200", block_size: int = 256) -> tuple[bool, str]:
    import vllm.v1.core.kv_cache_utils as kcu
    from vllm.v1.core import kv_cache_planning as kcp
    from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder
    from vllm.v1.kv_cache_interface import SlidingWindowSpec

    from csa_plan.planner.engines.engine import EngineRefused, Phase
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings

    from csa_plan.planner.engines.engine import EngineRefused as _Refused

    cfg = vllm_config_stub(max_model_len, mnbt, 1024, async_on, spec_tokens, model.num_mtp_layers, block_size)
    extra = max(0, cfg.num_prefill_lookahead_tokens - 1)
    specs = vllm_specs(model, block_size, fp4, spec_tokens, extra)
    if block_size != 256:
        label = f"vllm-0.33 {model.name} L={max_model_len} block={block_size}"
        try:
            groups = kcp.get_global_kv_cache_groups(cfg, [specs])
            kcp.get_kv_cache_configs(cfg, [specs], [kv_memory], groups)
            failure = None
        except (ZeroDivisionError, AssertionError) as exc:
            failure = f"{type(exc).__name__}: {exc}"
        try:
            from csa_plan.planner.engines.registry import get_engine as _get
            from csa_plan.planner.engines.settings import EngineSettings as _S

            _get("vllm-0.33").configure(model, _S(block_size=block_size), max_model_len)
            ours = None
        except _Refused as exc:
            ours = exc.refusal.message
        if failure is not None:
            ok = ours is not None
            return ok, f"{'OK  ' if ok else 'FAIL'} {label}: vLLM fails ({failure[:50]}); csa-plan {ours or 'plans it'}"
        if ours is not None:
            return False, f"FAIL {label}: vLLM plans it, csa-plan refuses: {ours}"
    groups = kcp.get_global_kv_cache_groups(cfg, [specs])
    builder = get_kv_cache_config_builder(cfg)
    bpb = kcp._pool_bytes_per_block_from_builder(builder, cfg, groups)
    needed = kcp._max_memory_usage_bytes_from_groups(builder, cfg, groups)
    v_blocks = needed // bpb
    lines: list[str] = []
    kcu.logger.info_once = lambda msg, *a, **k: lines.append(msg % a)
    try:
        configs = kcp.get_kv_cache_configs(cfg, [specs], [kv_memory], groups)
        sched = kcu.generate_scheduler_kv_cache_config(configs)
        v_tokens, v_conc = kcu.get_kv_cache_capacity(cfg, sched)
        kcu.update_kv_cache_capacity(cfg, sched)
        v_num_blocks = sched.num_blocks
        v_error = None
    except ValueError as exc:
        v_error = str(exc)
    v_group_pages = sorted(sum(kcp._get_per_layer_spec(g, n).page_size_bytes for n in g.layer_names) for g in groups)
    def decode_blocks(g):
        spec = kcp._get_per_layer_spec(g, g.layer_names[0])
        full = kcu.cdiv(max_model_len, spec.block_size)
        if isinstance(spec, SlidingWindowSpec):
            return min(full, spec.max_admission_blocks_per_request(1 + spec_tokens, max_model_len))
        return full

    v_decode = sum(decode_blocks(g) for g in groups)

    settings = EngineSettings(max_num_batched_tokens=mnbt, async_scheduling=async_on,
                              num_speculative_tokens=spec_tokens or None, indexer_kv_dtype="mxfp4" if fp4 else None,
                              gpu=gpu)
    settings = replace(settings, block_size=block_size if block_size != 256 else None)
    plan = get_engine("vllm-0.33").configure(model, settings, max_model_len)
    ours_pages = sorted(g.page_sum_bytes for g in plan.groups)
    label = (f"vllm-0.33 {model.name} L={max_model_len} kv={kv_memory} mnbt={mnbt} "
             f"async={'on' if async_on else 'off'} spec={spec_tokens}{' mxfp4' if fp4 else ''} block={block_size}")
    problems = []
    if plan.block_bytes != bpb:
        problems.append(f"bytes_per_block {plan.block_bytes} != vLLM {bpb}")
    if ours_pages != v_group_pages:
        problems.append(f"group page sums {ours_pages} != vLLM {v_group_pages}")
    if plan.startup_budget().units != v_blocks:
        problems.append(f"blocks per request {plan.startup_budget().units} != vLLM {v_blocks}")
    if plan.footprint(max_model_len, Phase.DECODE).units != v_decode:
        problems.append(f"decode blocks {plan.footprint(max_model_len, Phase.DECODE).units} != vLLM cap formula {v_decode}")
    try:
        sizing = plan.size_pool(kv_memory)
        ours_error = None
    except EngineRefused as exc:
        ours_error = exc.refusal.message
    if v_error is not None or ours_error is not None:
        if (v_error is None) != (ours_error is None):
            problems.append(f"refusal mismatch: csa-plan {ours_error!r} vs vLLM {v_error!r}")
        elif v_error.split(" See https")[0] not in ours_error:
            problems.append(f"refusal text: csa-plan {ours_error!r} vs vLLM {v_error!r}")
        summary = f"refused as vLLM does: {v_error.split('. ')[0][:90]}"
    else:
        if sizing.total_units != v_num_blocks:
            problems.append(f"num_blocks {sizing.total_units} != vLLM {v_num_blocks}")
        if sizing.tokens != v_tokens or sizing.concurrency != v_conc:
            problems.append(f"capacity ({sizing.tokens}, {sizing.concurrency}) != vLLM ({v_tokens}, {v_conc})")
        if list(sizing.log_lines) != lines:
            problems.append(f"log line {sizing.log_lines} != vLLM {lines}")
        summary = (f"{len(groups)} groups, {bpb:,} B/block, {v_num_blocks:,} blocks, {v_blocks:,} blocks/request: "
                   f"{lines[0] if lines else ''}")
    ok = not problems
    return ok, f"{'OK  ' if ok else 'FAIL'} {label}: " + (summary if ok else "; ".join(problems))


def run_vllm(quick: bool) -> list[tuple[bool, str]]:
    from csa_plan.planner.loaders.model_files import load_model

    out = []
    ok = True
    for gpu in ("h200", "b200"):
        from csa_plan.planner.engines.vllm.startup import default_batched_tokens
        from csa_plan.planner.engines.settings import gpu_target

        vt, vs = vllm_defaults(gpu)
        ct, cs, _ = default_batched_tokens(gpu_target(gpu), "serve")
        good = (vt, vs) == (ct, cs)
        out.append((good, f"{'OK  ' if good else 'FAIL'} vllm defaults on {gpu}: max_num_batched_tokens {ct} / "
                          f"max_num_seqs {cs} (vLLM get_batch_defaults: {vt} / {vs})"))
    lengths = (1_048_576, 65_536, 4_096, 200) if not quick else (1_048_576, 65_536)
    budgets = (40 * GiB, 8 * GiB, 300 * (1 << 20)) if not quick else (40 * GiB,)
    for name in MODELS:
        model = load_model(name)
        for length, kv, mnbt, async_on, spec in itertools.product(
                lengths, budgets, (8192, 2048, 16384) if not quick else (8192,), (True, False),
                (0, 1, 3) if not quick else (0, 1)):
            out.append(vllm_case(model, length, kv, mnbt, async_on, spec))
        out.append(vllm_case(model, 1_048_576, 40 * GiB, 16384, True, 0, fp4=True, gpu="b200"))
        for block in (64, 128, 512):
            out.append(vllm_case(model, 65_536, 40 * GiB, 8192, True, 1, block_size=block))
    return out


# -- vLLM 0.33.0 / 0.34.0: DeepSeek-V4.1 (cross-layer shared compressed state) ---------------------


def _platform_as(capability: tuple[int, int]) -> None:
    """vLLM's platform answering as the named card's compute capability (the V4.1 model code asks it)."""
    from vllm.platforms import current_platform

    cls = type(current_platform)
    cls.is_device_capability_family = classmethod(lambda c, fam, device_id=0: capability[0] * 10 == fam)
    cls.is_device_capability = classmethod(lambda c, cc, device_id=0: tuple(cc) == tuple(capability))
    cls.get_device_capability = classmethod(
        lambda c, device_id=0: types.SimpleNamespace(major=capability[0], minor=capability[1]))


def v41_config_stub(max_model_len: int, mnbt: int, async_on: bool, drafts: int, block_size: int):
    """``vllm_config_stub`` with DSpark as the speculative method (speculative.py: method "dspark")."""
    cfg = vllm_config_stub(max_model_len, mnbt, 1024, async_on, 0, 0, block_size)
    if drafts:
        from vllm.config import VllmConfig

        cfg.speculative_config = _Stub(method="dspark", num_speculative_tokens=drafts,
                                       draft_model_config=_Stub(hf_config=_Stub(num_nextn_predict_layers=3)),
                                       use_eagle=lambda: True, use_multi_module_mtp=lambda: False,
                                       use_eagle_block_drop=lambda: False)
        try:  # 0.34: the lookahead comes from the speculator's config class (speculator_config.py:122-125)
            from vllm.v1.worker.gpu.spec_decode.dspark.config import DSparkSpeculatorConfig as D

            cfg.speculative_config.speculator_config = _Stub(
                num_prefill_lookahead_tokens=D.num_prefill_lookahead_tokens.fget(
                    _Stub(uses_target_hidden_states=D.uses_target_hidden_states, num_speculative_tokens=drafts)))
        except ImportError:  # 0.33: VllmConfig.num_prefill_lookahead_tokens reads use_eagle / multi-module MTP
            pass
        for name in ("num_speculative_tokens", "num_prefill_lookahead_tokens"):
            setattr(cfg, name, VllmConfig.__dict__[name].fget(cfg))
    return cfg


def v41_specs(text: dict, capability: tuple[int, int], cfg, fp4_index: bool, tp: int = 8) -> dict:
    """DeepSeek-V4.1's specs from vLLM's own ``get_kv_cache_spec`` methods (attention.py:1206-1231
    DeepseekV4Attention, :1257-1297 DeepseekV4IndexerCache, sparse_swa.py:120-147 DeepseekV4SWACache,
    compressor.py:228-240 CompressorStateCache), each called on an instance holding the attributes its
    ``__init__`` sets (attention.py:326-361, 514-580; compressor.py:216-226), then the layer's backend's
    ``customize_attention_spec`` (v1/worker/gpu/attn_utils.py:140-152) and the draft tag, in
    static_forward_context order. The card picks the attention class as nvidia/model.py:201-258 does."""
    import math

    import torch
    import vllm.models.deepseek_v41.attention as A
    import vllm.models.deepseek_v41.compressor as C
    from vllm.models.deepseek_v41.nvidia.flashmla import DeepseekSparseSWAFlashMLABackend
    from vllm.models.deepseek_v41.sparse_mla import DeepseekV4FlashMLABackend, FlashMLAMegaAttnBackend
    from vllm.v1.attention.backends.mla.indexer import DeepseekV41IndexerBackend
    from vllm.v1.attention.backends.mla.sparse_swa import DeepseekV4SWACache
    from vllm.v1.kv_cache_interface import AttentionSpec
    from vllm.v1.worker.utils import customize_attention_spec

    _platform_as(capability)
    heads, groups = text["num_attention_heads"], text["o_groups"]
    mega = capability[0] == 10 and (heads // tp) // (groups // tp) == 8  # is_available_for (WV_GROUP_SIZE 8)
    packed = "nvfp4_ds_mla" if mega else "fp8_ds_mla"
    cfg.cache_config.cache_dtype = packed  # _resolve_dsv4_kv_cache_dtype writes the resolved record back
    mla_backend = FlashMLAMegaAttnBackend if mega else DeepseekV4FlashMLABackend
    kv_mxfp8 = A._use_v41_mxfp8_kv_record()
    swa_bytes = 528 if kv_mxfp8 else 584
    comp_bytes = 288 if packed == "nvfp4_ds_mla" else swa_bytes
    align = 512 if kv_mxfp8 else 576
    ratios, srcs, idx = text["compress_ratios"], text["kv_source_layer_ids"], text["index_source_layer_ids"]
    n_main = text["num_hidden_layers"]
    drafts = cfg.num_speculative_tokens
    specs: dict = {}

    def add(name, spec, backend, draft=False):
        if isinstance(spec, AttentionSpec):
            spec = customize_attention_spec(backend, spec)
        specs[name] = replace(spec, is_draft=True) if draft else spec

    for i in range(n_main + (text["num_nextn_predict_layers"] if drafts else 0)):
        r = int(ratios[i]) if i < len(ratios) else 0
        p = f"model.layers.{i}.self_attn"
        backbone = i < n_main
        is_src, is_idx = backbone and i in srcs, backbone and i in idx
        attn = types.SimpleNamespace(is_kv_source=is_src, kv_cache_dtype=packed, head_dim=text["head_dim"],
                                     compress_ratio=r, kv_page_alignment=align, compressed_bytes_per_token=comp_bytes,
                                     kv_cache_torch_dtype=torch.uint8)
        spec = A.DeepseekV4Attention.get_kv_cache_spec(attn, cfg)
        if spec is not None:
            add(p, spec, mla_backend)
        if is_idx and is_src:
            keys = types.SimpleNamespace(cache_config=cfg.cache_config, dtype=torch.uint8, compress_ratio=r,
                                         head_dim=A._indexer_k_cache_head_dim(text["index_head_dim"], fp4_index),
                                         sparse_logits=False, rocm_mxfp4=False)
            add(f"{p}.indexer.k_cache", A.DeepseekV4IndexerCache.get_kv_cache_spec(keys, cfg), DeepseekV41IndexerBackend)
        swa = types.SimpleNamespace(cache_config=cfg.cache_config, bounded_replay=True, block_size=32,
                                    head_dim=text["head_dim"], dtype=torch.uint8, window_size=text["sliding_window"],
                                    packed_bytes_per_token=swa_bytes, packed_page_alignment=align,
                                    packed_block_stride_alignment=math.lcm(swa_bytes, comp_bytes) if kv_mxfp8 else None)
        add(f"{p}.swa_cache", DeepseekV4SWACache.get_kv_cache_spec(swa, cfg), DeepseekSparseSWAFlashMLABackend,
            draft=not backbone)
        if is_src and r > 1:
            rows = drafts + 2
            ring = types.SimpleNamespace(block_size=max(8, 1 << (rows - 1).bit_length()), state_dim=2 * text["head_dim"],
                                         dtype=torch.float32)
            add(f"{p}.compressor.state_cache", C.CompressorStateCache.get_kv_cache_spec(ring, cfg), C.CompressorBackend)
    return specs


def vllm_v41_case(model, text: dict, gpu: str, max_model_len: int, kv_memory: int, mnbt: int, async_on: bool,
                  drafts: int, block_size: int | None = None, fp4: bool = False,
                  engine: str = "vllm-0.33") -> tuple[bool, str]:
    """One V4.1 deployment: vLLM's grouping, bytes per block, blocks per request, num_blocks, capacity and log
    line against csa-plan's ``engine`` model."""
    import vllm.v1.core.kv_cache_utils as kcu
    from vllm.v1.core import kv_cache_planning as kcp
    from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder

    from csa_plan.planner.engines.engine import EngineRefused, Phase
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings, gpu_target

    target = gpu_target(gpu)
    block = block_size or (128 if target.capability[0] == 10 else 64)
    cfg = v41_config_stub(max_model_len, mnbt, async_on, drafts, block)
    specs = v41_specs(text, target.capability, cfg, fp4)
    groups = kcp.get_global_kv_cache_groups(cfg, [specs])
    builder = get_kv_cache_config_builder(cfg)
    bpb = kcp._pool_bytes_per_block_from_builder(builder, cfg, groups)
    v_blocks = kcp._max_memory_usage_bytes_from_groups(builder, cfg, groups) // bpb
    lines: list[str] = []
    kcu.logger.info_once = lambda msg, *a, **k: lines.append(msg % a)
    v_error = None
    try:
        configs = kcp.get_kv_cache_configs(cfg, [specs], [kv_memory], groups)
        sched = kcu.generate_scheduler_kv_cache_config(configs)
        v_tokens, v_conc = kcu.get_kv_cache_capacity(cfg, sched)
        kcu.update_kv_cache_capacity(cfg, sched)
        v_num_blocks = sched.num_blocks
    except ValueError as exc:
        v_error = str(exc)
    v_groups = [sorted(kcp._get_per_layer_spec(g, n).page_size_bytes for n in g.layer_names) for g in groups]
    v_names = [list(g.layer_names) for g in groups]

    settings = EngineSettings(gpu=gpu, max_num_batched_tokens=mnbt, async_scheduling=async_on,
                              num_speculative_tokens=drafts or None, indexer_kv_dtype="mxfp4" if fp4 else None,
                              block_size=block_size)
    plan = get_engine(engine).configure(model, settings, max_model_len)
    label = (f"{engine} {model.name} {gpu} L={max_model_len} kv={kv_memory} mnbt={mnbt} "
             f"async={'on' if async_on else 'off'} dspark={drafts}{' mxfp4' if fp4 else ''} block={block}")
    problems = []
    ours_groups = [sorted(s.page_bytes for s in g.specs) for g in plan.groups]
    if [[s.name for s in g.specs] for g in plan.groups] != v_names:
        problems.append("group membership differs")
    if ours_groups != v_groups:
        problems.append(f"group pages {ours_groups} != vLLM {v_groups}")
    if plan.block_bytes != bpb:
        problems.append(f"bytes_per_block {plan.block_bytes} != vLLM {bpb}")
    if plan.startup_budget().units != v_blocks:
        problems.append(f"blocks per request {plan.startup_budget().units} != vLLM {v_blocks}")
    try:
        sizing = plan.size_pool(kv_memory)
        ours_error = None
    except EngineRefused as exc:
        ours_error = exc.refusal.message
    if v_error is not None or ours_error is not None:
        if (v_error is None) != (ours_error is None):
            problems.append(f"refusal mismatch: csa-plan {ours_error!r} vs vLLM {v_error!r}")
        elif v_error.split(" Try increasing")[0].split(" See https")[0] not in ours_error:
            # the figures (needed, available, estimated length) up to the hint, whose wording 0.34 changed
            # (kv_cache_planning.py:64-96 _more_kv_cache_memory_hint; csa-plan keeps 0.33's)
            problems.append(f"refusal text: csa-plan {ours_error!r} vs vLLM {v_error!r}")
        summary = f"refused as vLLM does: {v_error.split('. ')[0][:90]}"
    else:
        if sizing.total_units != v_num_blocks:
            problems.append(f"num_blocks {sizing.total_units} != vLLM {v_num_blocks}")
        if sizing.tokens != v_tokens or sizing.concurrency != v_conc:
            problems.append(f"capacity ({sizing.tokens}, {sizing.concurrency}) != vLLM ({v_tokens}, {v_conc})")
        if list(sizing.log_lines) != lines:
            problems.append(f"log line {sizing.log_lines} != vLLM {lines}")
        kinds = " ".join(f"{type(kcp._get_per_layer_spec(g, g.layer_names[0])).__name__.replace('Spec', '')}"
                         f"x{len(g.layer_names)}" for g in groups)
        summary = (f"{len(groups)} groups [{kinds}], {bpb:,} B/block, {v_num_blocks:,} blocks, "
                   f"{v_blocks:,} blocks/request: {lines[0] if lines else ''}")
    ok = not problems
    return ok, f"{'OK  ' if ok else 'FAIL'} {label}: " + (summary if ok else "; ".join(problems))


V41_MODELS = ("deepseek-v4.1-flash", "deepseek-v4.1-flash-1017")


def run_vllm_v41(quick: bool, engine: str = "vllm-0.33") -> list[tuple[bool, str]]:
    """V4.1 on an H200 (sm_90: FlashMLA, fp8_ds_mla 584 B) and a B200 (sm_100: mega attention, nvfp4_ds_mla
    288 B records, 528 B windows), several lengths, budgets, block sizes, with and without DSpark drafts."""
    from csa_plan.planner.loaders.model_files import load_model

    out = []
    for name in V41_MODELS if not quick else V41_MODELS[:1]:
        model = load_model(name)
        text = _v41_text_config(name)
        for gpu, length, kv, mnbt, async_on, drafts in itertools.product(
                ("h200", "b200"), (1_048_576, 131_072, 4_096) if not quick else (1_048_576,),
                (40 * GiB, 2 * GiB) if not quick else (40 * GiB,), (16384, 2048) if not quick else (16384,),
                (True, False) if not quick else (True,), (0, 1, 5, 7) if not quick else (0, 5)):
            out.append(vllm_v41_case(model, text, gpu, length, kv, mnbt, async_on, drafts, engine=engine))
        for gpu, block in (("h200", 128), ("h200", 256), ("b200", 256), ("b200", 512)):
            out.append(vllm_v41_case(model, text, gpu, 1_048_576, 40 * GiB, 16384, True, 5, block_size=block,
                                     engine=engine))
        out.append(vllm_v41_case(model, text, "b200", 1_048_576, 40 * GiB, 16384, True, 0, fp4=True, engine=engine))
        out.append(vllm_v41_case(model, text, "h200", 1_048_576, 200 * (1 << 20), 16384, True, 0, engine=engine))
    return out


def _v41_text_config(name: str) -> dict:
    """The preset's published config.json ``text_config`` (what vLLM's model code reads)."""
    import json

    from csa_plan.planner.loaders.model_files import PRESETS
    from csa_plan.planner.presets import read_preset

    return json.loads(read_preset(PRESETS[name]))["text_config"]


# -- vLLM 0.25.0 / 0.26.0 (run in a virtualenv with that release) ----------------------------


def installed_vllm_release() -> str:
    """The registry name of the installed vLLM release (``vllm-0.26`` for 0.26.0)."""
    import vllm

    major, minor = vllm.__version__.split(".")[:2]
    return f"vllm-{major}.{minor}"


def legacy_config_stub(max_model_len: int, mnbt: int, async_on: bool, spec_tokens: int, block_size: int,
                       num_mtp_layers: int = 1):
    """The attributes 0.25-0.28's planning reads, with that release's own VllmConfig properties (and, from 0.28.0,
    its own ``SpeculativeConfig.use_multi_module_mtp``, which get_kv_cache_configs reads for the extra retained
    tokens: 0.28.0 v1/core/kv_cache_utils.py:2137)."""
    from vllm.config import CacheConfig, VllmConfig

    cache = CacheConfig(block_size=block_size, cache_dtype="fp8_ds_mla")
    speculative = None
    if spec_tokens:
        from vllm.config.speculative import SpeculativeConfig

        speculative = _Stub(method="mtp", num_speculative_tokens=spec_tokens, use_eagle=lambda: True,
                            draft_model_config=_Stub(hf_config=_Stub(num_nextn_predict_layers=num_mtp_layers)))
        own = SpeculativeConfig.__dict__.get("use_multi_module_mtp")
        if own is not None:
            speculative.use_multi_module_mtp = lambda: own(speculative)
    cfg = _Stub(
        cache_config=cache,
        scheduler_config=_Stub(max_num_batched_tokens=mnbt, max_num_seqs=1024, async_scheduling=async_on,
                               disable_hybrid_kv_cache_manager=False),
        parallel_config=_Stub(pipeline_parallel_size=1, tensor_parallel_size=1, decode_context_parallel_size=1,
                              prefill_context_parallel_size=1),
        model_config=_Stub(max_model_len=max_model_len, original_max_model_len=max_model_len),
        speculative_config=speculative, kv_transfer_config=None, use_v2_model_runner=True,
    )
    for name in ("max_concurrent_batches", "max_in_flight_tokens"):
        prop = VllmConfig.__dict__.get(name)
        if prop is not None:
            setattr(cfg, name, prop.fget(cfg))
    return cfg


def legacy_specs(model, block_size: int, spec_tokens: int, fp4: bool = False) -> dict:
    """DeepSeek-V4's specs as 0.25-0.28's model code registers them (models/deepseek_v4/attention.py,
    compressor.py, v1/attention/backends/mla/sparse_swa.py), built with that release's classes: an MXFP4 indexer
    key is FP8's 132 B in 0.25/0.26 (attention.py:732 "still allocate the same amount of memory as FP8") and 68 B
    from 0.27.0 (attention.py:785); 0.28.0 passes the 584 B record as ``state_content_bytes`` (attention.py:737,
    sparse_swa.py:104), which 0.25-0.27's spec classes do not have (their real_page_size_bytes has the 584)."""
    import dataclasses

    import torch
    import vllm
    from vllm.v1.kv_cache_interface import MLAAttentionSpec, SlidingWindowMLASpec, get_kv_quant_mode

    release = tuple(int(x) for x in vllm.__version__.split(".")[:2])
    record = ({"state_content_bytes": 584}
              if "state_content_bytes" in {f.name for f in dataclasses.fields(MLAAttentionSpec)} else {})
    fp4_keys = fp4 and release >= (0, 27)
    specs: dict = {}

    def state(prefix, ratio, head_dim):
        coff = 1 + (ratio == 4)
        specs[prefix] = SlidingWindowMLASpec(block_size=4 if ratio == 4 else 8, num_kv_heads=1,
                                             head_size=2 * coff * head_dim, dtype=torch.float32,
                                             sliding_window=coff * ratio, alignment=576)

    def swa(prefix, window):
        specs[prefix] = SlidingWindowMLASpec(block_size=64, num_kv_heads=1, head_size=512, dtype=torch.uint8,
                                             sliding_window=window, cache_dtype_str="fp8_ds_mla", alignment=576,
                                             model_version="deepseek_v4",
                                             kv_quant_mode=get_kv_quant_mode("fp8_ds_mla"), **record)

    for d in model.layers:
        if d.is_mtp:
            continue
        p = f"model.layers.{d.layer_id}.self_attn"
        r = d.compression_ratio
        if r == 4:
            keys = (d.index_head_dim // 2 + d.index_head_dim // 32 if fp4_keys
                    else d.index_head_dim + d.index_head_dim // 128 * 4)
            specs[f"{p}.indexer.k_cache"] = MLAAttentionSpec(
                block_size=block_size, num_kv_heads=1, head_size=keys, dtype=torch.uint8, compress_ratio=4,
                alignment=576)
            state(f"{p}.indexer.compressor.state_cache", 4, d.index_head_dim)
        swa(f"{p}.swa_cache", d.window)
        if r in (4, 128):
            specs[p] = MLAAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=d.head_dim,
                                        dtype=torch.uint8, compress_ratio=r, cache_dtype_str="fp8_ds_mla",
                                        alignment=576, model_version="deepseek_v4",
                                        kv_quant_mode=get_kv_quant_mode("fp8_ds_mla"), **record)
            state(f"{p}.compressor.state_cache", r, d.head_dim)
    if spec_tokens:
        for d in model.layers:
            if d.is_mtp:
                swa(f"model.layers.{d.layer_id}.self_attn.swa_cache", d.window)
    return specs


def legacy_case(release: str, model, max_model_len: int, kv_memory: int, mnbt: int, async_on: bool,
                spec_tokens: int, block_size: int = 256, fp4: bool = False, gpu: str = "h200") -> tuple[bool, str]:
    """One deployment under 0.25-0.28's own planning: grouping, bytes per block, needed bytes, num_blocks,
    capacity and the log lines, against csa-plan's ``release`` engine model. 0.25/0.26 lay a block out as
    ``_bucket_layers_by_page_size``; 0.27/0.28 as ``_get_packed_kv_cache_layout`` (through ``_pool_bytes_per_block``);
    0.28 logs from ``update_kv_cache_capacity``, which v1/engine/core.py:325 calls on the scheduler's config."""
    import copy

    import vllm.v1.core.kv_cache_utils as kcu

    from csa_plan.planner.engines.engine import EngineRefused
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings

    label = (f"{release} {model.name} {gpu} L={max_model_len} kv={kv_memory} mnbt={mnbt} "
             f"async={'on' if async_on else 'off'} spec={spec_tokens}{' mxfp4' if fp4 else ''} block={block_size}")
    cfg = legacy_config_stub(max_model_len, mnbt, async_on, spec_tokens, block_size, model.num_mtp_layers)
    lines: list[str] = []
    kcu.logger.info_once = lambda msg, *a, **k: lines.append(msg % a)
    v_error = v_exc = None
    try:
        specs = legacy_specs(model, block_size, spec_tokens, fp4)
        groups = kcu.get_kv_cache_groups(cfg, copy.deepcopy(specs))
        configs = kcu.get_kv_cache_configs(cfg, [specs], [kv_memory])
        # the groups get_kv_cache_configs planned (0.28 tags the windows with extra_retained_tokens first)
        groups = configs[0].kv_cache_groups
        if hasattr(kcu, "_bucket_layers_by_page_size"):
            v_bpb = sum(ps * len(slots) for ps, slots in kcu._bucket_layers_by_page_size(groups).items())
        else:
            v_bpb = kcu._pool_bytes_per_block(cfg, groups)
        v_needed = kcu._max_memory_usage_bytes_from_groups(cfg, groups)
        logged = configs[0]
        if hasattr(kcu, "update_kv_cache_capacity"):  # 0.28: the engine core logs the scheduler's config
            logged = kcu.generate_scheduler_kv_cache_config(configs)
            kcu.update_kv_cache_capacity(cfg, logged)
        v_tokens, v_conc = kcu.get_kv_cache_capacity(cfg, logged)
        v_num_blocks = configs[0].num_blocks
    except ValueError as exc:
        v_error = str(exc)
    except (ZeroDivisionError, AssertionError) as exc:
        v_exc = f"{type(exc).__name__}: {exc}"
    settings = EngineSettings(max_num_batched_tokens=mnbt, async_scheduling=async_on,
                              num_speculative_tokens=spec_tokens or None, block_size=block_size, gpu=gpu,
                              indexer_kv_dtype="mxfp4" if fp4 else None)
    problems: list[str] = []
    try:
        plan = get_engine(release).configure(model, settings, max_model_len)
    except EngineRefused as exc:
        if v_exc is None and v_error is None:
            return False, f"FAIL {label}: csa-plan refuses ({exc.refusal.message}) but {release} plans it"
        if v_exc is not None and v_exc.split(":")[0] not in exc.refusal.message:
            return False, f"FAIL {label}: {release} fails ({v_exc[:60]}) but csa-plan names another reason " \
                          f"({exc.refusal.message[:90]})"
        return True, f"OK   {label}: refused as {release} fails ({(v_exc or v_error)[:60]})"
    if v_exc is not None:
        return False, f"FAIL {label}: {release} fails ({v_exc}) but csa-plan plans it"
    if v_error is None:
        v_groups = [[(n, g.kv_cache_spec.kv_cache_specs[n].page_size_bytes) for n in g.layer_names] for g in groups]
        ours_groups = [[(s.name, s.page_bytes) for s in g.specs] for g in plan.groups]
        if ours_groups != v_groups:
            problems.append("groups (layer names and pages) differ")
        if plan.block_bytes != v_bpb:
            problems.append(f"bytes_per_block {plan.block_bytes} != {v_bpb}")
        if plan.needed_bytes(max_model_len) != v_needed:
            problems.append(f"needed bytes {plan.needed_bytes(max_model_len)} != {v_needed}")
    try:
        sizing = plan.size_pool(kv_memory)
        ours_error = None
    except EngineRefused as exc:
        ours_error = exc.refusal.message
    if v_error is not None or ours_error is not None:
        if (v_error is None) != (ours_error is None):
            problems.append(f"refusal mismatch: csa-plan {ours_error!r} vs {release} {v_error!r}")
        elif v_error.split(" See https")[0].split(" Try increasing")[0] not in ours_error:
            problems.append(f"refusal text: csa-plan {ours_error!r} vs {release} {v_error!r}")
        summary = f"refused as {release} does: {v_error.split('. ')[0][:90]}"
    else:
        if sizing.total_units != v_num_blocks:
            problems.append(f"num_blocks {sizing.total_units} != {v_num_blocks}")
        if (sizing.tokens, sizing.concurrency) != (v_tokens, v_conc):
            problems.append(f"capacity ({sizing.tokens}, {sizing.concurrency}) != ({v_tokens}, {v_conc})")
        if list(sizing.log_lines) != lines:
            problems.append(f"log lines {sizing.log_lines} != {lines}")
        summary = f"{len(groups)} groups, {v_bpb:,} B/block, {v_num_blocks:,} blocks: {' / '.join(lines)}"
    ok = not problems
    return ok, f"{'OK  ' if ok else 'FAIL'} {label}: " + (summary if ok else "; ".join(problems))


def run_vllm_legacy(release: str, quick: bool) -> list[tuple[bool, str]]:
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import gpu_target
    from csa_plan.planner.engines.vllm.startup import default_batched_tokens
    from csa_plan.planner.loaders.model_files import load_model

    out = []
    for gpu in ("h200", "b200", "l40s"):
        vt, vs = vllm_defaults(gpu)
        ct, cs, _ = default_batched_tokens(gpu_target(gpu), "serve", get_engine(release).release)
        good = (vt, vs) == (ct, cs)
        out.append((good, f"{'OK  ' if good else 'FAIL'} {release} defaults on {gpu}: max_num_batched_tokens {ct} / "
                          f"max_num_seqs {cs} ({release} get_batch_defaults: {vt} / {vs})"))
    lengths = (1_048_576, 121_344, 30_000, 4_096, 200) if not quick else (1_048_576, 121_344)
    budgets = (40 * GiB, 7 * GiB, 300 * (1 << 20)) if not quick else (40 * GiB,)
    for name in MODELS:
        model = load_model(name)
        for length, kv, mnbt, async_on, spec in itertools.product(
                lengths, budgets, (8192, 2048, 16384) if not quick else (8192,), (True, False),
                (0, 1, 2) if not quick else (0, 1)):
            out.append(legacy_case(release, model, length, kv, mnbt, async_on, spec))
        for block in (64, 128, 192, 200, 320, 512):
            out.append(legacy_case(release, model, 65_536, 40 * GiB, 8192, True, 1, block))
        for gpu in ("h200", "b200"):  # each card's default batch (the 160 GiB tier from 0.28), MTP 1 and 3
            mnbt = default_batched_tokens(gpu_target(gpu), "serve", get_engine(release).release)[0]
            for spec in (1, 3):
                out.append(legacy_case(release, model, 1_048_576, 60 * GiB, mnbt, True, spec, gpu=gpu))
        out.append(legacy_case(release, model, 1_048_576, 60 * GiB, 16384, True, 0, fp4=True, gpu="b200"))
        # two MTP modules (the presets have one): multi-module MTP, where 0.28 keeps extra_retained_tokens =
        # drafts - 1 in every window (0.28.0 v1/core/kv_cache_utils.py:2134-2147); 0.25-0.27 keep none
        mtp = next(d for d in model.layers if d.is_mtp)
        two = replace(model, name=f"{model.name}+mtp2", num_mtp_layers=2,
                      layers=model.layers + (replace(mtp, layer_id=mtp.layer_id + 1),))
        for length, kv, spec in ((1_048_576, 40 * GiB, 2), (1_048_576, 40 * GiB, 3), (4_096, 300 * (1 << 20), 3)):
            out.append(legacy_case(release, two, length, kv, 8192, True, spec))
    return out


# -- SGLang -----------------------------------------------------------------------------------


def _ns(**kw):
    return types.SimpleNamespace(**kw)


def sglang_stub_context(mrr: int, chunk: int, drafts: int):
    """The config bags SGLang's DSV4 pool sizing reads (runtime_context getters), as its defaults."""
    spec = _ns(speculative_algorithm="EAGLE" if drafts else None, speculative_num_draft_tokens=drafts or None,
               speculative_num_steps=(drafts - 1 or 1) if drafts else None, speculative_eagle_topk=1 if drafts else None)
    return {
        "get_schedule": _ns(max_running_requests=mrr, chunked_prefill_size=chunk, swa_prefix_tails=None,
                            disable_overlap_schedule=False, _swa_full_tokens_ratio_explicitly_set=False,
                            swa_full_tokens_ratio=0.1),
        "get_spec": spec,
        "get_memory": _ns(enable_hisparse=False, disable_radix_cache=False),
        "get_exec": _ns(kernel=_ns(dsv4_attn_backend="flashmla", enable_deepseek_v4_fp4_indexer=False),
                        features=_ns(enable_encoder_swa_bounded_replay=False)),
        "get_disagg": _ns(disaggregation_mode="null", disaggregation_decode_extra_slots=0),
    }


def sglang_case(model, length: int, kv_memory: int, mrr: int, chunk: int, drafts: int) -> tuple[bool, str]:
    import sglang.srt.mem_cache.deepseek_v4_memory_pool as pool_mod
    import sglang.srt.model_executor.pool_configurator as pc
    from sglang.srt.mem_cache import allocation_sizing

    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings

    ctx = sglang_stub_context(mrr, chunk, drafts)
    for mod in (pc, pool_mod, allocation_sizing):
        for name, bag in ctx.items():
            if hasattr(mod, name):
                setattr(mod, name, (lambda b: (lambda: b))(bag))
    if hasattr(pc, "max_speculative_num_draft_tokens"):
        pc.max_speculative_num_draft_tokens = lambda: drafts or None
    if hasattr(allocation_sizing, "max_speculative_num_draft_tokens"):
        allocation_sizing.max_speculative_num_draft_tokens = lambda: drafts or None
    if hasattr(allocation_sizing, "get_alloc_page_size"):
        allocation_sizing.get_alloc_page_size = lambda: 256
    main = [d for d in model.layers if not d.is_mtp]
    ratios = [d.compression_ratio for d in main]
    algo = _ns(is_dspark=lambda: False, is_eagle=lambda: bool(drafts), is_none=lambda: not drafts)
    kvc = _ns(kv_cache_dtype_str="fp8_e4m3",
              model_config=_ns(qk_nope_head_dim=448, qk_rope_head_dim=64, index_head_dim=128, context_len=length,
                               compress_ratios=ratios, hf_config=_ns(kv_source_layer_ids=[]), window_size=128),
              layer_info=_ns(start_layer=0, end_layer=len(main)), pp_size=1, pp_group=None, spec_algorithm=algo,
              spec_aux_config=None, sliding_window_size=128, page_size=256, attn_dp_size=1)
    conf = pc.DSV4PoolConfigurator(kvc)
    cfg = conf.calculate_pool_sizes(kv_memory, 256)
    cfg.max_running_requests = mrr
    cfg = conf.finalize_with_max_running_requests(cfg)
    theirs = (cfg.full_max_total_num_tokens, cfg.swa_max_total_num_tokens, cfg.c4_max_total_num_tokens,
              cfg.c128_max_total_num_tokens, cfg.c4_state_pool_size, cfg.c128_state_pool_size)
    plan = get_engine("sglang-0.5.23").configure(
        model, EngineSettings(max_running_requests=mrr, chunked_prefill_size=chunk,
                              speculative_num_steps=drafts - 1 if drafts else None), length)
    ours_cfg = plan.pool_config(kv_memory)
    ours = (ours_cfg["full"], ours_cfg["swa"], ours_cfg["c4"], ours_cfg["c128"], ours_cfg["c4_state"],
            ours_cfg["c128_state"])
    extra = []
    if conf.bytes_per_full_token != ours_cfg["bytes_per_full_token"]:
        extra.append(f"bytes_per_full_token {ours_cfg['bytes_per_full_token']} != {conf.bytes_per_full_token}")
    if conf.bytes_per_swa_token != ours_cfg["bytes_per_swa_token"]:
        extra.append(f"bytes_per_swa_token {ours_cfg['bytes_per_swa_token']} != {conf.bytes_per_swa_token}")
    label = f"sglang {model.name} L={length} kv={kv_memory} mrr={mrr} chunk={chunk} drafts={drafts}"
    ok = ours == theirs and not extra
    text = (f"max_total_num_tokens {theirs[0]:,}, swa {theirs[1]:,}, c4 {theirs[2]:,}, c128 {theirs[3]:,}, "
            f"c4_state {theirs[4]:,}, c128_state {theirs[5]:,}") if ok else \
        f"csa-plan {ours} != SGLang {theirs} " + "; ".join(extra)
    return ok, f"{'OK  ' if ok else 'FAIL'} {label}: {text}"


def run_sglang(quick: bool) -> list[tuple[bool, str]]:
    from csa_plan.planner.engines.sglang import startup as ours
    from csa_plan.planner.loaders.model_files import load_model

    out = []
    try:
        from sglang.kernels.ops.attention.dsv4.kv_layout import KVLayout
    except Exception as exc:  # pragma: no cover
        return [(False, f"FAIL sglang kv_layout.py did not import: {exc}")]
    for slots in (256, 64, 2):
        good = KVLayout.V4.page_bytes(slots) == ours.page_bytes(slots)
        out.append((good, f"{'OK  ' if good else 'FAIL'} sglang KVLayout.V4.page_bytes({slots}) = "
                          f"{KVLayout.V4.page_bytes(slots):,} (csa-plan {ours.page_bytes(slots):,})"))
    from crosscheck_answers import stub_torchvision  # one stand-in, shared with tools/crosscheck_answers.py

    if stub_torchvision():
        print("note: torchvision is missing: a stand-in package is imported in its place (SGLang's model-config "
              "registry imports it; the pool sizing does not use it)")
    try:
        import sglang.srt.mem_cache.deepseek_v4_memory_pool as pool_mod
    except Exception as exc:
        out.append((False, f"FAIL sglang deepseek_v4_memory_pool did not import: {type(exc).__name__}: {exc}"))
        return out
    for fp4 in (False, True):
        good = pool_mod.get_dsv4_indexer_bytes_per_token(128, fp4) == ours.indexer_key_bytes(128, fp4)
        out.append((good, f"{'OK  ' if good else 'FAIL'} sglang indexer bytes per token (fp4={fp4}) = "
                          f"{pool_mod.get_dsv4_indexer_bytes_per_token(128, fp4)}"))
    for ratio, drafts in itertools.product((4, 128), (0, 3)):
        good = pool_mod.get_compress_state_ring_size(ratio, drafts) == ours.ring_size(ratio, drafts)
        out.append((good, f"{'OK  ' if good else 'FAIL'} sglang ring size c{ratio} drafts={drafts} = "
                          f"{pool_mod.get_compress_state_ring_size(ratio, drafts)}"))
    for size, page in ((1000, 64), (84906, 2), (606464, 256)):
        good = pool_mod._num_dsv4_physical_kv_pages(size, page, 256) == ours.physical_pages(size, page)
        out.append((good, f"{'OK  ' if good else 'FAIL'} sglang physical pages({size}, {page}) = "
                          f"{pool_mod._num_dsv4_physical_kv_pages(size, page, 256)}"))
    try:
        import sglang.srt.model_executor.pool_configurator  # noqa: F401
    except Exception as exc:
        out.append((False, f"FAIL sglang pool_configurator did not import: {type(exc).__name__}: {exc}"))
        return out
    budgets = (40 * GiB, 60 * GiB, 100 * GiB) if not quick else (60 * GiB,)
    for name in MODELS:
        model = load_model(name)
        for length, kv, mrr, chunk, drafts in itertools.product(
                (1_048_576, 65_536), budgets, (256, 64) if not quick else (256,), (8192, 16384) if not quick else
                (8192,), (0, 2) if not quick else (0,)):
            try:
                out.append(sglang_case(model, length, kv, mrr, chunk, drafts))
            except Exception as exc:
                out.append((False, f"FAIL sglang {name} L={length} kv={kv} mrr={mrr} chunk={chunk} drafts={drafts}: "
                                   f"{type(exc).__name__}: {exc}"))
    return out


# -- SGLang, DeepSeek-V4.1 (shared compressed state) ------------------------------------------

V41_MODEL = "deepseek-v4.1-flash"


def _fake_sm100(on: bool):
    """select_dsv4_kv_layout asks torch whether this is an SM100 GPU; answer as a B200 (or restore)."""
    import torch

    if not hasattr(_fake_sm100, "saved"):
        _fake_sm100.saved = (torch.cuda.is_available, torch.version.cuda, torch.cuda.get_device_capability)
    if on:
        torch.cuda.is_available = lambda: True
        torch.version.cuda = "13.0"
        torch.cuda.get_device_capability = lambda *a, **k: (10, 0)
    else:
        torch.cuda.is_available, torch.version.cuda, torch.cuda.get_device_capability = _fake_sm100.saved


def sglang_v41_case(gpu: str, tp: int, length: int, kv_memory: int, mrr: int, chunk: int, drafts: int,
                    replay: bool) -> tuple[bool, str]:
    """DeepSeek-V4.1 through SGLang 0.5.23's own DSV4PoolConfigurator (calculate_pool_sizes +
    finalize_with_max_running_requests) and the pool helpers the pool classes size with
    (KVLayout.page_bytes, _num_dsv4_physical_kv_pages, DSV41_INDEX_PAGE_SIZE, the indexer bytes,
    the ratio-2 ring), against csa-plan's sglang-0.5.23 plan of the same deployment."""
    import sglang.srt.mem_cache.deepseek_v4_memory_pool as pool_mod
    import sglang.srt.model_executor.pool_configurator as pc
    from sglang.srt.mem_cache import allocation_sizing

    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.loaders.model_files import load_model

    model = load_model(V41_MODEL)
    sm100 = gpu == "b200"
    backend = "flashmla_mega" if sm100 and tp == 1 else "flashmla"  # deepseek_v4_hook.py:45-60 (attention TP)
    spec = _ns(speculative_algorithm="DSPARK" if drafts else None, speculative_num_draft_tokens=drafts or None,
               speculative_num_steps=1 if drafts else None, speculative_eagle_topk=1 if drafts else None)
    ctx = {
        "get_schedule": _ns(max_running_requests=mrr, chunked_prefill_size=chunk, swa_prefix_tails=None,
                            disable_overlap_schedule=False, _swa_full_tokens_ratio_explicitly_set=False,
                            swa_full_tokens_ratio=0.1),
        "get_spec": spec,
        "get_memory": _ns(enable_hisparse=False, disable_radix_cache=False),
        "get_exec": _ns(kernel=_ns(dsv4_attn_backend=backend, enable_deepseek_v4_fp4_indexer=False),
                        features=_ns(enable_encoder_swa_bounded_replay=replay)),
        "get_disagg": _ns(disaggregation_mode="null", disaggregation_decode_extra_slots=0),
    }
    for mod in (pc, pool_mod, allocation_sizing):
        for name, bag in ctx.items():
            if hasattr(mod, name):
                setattr(mod, name, (lambda b: (lambda: b))(bag))
    for mod in (pc, allocation_sizing):
        if hasattr(mod, "max_speculative_num_draft_tokens"):
            mod.max_speculative_num_draft_tokens = lambda: drafts or None
    if hasattr(allocation_sizing, "get_alloc_page_size"):
        allocation_sizing.get_alloc_page_size = lambda: 256
    index_page = 128 if sm100 else 64  # dsv41_index_page_size: DeepGEMM's paged sparse MQA logits on Blackwell
    pool_mod.DSV41_INDEX_PAGE_SIZE = index_page
    _fake_sm100(sm100)
    try:
        ratios = [d.compression_ratio for d in model.layers]  # the config's 43 entries; the stage is the 40 main
        main = [d for d in model.layers if not d.is_mtp]
        sources = list(main[0].sharing.kv_sources)
        algo = _ns(is_dspark=lambda: bool(drafts), is_eagle=lambda: False, is_none=lambda: not drafts)
        kvc = _ns(kv_cache_dtype_str="fp8_e4m3",
                  model_config=_ns(qk_nope_head_dim=448, qk_rope_head_dim=64, index_head_dim=128, context_len=length,
                                   compress_ratios=ratios, hf_config=_ns(kv_source_layer_ids=sources),
                                   window_size=128),
                  layer_info=_ns(start_layer=0, end_layer=len(main)), pp_size=1, pp_group=None, spec_algorithm=algo,
                  spec_aux_config=_ns(dspark_num_stages=len(model.layers) - len(main), dflash_draft_num_layers=None),
                  sliding_window_size=128, page_size=256, attn_dp_size=1)
        conf = pc.DSV4PoolConfigurator(kvc)
        cfg = conf.calculate_pool_sizes(kv_memory, 256)
        cfg.max_running_requests = mrr
        cfg = conf.finalize_with_max_running_requests(cfg)
        full = cfg.full_max_total_num_tokens
        theirs = (full, cfg.swa_max_total_num_tokens, cfg.c4_max_total_num_tokens, cfg.c128_max_total_num_tokens,
                  cfg.c4_state_pool_size, cfg.c128_state_pool_size)
        # the pools as DeepSeekV4TokenToKVPool builds them (deepseek_v4_memory_pool.py:1590-1645)
        layout, option = pool_mod.select_dsv4_kv_layout()
        their_pools = []
        if not replay:
            their_pools.append((pool_mod._num_dsv4_physical_kv_pages(cfg.swa_max_total_num_tokens, 256, 256),
                                len(main) * layout.page_bytes(256)))
        for ratio, layers in sorted(conf.stage_owner_layers.items()):
            comp = pool_mod.resolve_compressed_kv_layout(layout, ratio, option)
            their_pools.append((pool_mod._num_dsv4_physical_kv_pages(full // ratio, 256 // ratio, 256),
                                len(layers) * comp.page_bytes(256 // ratio)))
            their_pools.append((pool_mod._num_dsv4_physical_kv_pages((full + 256) // ratio, index_page, index_page),
                                len(layers) * index_page * pool_mod.get_dsv4_indexer_bytes_per_token(128, True)))
        ring2 = pool_mod.get_compress_state_ring_size(2, drafts)
        fixed = (conf._get_c2_state_fixed_bytes(mrr), conf.request_window_bytes,
                 conf._get_low_ratio_kv_padding_bytes(full))
        coeffs = (conf.bytes_per_full_token, conf.bytes_per_swa_token)
    finally:
        _fake_sm100(False)
    plan = get_engine("sglang-0.5.23").configure(
        model, EngineSettings(gpu=gpu, max_running_requests=mrr, chunked_prefill_size=chunk,
                              speculative_num_draft_tokens=drafts or None,
                              enable_encoder_swa_bounded_replay=True if replay else None,
                              tensor_parallel_size=tp), length)
    ours_cfg = plan.pool_config(kv_memory)
    ours = (ours_cfg["full"], ours_cfg["swa"], ours_cfg["c4"], ours_cfg["c128"], ours_cfg["c4_state"],
            ours_cfg["c128_state"])
    sizing = plan.size_pool(kv_memory)
    our_pools = [(pp.units, pp.unit_bytes) for pp in sizing.pools
                 if pp.name.startswith(("SWA", "ratio-1 KV", "ratio-2 KV", "ratio-1 index", "ratio-2 index"))]
    our_fixed = (ours_cfg["c2_state_fixed"], ours_cfg["request_window_fixed"], ours_cfg["padding"])
    extra = []
    if (ours_cfg["bytes_per_full_token"], ours_cfg["bytes_per_swa_token"]) != coeffs:
        extra.append(f"bytes per full/swa token {ours_cfg['bytes_per_full_token']}/{ours_cfg['bytes_per_swa_token']} "
                     f"!= {coeffs}")
    if our_pools != their_pools:
        extra.append(f"pools {our_pools} != {their_pools}")
    if our_fixed != fixed:
        extra.append(f"c2 state / request windows / padding {our_fixed} != {fixed}")
    if plan.v41.window.name != layout.name.upper() and plan.v41.window.name != layout.value.upper():
        extra.append(f"window layout {plan.v41.window.name} != {layout}")
    label = (f"sglang {V41_MODEL} {gpu} tp={tp} ({layout.value}) L={length} kv={kv_memory} mrr={mrr} chunk={chunk} "
             f"drafts={drafts}{' encoder-replay' if replay else ''}")
    ok = ours == theirs and not extra
    text = (f"max_total_num_tokens {theirs[0]:,}, swa {theirs[1]:,}, {coeffs[0]:g} B/full token, ring2 {ring2}, "
            f"c2 state {fixed[0]:,} B, padding {fixed[2]:,.0f} B, pools {their_pools}") if ok else \
        f"csa-plan {ours} != SGLang {theirs} " + "; ".join(extra)
    return ok, f"{'OK  ' if ok else 'FAIL'} {label}: {text}"


def run_sglang_v41(quick: bool) -> list[tuple[bool, str]]:
    out = []
    cases = [("h200", 8), ("b200", 8), ("b200", 1)]
    budgets = (40 * GiB, 62 * GiB, 96 * GiB) if not quick else (62 * GiB,)
    for (gpu, tp), length, kv, mrr, chunk, drafts, replay in itertools.product(
            cases, (1_048_576, 131_072) if not quick else (1_048_576,), budgets,
            (256, 64) if not quick else (256,), (8192, 16384) if not quick else (8192,),
            (0, 6) if not quick else (0,), (False, True) if not quick else (False,)):
        try:
            out.append(sglang_v41_case(gpu, tp, length, kv, mrr, chunk, drafts, replay))
        except Exception as exc:
            out.append((False, f"FAIL sglang {V41_MODEL} {gpu} tp={tp} L={length} kv={kv} mrr={mrr} chunk={chunk} "
                               f"drafts={drafts} replay={replay}: {type(exc).__name__}: {exc}"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small subset of the cases")
    parser.add_argument("--engine", choices=("vllm", "sglang", "all"), default="all")
    args = parser.parse_args(argv)
    from crosscheck_answers import _import_csa_plan  # csa_plan from this checkout where it is not installed

    _import_csa_plan()
    results: list[tuple[bool, str]] = []
    if args.engine in ("vllm", "all"):
        release = installed_vllm_release()
        results += run_vllm(args.quick) if release == "vllm-0.33" else run_vllm_legacy(release, args.quick)
        if release in ("vllm-0.33", "vllm-0.34"):
            results += run_vllm_v41(args.quick, release)
    if args.engine in ("sglang", "all"):
        results += run_sglang(args.quick)
        results += run_sglang_v41(args.quick)
    for _, line in results:
        print(line)
    bad = sum(1 for ok, _ in results if not ok)
    print(f"{len(results) - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
