"""Engine settings as the user gives them, and the GPU an engine is planned for.

``EngineSettings`` holds every memory-relevant engine option under the engine's own
name; ``None`` means "the engine's default" (each engine model resolves its defaults and
says where each came from). An option an engine does not have is bad input that names
the engine's own spelling, e.g. ``--page-size`` for vLLM says to use ``--block-size``.

``GpuTarget`` is the card the engine runs on (from the card table, ``planner/cards.py``): its compute capability decides what the
engine refuses (vLLM's MXFP4 indexer needs sm_10x) and its memory decides size-tiered
defaults (vLLM's max_num_batched_tokens for ``vllm serve``: 8192 on 70-160 GiB cards).
"""

from __future__ import annotations

import math
from dataclasses import fields

from csa_plan.planner.errors import BadInput
from csa_plan.planner.values import shown_against
from csa_plan.planner.limits import (MAX_BATCH_TOKENS, MAX_BLOCK_TOKENS, MAX_NAME_CHARS, MAX_RUNNING_REQUESTS,
                                     MAX_SPECULATIVE_TOKENS)
from csa_plan.planner.record import record
from csa_plan.planner.text import excerpt
from csa_plan.planner.cards import CARDS, DEFAULT_CARD, card

# Compute capability (major, minor) of each card csa-plan names: a view of the card table.
GPU_CAPABILITY: dict[str, tuple[int, int]] = {name: c.capability for name, c in CARDS.items()}
DEFAULT_GPU = DEFAULT_CARD


