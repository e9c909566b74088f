"""The option groups every planning command shares, declared once: engine settings and deployment.

A command lists ``engine_params()`` and ``DEPLOYMENT_PARAMS`` among its parameters and wraps its
body in ``with_engine_settings`` and ``with_deployment``, which turn the group's values into the
one object the body takes (an ``EngineSettings``, a ``Deployment``).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from csa_plan.cli.params import Kind, Opt
from csa_plan.planner.serving.balancer import SGLANG_CHOICES as SGLANG_LB_METHODS


def _engine_help(opt: Opt) -> str:
    """``--engine``'s help names the registry's engines, read only when help is shown, so that
    parsing a command never imports the engine models (start-up: docs/architecture.md)."""
    from csa_plan.planner.engines.registry import ENGINES

    return (f"Plan as this engine release does: {', '.join(ENGINES)} (docs/engines.md)"
            + ("; repeat it to run engines side by side." if opt.multiple else "."))


# -- engine settings, spelled as the engines spell them ---------------------------------------

# vllm-0.25.0 config/kernel.py MoEBackend; sglang-0.5.23 layers/moe/utils.py MoeA2ABackend (names only:
# no planner module is imported to parse a command)
VLLM_MOE_BACKENDS = ("auto", "triton", "deep_gemm", "deep_gemm_mega_moe", "cutlass", "flashinfer_trtllm",
                     "flashinfer_cutlass", "flashinfer_cutedsl", "flashinfer_b12x", "marlin", "humming",
                     "triton_unfused", "aiter")
# vllm-0.26.0 config/parallel.py:40-53 All2AllBackend (names only)
VLLM_A2A_BACKENDS = ("naive", "pplx", "deepep_high_throughput", "deepep_low_latency", "deepep_v2",
                     "mori_high_throughput", "mori_low_latency", "nixl_ep", "allgather_reducescatter",
                     "flashinfer_all2allv", "flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided")
SGLANG_A2A_BACKENDS = ("none", "deepep", "mooncake", "nixl", "mori", "ascend_fuseep", "ascend_tp", "flashinfer",
                       "megamoe", "deepep_v2", "pplx", "flashinfer_megamoe", "customized")

ENGINE_PARAMS: tuple[Opt, ...] = (
    Opt(("--engine",), "engine", metavar="NAME", help_from=_engine_help),
    Opt(("--kv-memory",), "kv_memory", Kind.SIZE,
        help="KV cache memory per device, as the engine logs it (vLLM: 'Available KV cache memory')."),
    Opt(("--gpu",), "gpu", metavar="NAME",
        help="Target GPU for engine rules and defaults; alone it also sets --device-memory "
             "(docs/gpus.md) [default: the --device-memory card, else h200]."),
    Opt(("--block-size",), "block_size", Kind.COUNT, help="vLLM --block-size [default: 256 for DeepSeek-V4]."),
    Opt(("--page-size",), "page_size", Kind.COUNT, help="SGLang --page-size [default: 256 for DeepSeek-V4]."),
    Opt(("--kv-cache-dtype",), "kv_cache_dtype", metavar="DTYPE", help="Engine --kv-cache-dtype [default: auto]."),
    Opt(("--indexer-kv-dtype",), "indexer_kv_dtype", metavar="DTYPE",
        help="Indexer key cache: vLLM auto|fp8|mxfp4, SGLang fp8|fp4 [default: fp8]."),
    Opt(("--max-num-batched-tokens",), "max_num_batched_tokens", Kind.COUNT,
        help="vLLM --max-num-batched-tokens [default: 8192 for vllm serve on an H200]."),
    Opt(("--chunked-prefill-size",), "chunked_prefill_size", Kind.COUNT,
        help="SGLang --chunked-prefill-size [default: 8192 on an H200]."),
    Opt(("--max-num-seqs",), "max_num_seqs", Kind.COUNT, help="vLLM --max-num-seqs [default: 1024]."),
    Opt(("--max-running-requests",), "max_running_requests", Kind.COUNT,
        help="SGLang --max-running-requests [default: 256 for DeepSeek-V4]."),
    Opt(("--async-scheduling",), "async_scheduling", Kind.SWITCH, off=("--no-async-scheduling",),
        help="vLLM async scheduling [default: on]: two batches in flight."),
    Opt(("--num-speculative-tokens",), "num_speculative_tokens", Kind.COUNT,
        help="vLLM MTP speculative decoding with N draft tokens a step [default: off]."),
    Opt(("--speculative-num-steps",), "speculative_num_steps", Kind.COUNT,
        help="SGLang EAGLE/MTP draft steps (draft tokens = steps + 1 at top-k 1) [default: off]."),
    Opt(("--speculative-eagle-topk",), "speculative_eagle_topk", Kind.COUNT,
        help="SGLang draft branches a step (DeepSeek-V4: 1) [default: 1 with --speculative-num-steps]."),
    Opt(("--speculative-num-draft-tokens",), "speculative_num_draft_tokens", Kind.COUNT,
        help="SGLang tokens verified a step [default: --speculative-num-steps + 1]."),
    Opt(("--gpu-memory-utilization",), "gpu_memory_utilization", Kind.FLOAT,
        help="vLLM fraction of the card [default: 0.92]."),
    Opt(("--mem-fraction-static",), "mem_fraction_static", Kind.FLOAT, help="SGLang static memory fraction."),
    Opt(("--moe-runner-backend",), "moe_runner_backend", metavar="NAME",
        help="SGLang MoE runner: auto | flashinfer_mxfp4 | marlin (how FP4 experts shard) [default: auto]."),
    Opt(("--shared-expert-tp1",), "shared_expert_tp1", Kind.FLAG, default=None,
        help="SGLang run with SGLANG_SHARED_EXPERT_TP1=1: the shared expert replicated on every rank "
             "(lifts its 128-column block rule) [default: off]."),
    Opt(("--cudagraph-capture-sizes",), "cudagraph_capture_sizes", Kind.COUNTS, metavar="N,N,...",
        help="vLLM CUDA-graph capture sizes [default: the release's list up to --max-cudagraph-capture-size]."),
    Opt(("--max-cudagraph-capture-size",), "max_cudagraph_capture_size", Kind.COUNT,
        help="vLLM largest CUDA-graph capture [default: min(max_num_seqs x (1 + draft tokens) x 2, 512)]."),
    Opt(("--enforce-eager",), "enforce_eager", Kind.FLAG, default=None,
        help="vLLM eager mode: no CUDA graphs captured nor subtracted [default: off]."),
    Opt(("--compilation-config",), "compilation_config", metavar="JSON",
        help="vLLM compilation config; its cudagraph_mode is read (NONE, PIECEWISE, FULL, FULL_DECODE_ONLY, "
             "FULL_AND_PIECEWISE) [default: FULL_AND_PIECEWISE]."),
    Opt(("--estimate-cudagraphs",), "estimate_cudagraphs", Kind.SWITCH, off=("--no-estimate-cudagraphs",),
        help="vLLM VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1/0: subtract the CUDA-graph estimate [default: on]."),
    Opt(("--moe-backend",), "moe_backend", Kind.NAME, metavar="NAME", choices=VLLM_MOE_BACKENDS,
        help="vLLM MoE backend; deep_gemm_mega_moe adds its symmetric buffer [default: auto]."),
    Opt(("--all2all-backend",), "all2all_backend", Kind.NAME, metavar="NAME", choices=VLLM_A2A_BACKENDS,
        help="vLLM MoE all-to-all backend; deepep_* adds DeepEP's buffers under EP with DP > 1 [default: "
             "allgather_reducescatter]."),
    Opt(("--cuda-graph-max-bs",), "cuda_graph_max_bs", Kind.COUNT,
        help="SGLang decode CUDA-graph max batch [default: by card memory, 256/512 on an H200]."),
    Opt(("--disable-cuda-graph",), "disable_cuda_graph", Kind.FLAG, default=None,
        help="SGLang: no decode CUDA graphs (their reserve is dropped) [default: off]."),
    Opt(("--moe-a2a-backend",), "moe_a2a_backend", Kind.NAME, metavar="NAME", choices=SGLANG_A2A_BACKENDS,
        help="SGLang MoE all-to-all backend; deepep adds 2 GiB to the reserve [default: none]."),
    Opt(("--load-balance-method",), "load_balance_method", Kind.NAME, metavar="NAME", choices=SGLANG_LB_METHODS,
        help="SGLang: how requests are spread over the --dp ranks (its DataParallelController); vLLM's is not "
             "configurable [default: auto = round_robin]."),
    Opt(("--enable-encoder-swa-bounded-replay",), "enable_encoder_swa_bounded_replay", Kind.FLAG, default=None,
        help="SGLang (DeepSeek-V4.1): target windows in per-request rings instead of the paged SWA pool "
             "[default: off]."),
    Opt(("--usage",), "usage", Kind.CHOICE, choices=("serve", "llm"),
        help="vLLM usage context for its defaults: vllm serve or the LLM class [default: serve]."),
)
ENGINE_OPTION_NAMES = tuple(opt.dest for opt in ENGINE_PARAMS)


def engine_params(*, multiple: bool = False) -> tuple[Opt, ...]:
    """The engine group; with ``multiple``, ``--engine`` may be repeated."""
    if not multiple:
        return ENGINE_PARAMS
    from dataclasses import replace

    return (replace(ENGINE_PARAMS[0], multiple=True), *ENGINE_PARAMS[1:])


def with_engine_settings(func: Callable[..., Any] | None = None, *, multiple: bool = False) -> Any:
    """The body receives ``engine`` (a name or None), ``kv_memory`` (bytes or None) and
    ``engine_settings`` (an EngineSettings). With ``multiple`` it also receives ``engines``
    (every name given, in order; ``engine`` is the first)."""
    if func is None:
        return functools.partial(with_engine_settings, multiple=multiple)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from csa_plan.planner.engines.settings import EngineSettings

        values = {name: kwargs.pop(name) for name in ENGINE_OPTION_NAMES}
        engine, kv_memory = values.pop("engine"), values.pop("kv_memory")
        names = tuple(engine) if multiple else ((engine,) if engine is not None else ())
        if names:
            from csa_plan.cli.stream import echo
            from csa_plan.planner.engines.registry import resolve_engine_name

            from csa_plan.planner.shared_engines import before_modelled, spelled

            resolved = []
            for name in names:
                if not multiple and before_modelled(name):  # the release named, for the V4.1 refusal
                    values["release_named"] = spelled(name)
                name, note = resolve_engine_name(name)
                if note:
                    echo(f"note: {note}", err=True)
                resolved.append(name)
            names = tuple(resolved)
        engine = names[0] if names else None
        if multiple:
            kwargs["engines"] = names
        gpu = values.pop("gpu")
        if "device_memory" in kwargs:  # one target GPU: a card named by either option names it for both
            from csa_plan.planner.cards import resolve_target

            given_gpu = gpu
            kwargs["device_memory"], card = resolve_target(kwargs["device_memory"], gpu)
            if card is not None and given_gpu is None and engine is not None:
                from csa_plan.planner.engines.registry import get_engine

                if "gpu" in get_engine(engine).options:  # an engine with no --gpu is not given one
                    gpu = card.name
            if kwargs["device_memory"] is not None:
                values["gpu_memory_bytes"] = int(kwargs["device_memory"])
        settings = EngineSettings(gpu=gpu, **values)
        check_kv_memory(kv_memory, kwargs.get("device_memory"), gpu)
        if engine is None and (kv_memory is not None or settings.given()):
            from csa_plan.planner.errors import BadInput
            from csa_plan.planner.engines.settings import OPTION_SPELLING

            others = [n for n in settings.given() if n != "gpu" or "device_memory" not in kwargs]
            if kv_memory is not None or others:
                given = "--kv-memory" if kv_memory is not None else OPTION_SPELLING[others[0]]
                raise BadInput("options", given, "is an engine setting: name the engine with --engine")
        return func(*args, engine=engine, kv_memory=kv_memory, engine_settings=settings, **kwargs)

    return wrapper


def check_kv_memory(kv_memory: int | None, device_memory: int | None, gpu: str | None) -> None:
    """--kv-memory is a pool in one GPU's memory: never more than the card (--device-memory, or --gpu's
    card) holds (a pool of 931 GiB was sized on an H200)."""
    if kv_memory is None:
        return
    card_bytes, name = device_memory, "--device-memory"
    if card_bytes is None and gpu is not None:
        from csa_plan.planner.cards import find_card

        card = find_card(gpu)
        if card is not None:
            card_bytes, name = int(card.memory_bytes), f"the {card.name} card"
    if card_bytes is not None and kv_memory >= card_bytes:
        from csa_plan.planner.errors import BadInput

        raise BadInput("options", "--kv-memory", f"{int(kv_memory):,} bytes is at or above {name} "
                                                 f"({int(card_bytes):,} bytes): the pool lives in one GPU's memory")


# -- deployment: check, compare, simulate and sweep ----------------------------------------------

DEPLOYMENT_PARAMS: tuple[Opt, ...] = (
    Opt(("--tp",), "tp", Kind.COUNT,
        help="Tensor-parallel ranks per data-parallel rank: attention heads split [default: 1]."),
    Opt(("--pp",), "pp", Kind.COUNT, help="Pipeline stages (contiguous layer split) [default: 1]."),
    Opt(("--dp",), "dp", Kind.COUNT, help="Data-parallel attention ranks, each serving its own requests [default: 1]."),
    Opt(("--ep",), "ep", Kind.COUNT, help="Expert-parallel ranks over the tp x dp GPUs [default: the engine's]."),
    Opt(("--weights",), "weights", Kind.SIZE,
        help="Weights per device (replaces the tensor inventory / checkpoint figure)."),
    Opt(("--reserved",), "reserved", Kind.SIZE,
        help="Engine buffers, activations and CUDA graphs per device (replaces the engine rules' "
             "figures) [default: from the engine's start-up rules]."),
    Opt(("--budget-plot",), "budget_plot", metavar="FILE.png",
        help="Draw the device budget as a waterfall (needs matplotlib: csa-plan[plot])."),
)
DEPLOYMENT_OPTION_NAMES = tuple(opt.dest for opt in DEPLOYMENT_PARAMS)


# -- disaggregated roles: simulate and check (planner/serving/disaggregation.py) --------------------

def _role_params(role: str, what: str) -> tuple[Opt, ...]:
    """One role's shape, read as the aggregated --tp/--dp/--ep read (each role is its own engine instance)."""
    return (
        Opt((f"--{role}-workers",), f"{role}_workers", Kind.COUNT,
            help=f"{what}: engine instances of the {role} role, each --{role}-tp x --{role}-dp GPUs [default: 1 "
                 "when the role is named] (docs/disaggregation.md)."),
        Opt((f"--{role}-tp",), f"{role}_tp", Kind.COUNT,
            help=f"Tensor-parallel ranks per data-parallel rank of one {role} instance [default: 1]."),
        Opt((f"--{role}-dp",), f"{role}_dp", Kind.COUNT,
            help=f"Data-parallel ranks of one {role} instance (vLLM --data-parallel-size; SGLang --dp-size with "
                 "--enable-dp-attention), each its own pool [default: 1]."),
        Opt((f"--{role}-ep",), f"{role}_ep", Kind.COUNT,
            help=f"Expert-parallel ranks of one {role} instance over its tp x dp GPUs [default: none]."),
    )