@record
class GpuTarget:
    """The card an engine is planned for: its table entry, with the memory the device budget
    uses (``--device-memory`` when given: the size tiers follow the budgeted memory)."""

    name: str
    capability: tuple[int, int]
    memory_bytes: int
    device_name: str = ""
    vendor: str = "nvidia"

    @property
    def sm(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"


def gpu_target(name: str | None, source: str = "options", field: str = "--gpu",
               memory_bytes: int | None = None) -> GpuTarget:
    c = card(name, source, field)
    return GpuTarget(c.name, c.capability, c.memory_bytes if memory_bytes is None else int(memory_bytes),
                     c.device_name, c.vendor)


def target_of(settings: "EngineSettings") -> tuple[GpuTarget, str]:
    """The target GPU of engine settings and where it came from (for the resolved-settings table)."""
    gpu = gpu_target(settings.gpu, memory_bytes=settings.gpu_memory_bytes)
    if settings.gpu is None:
        return gpu, f"csa-plan default ({DEFAULT_CARD.upper()})"
    return gpu, "given (--gpu or --device-memory)"


@record
class EngineSettings:
    """Every engine option that changes memory; ``None`` = the engine's default."""

    gpu: str | None = None
    block_size: int | None = None  # vLLM --block-size
    page_size: int | None = None  # SGLang --page-size
    kv_cache_dtype: str | None = None  # both: --kv-cache-dtype
    indexer_kv_dtype: str | None = None  # vLLM --indexer-kv-dtype (auto | fp8 | mxfp4); SGLang: fp8 | fp4
    max_num_batched_tokens: int | None = None  # vLLM
    chunked_prefill_size: int | None = None  # SGLang
    max_num_seqs: int | None = None  # vLLM
    max_running_requests: int | None = None  # SGLang
    async_scheduling: bool | None = None  # vLLM --async-scheduling / --no-async-scheduling
    num_speculative_tokens: int | None = None  # vLLM: MTP draft tokens a step proposes (the MTP depth)
    speculative_num_steps: int | None = None  # SGLang: draft steps (EAGLE/MTP); its draft tokens = steps + 1
    speculative_eagle_topk: int | None = None  # SGLang: branches a draft step keeps (DeepSeek-V4: 1 only)
    speculative_num_draft_tokens: int | None = None  # SGLang: tokens verified a step (steps + 1 at top-k 1)
    gpu_memory_utilization: float | None = None  # vLLM (the device budget's step)
    mem_fraction_static: float | None = None  # SGLang (the device budget's step)
    moe_runner_backend: str | None = None  # SGLang --moe-runner-backend (auto | flashinfer_mxfp4 | marlin)
    shared_expert_tp1: bool | None = None  # SGLang's SGLANG_SHARED_EXPERT_TP1=1: the shared expert replicated
    usage: str | None = None  # vLLM usage context: "serve" (vllm serve) or "llm" (the LLM class)
    # start-up memory (planner/budget/vllm_nonkv.py, budget/startup.py): what the non-KV terms read
    cudagraph_capture_sizes: tuple[int, ...] | None = None  # vLLM --cudagraph-capture-sizes
    max_cudagraph_capture_size: int | None = None  # vLLM --max-cudagraph-capture-size
    enforce_eager: bool | None = None  # vLLM --enforce-eager
    compilation_config: str | None = None  # vLLM --compilation-config JSON (its cudagraph_mode is read)
    estimate_cudagraphs: bool | None = None  # vLLM VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1/0
    moe_backend: str | None = None  # vLLM --moe-backend
    all2all_backend: str | None = None  # vLLM --all2all-backend (DeepEP buffers: planner/budget/deepep.py)
    cuda_graph_max_bs: int | None = None  # SGLang --cuda-graph-max-bs
    disable_cuda_graph: bool | None = None  # SGLang --disable-cuda-graph
    moe_a2a_backend: str | None = None  # SGLang --moe-a2a-backend
    load_balance_method: str | None = None  # SGLang --load-balance-method (DP ranks: serving/balancer.py)
    enable_encoder_swa_bounded_replay: bool | None = None  # SGLang: V4.1 target windows in per-request rings
    # not an option: the device memory the budget uses (--device-memory, or --gpu's card); the
    # target GPU's size-tiered defaults read it (None: the card's own memory)
    gpu_memory_bytes: int | None = None
    # not an option: SGLang's --dp-size under --enable-dp-attention, from csa-plan's --dp (SGLang divides
    # --max-running-requests by it per worker); None or 1: no DP attention
    dp_attention_size: int | None = None
    # not an option: csa-plan's --tp, SGLang's attention TP (SGLang's --tp is tp x dp); it picks V4.1's backend
    tensor_parallel_size: int | None = None
    # not an option: the vLLM version a user named (``vllm-0.30.1``) when the release map hands it to another
    # release's rules; a model the named release runs differently (V4.1 before 0.33) is refused by that name
    release_named: str | None = None

    def __post_init__(self) -> None:
        for name, (low, high, limit) in SETTING_RANGES.items():
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, float) and not math.isfinite(value) or not low <= value <= high:
                shown = f"{value:,}" if isinstance(value, int) else shown_against(value, low, high)
                raise BadInput("options", OPTION_SPELLING[name], f"{shown} is outside its range {low:,}..{high:,} "
                                                                 f"({limit})")
        for name in ("gpu_memory_utilization", "mem_fraction_static"):  # the engines' own (0, 1] checks
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and 0 < value <= 1):
                raise BadInput("options", OPTION_SPELLING[name], f"{shown_against(value, 0, 1)} is outside its range 0 < x <= 1 "
                                                                 "(a fraction of the card)")
        if self.compilation_config is not None:
            cudagraph_mode(self.compilation_config)  # bad input now, naming the option
        if self.cudagraph_capture_sizes is not None:
            for size in self.cudagraph_capture_sizes:
                if not 1 <= size <= MAX_BATCH_TOKENS:
                    raise BadInput("options", "--cudagraph-capture-sizes", f"{size:,} is outside its range "
                                   f"1..{MAX_BATCH_TOKENS:,} (MAX_BATCH_TOKENS)")
        for name in ("kv_cache_dtype", "indexer_kv_dtype"):
            value = getattr(self, name)
            if value is not None and not (0 < len(value) <= MAX_NAME_CHARS):
                raise BadInput("options", OPTION_SPELLING[name], f"{excerpt(value)} is not a dtype name")

    def given(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self) if f.name not in DERIVED and getattr(self, f.name) is not None)


DERIVED = ("gpu_memory_bytes", "dp_attention_size", "tensor_parallel_size", "release_named")


# The range of each numeric setting, (low, high, the limit's name): zero, negative and absurd
# values are bad input naming the option and its range. The fractions are the engines' own
# (0, 1] checks; a count of 0 is never a setting (csa-plan has no "0 = default" spelling).
SETTING_RANGES: dict[str, tuple[float, float, str]] = {
    "block_size": (1, MAX_BLOCK_TOKENS, "MAX_BLOCK_TOKENS"),
    "page_size": (1, MAX_BLOCK_TOKENS, "MAX_BLOCK_TOKENS"),
    "max_num_batched_tokens": (1, MAX_BATCH_TOKENS, "MAX_BATCH_TOKENS"),
    "chunked_prefill_size": (1, MAX_BATCH_TOKENS, "MAX_BATCH_TOKENS"),
    "max_num_seqs": (1, MAX_RUNNING_REQUESTS, "MAX_RUNNING_REQUESTS"),
    "max_running_requests": (1, MAX_RUNNING_REQUESTS, "MAX_RUNNING_REQUESTS"),
    "num_speculative_tokens": (0, MAX_SPECULATIVE_TOKENS, "MAX_SPECULATIVE_TOKENS; 0 = no speculative decoding"),
    "max_cudagraph_capture_size": (1, MAX_BATCH_TOKENS, "MAX_BATCH_TOKENS"),
    "cuda_graph_max_bs": (1, MAX_RUNNING_REQUESTS, "MAX_RUNNING_REQUESTS"),
}

# How each engine spells each setting (for messages: "vLLM has no --page-size; use --block-size").
OPTION_SPELLING: dict[str, str] = {
    "gpu": "--gpu",
    "block_size": "--block-size",
    "page_size": "--page-size",
    "kv_cache_dtype": "--kv-cache-dtype",
    "indexer_kv_dtype": "--indexer-kv-dtype",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "chunked_prefill_size": "--chunked-prefill-size",
    "max_num_seqs": "--max-num-seqs",
    "max_running_requests": "--max-running-requests",
    "async_scheduling": "--async-scheduling/--no-async-scheduling",
    "num_speculative_tokens": "--num-speculative-tokens",
    "speculative_num_steps": "--speculative-num-steps",
    "speculative_eagle_topk": "--speculative-eagle-topk",
    "speculative_num_draft_tokens": "--speculative-num-draft-tokens",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "mem_fraction_static": "--mem-fraction-static",
    "moe_runner_backend": "--moe-runner-backend",
    "shared_expert_tp1": "--shared-expert-tp1",
    "usage": "--usage",
    "cudagraph_capture_sizes": "--cudagraph-capture-sizes",
    "max_cudagraph_capture_size": "--max-cudagraph-capture-size",
    "enforce_eager": "--enforce-eager",
    "compilation_config": "--compilation-config",
    "estimate_cudagraphs": "--estimate-cudagraphs/--no-estimate-cudagraphs",
    "moe_backend": "--moe-backend",
    "all2all_backend": "--all2all-backend",
    "cuda_graph_max_bs": "--cuda-graph-max-bs",
    "disable_cuda_graph": "--disable-cuda-graph",
    "moe_a2a_backend": "--moe-a2a-backend",
    "load_balance_method": "--load-balance-method",
    "enable_encoder_swa_bounded_replay": "--enable-encoder-swa-bounded-replay",
}

# Whose option each engine-only setting is (for "vllm-0.33 has no such setting; --cuda-graph-max-bs is SGLang's").
OWNER: dict[str, str] = {
    **{name: "vLLM" for name in ("block_size", "max_num_batched_tokens", "max_num_seqs", "async_scheduling",
                                 "num_speculative_tokens", "gpu_memory_utilization", "usage",
                                 "cudagraph_capture_sizes", "max_cudagraph_capture_size", "enforce_eager",
                                 "compilation_config", "estimate_cudagraphs", "moe_backend",
                                 "all2all_backend")},
    **{name: "SGLang" for name in ("page_size", "chunked_prefill_size", "max_running_requests",
                                   "speculative_num_steps", "speculative_eagle_topk",
                                   "speculative_num_draft_tokens", "mem_fraction_static", "moe_runner_backend",
                                   "shared_expert_tp1", "cuda_graph_max_bs", "disable_cuda_graph",
                                   "moe_a2a_backend", "enable_encoder_swa_bounded_replay", "load_balance_method")},
}

# The same setting under another engine's name, where the memory it governs is alike.
GRAPH_COUNTERPART: dict[str, str] = {
    "enforce_eager": "disable_cuda_graph", "disable_cuda_graph": "enforce_eager",
    "max_cudagraph_capture_size": "cuda_graph_max_bs", "cuda_graph_max_bs": "max_cudagraph_capture_size",
    "moe_backend": "moe_runner_backend", "moe_runner_backend": "moe_backend",
}

CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")  # vLLM CUDAGraphMode
COMPILATION_KEYS = ("cudagraph_mode", "cudagraph_capture_sizes", "max_cudagraph_capture_size", "custom_ops", "mode")


def cudagraph_mode(text: str) -> str | None:
    """--compilation-config's cudagraph_mode (None: not given), from vLLM's JSON form. Keys that change no
    start-up memory (custom_ops, mode) are taken; a key csa-plan does not read is bad input, not ignored."""
    import json

    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise BadInput("options", "--compilation-config", f"{excerpt(text)} is not a JSON object "
                       "(for example '{\"cudagraph_mode\": \"PIECEWISE\"}')")
    for key in value:
        if key not in COMPILATION_KEYS:
            raise BadInput("options", "--compilation-config", f"key {excerpt(key)} is not one csa-plan reads "
                           f"({', '.join(COMPILATION_KEYS)}); give the capture sizes with --cudagraph-capture-sizes")
    if "cudagraph_capture_sizes" in value or "max_cudagraph_capture_size" in value:
        raise BadInput("options", "--compilation-config", "give cudagraph_capture_sizes / max_cudagraph_capture_size "
                       "as --cudagraph-capture-sizes / --max-cudagraph-capture-size")
    mode = value.get("cudagraph_mode")
    if mode is None:
        return None
    if not isinstance(mode, str) or mode.upper() not in CUDAGRAPH_MODES:
        raise BadInput("options", "--compilation-config", f"cudagraph_mode {excerpt(mode)} is not one of "
                       f"{', '.join(CUDAGRAPH_MODES)} (vllm config/compilation.py CUDAGraphMode)")
    return mode.upper()

# The same setting under another engine's name: what to say instead of a bare "unknown".
COUNTERPART: dict[str, str] = {
    "block_size": "page_size", "page_size": "block_size",
    "max_num_batched_tokens": "chunked_prefill_size", "chunked_prefill_size": "max_num_batched_tokens",
    "max_num_seqs": "max_running_requests", "max_running_requests": "max_num_seqs",
    "gpu_memory_utilization": "mem_fraction_static", "mem_fraction_static": "gpu_memory_utilization",
    # vLLM's --num-speculative-tokens N proposes N draft tokens a step: SGLang's N draft steps (whose
    # --speculative-num-draft-tokens is N + 1, the verified token included); SGLang's three name vLLM's one.
    "num_speculative_tokens": "speculative_num_steps", "speculative_num_steps": "num_speculative_tokens",
    "speculative_eagle_topk": "num_speculative_tokens", "speculative_num_draft_tokens": "num_speculative_tokens",
}

# What an option means where its counterpart is not the same count (said with the hint).
MEANING: dict[str, str] = {
    "num_speculative_tokens": " (vLLM's N draft tokens a step are SGLang's N draft steps: "
                              "--speculative-num-draft-tokens is then N + 1)",
    "speculative_num_steps": " (SGLang's N draft steps propose N draft tokens a step, vLLM's N)",
    "speculative_num_draft_tokens": " (SGLang's draft tokens count the verified token: vLLM's N is SGLang's N + 1)",
    "speculative_eagle_topk": " (vLLM's MTP drafts one chain: no top-k)",
}


def known(option: str, value: str, choices: tuple[str, ...], where: str) -> None:
    """Bad input for a value the engine's own argument parser would reject (``where`` names its list)."""
    if value not in choices:
        from csa_plan.planner.suggest import unknown_problem

        raise BadInput("options", option, f"{unknown_problem('value', value, choices)} ({where})")


def check_accepted(settings: EngineSettings, engine: str, accepted: tuple[str, ...], source: str = "options") -> None:
    """Bad input for any setting the engine does not have, naming its own spelling if any."""
    for name in settings.given():
        if name in accepted:
            continue
        other = COUNTERPART.get(name) or GRAPH_COUNTERPART.get(name)
        owner = OWNER.get(name)
        hint = f"; it is {owner}'s option" if owner else ""
        if other in accepted:
            hint += f"; {engine} spells it {OPTION_SPELLING[other]}{MEANING.get(name, '')}"
        raise BadInput(source, OPTION_SPELLING[name], f"{engine} has no such setting{hint}")