ROLE_PARAMS: tuple[Opt, ...] = (_role_params("prefill", "Disaggregated serving (--engine)")
                                + _role_params("decode", "Disaggregated serving"))


def _spelling_opts() -> tuple[Opt, ...]:
    """The engines' own spellings of the deployment (``planner/engines/flags.py``: vLLM's
    ``-tp``/``--enable-expert-parallel``, SGLang's ``--tp-size``/``--enable-dp-attention``, ...),
    read as the named engine spells them (commands with ``--engine``: check, simulate)."""
    from csa_plan.planner.engines.flags import SPELLINGS, help_text

    return tuple(Opt((s.spelled,), "engine_flag_" + s.spelled.lstrip("-").replace("-", "_"),
                     Kind.FLAG if s.switch else Kind.COUNT, default=None,
                     help=help_text(s.spelled)) for s in SPELLINGS)


ENGINE_SPELLING_PARAMS: tuple[Opt, ...] = _spelling_opts()
ENGINE_SPELLING_NAMES = {opt.dest: opt.decls[0] for opt in ENGINE_SPELLING_PARAMS}


def with_deployment(func: Callable[..., Any]) -> Callable[..., Any]:
    """The body receives ``deployment`` (a planner Deployment; None fields = the command's or
    engine's default) and ``budget_plot`` (a path or None)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from csa_plan.planner.budget.deployment import Deployment

        v = {name: kwargs.pop(name) for name in DEPLOYMENT_OPTION_NAMES}
        spelled = {ENGINE_SPELLING_NAMES[name]: kwargs.pop(name) for name in ENGINE_SPELLING_NAMES if name in kwargs}
        spelled = {k: value for k, value in spelled.items() if value not in (None, False)}
        if spelled:  # vLLM's -tp, SGLang's --tp-size ...: read as the named engine spells them
            from csa_plan.planner.engines.flags import read_engine_flags

            engines = kwargs.get("engines") or ((kwargs["engine"],) if kwargs.get("engine") else ())
            read = read_engine_flags(spelled, tuple(engines), v["tp"], v["pp"], v["dp"], v["ep"])
            v.update(tp=read.tp, pp=read.pp, dp=read.dp, ep=read.ep)
            if read.note:
                from csa_plan.cli.stream import echo

                echo(f"note: {read.note}", err=True)
        if v["budget_plot"] is not None:
            from csa_plan.planner.files import check_output_path

            check_output_path(v["budget_plot"], "--budget-plot")  # before any work
            from csa_plan.cli.plots import require_plotting

            require_plotting("--budget-plot")
        deployment = Deployment(tp=v["tp"], pp=v["pp"], dp=v["dp"], ep=v["ep"], weights_bytes=v["weights"],
                                reserved_bytes=v["reserved"])
        return func(*args, deployment=deployment, budget_plot=v["budget_plot"], **kwargs)

    return wrapper
