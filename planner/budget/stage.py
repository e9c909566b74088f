"""What one pipeline stage's start-up budget depends on: the engine settings it reads, the model's
sizes from its config, and the stage itself.

Apart from ``startup.py`` (the engines' rules) so that each engine's rule modules
(``vllm_nonkv.py``) read the same inputs without importing the rules that call them.
"""

from __future__ import annotations

from typing import Any, Mapping

from csa_plan.planner.errors import BadInput
from csa_plan.planner.placement import Placement
from csa_plan.planner.record import record
from csa_plan.planner.values import read_int


@record
class StartupSettings:
    """Engine settings a start-up budget reads; None = the engine's default for the card."""

    max_num_batched_tokens: int | None = None    # vLLM
    usage: str | None = None                      # vLLM: "serve" (vllm serve) or "llm" (the LLM class)
    gpu_memory_utilization: float | None = None   # vLLM
    chunked_prefill_size: int | None = None       # SGLang
    mem_fraction_static: float | None = None      # SGLang
    cuda_graph_max_bs: int | None = None          # SGLang
    speculative_tokens: int = 0                   # MTP draft tokens (0: no speculative decoding)
    moe_runner_backend: str | None = None         # SGLang: the MoE runner (how FP4 experts are sharded)
    shared_expert_tp1: bool = False               # SGLang: SGLANG_SHARED_EXPERT_TP1=1 (shared expert replicated)
    gpu: str | None = None                        # the engine's target card (rules needing a capability; its
                                                  # device name picks vLLM's batch defaults)
    max_num_seqs: int | None = None               # vLLM (its CUDA-graph capture list)
    cudagraph_capture_sizes: tuple[int, ...] | None = None  # vLLM --cudagraph-capture-sizes
    max_cudagraph_capture_size: int | None = None  # vLLM --max-cudagraph-capture-size
    enforce_eager: bool = False                   # vLLM --enforce-eager
    cudagraph_mode: str | None = None             # vLLM --compilation-config cudagraph_mode
    estimate_cudagraphs: bool | None = None       # vLLM VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS (default on)
    moe_backend: str | None = None                # vLLM --moe-backend
    all2all_backend: str | None = None            # vLLM --all2all-backend
    disable_cuda_graph: bool = False              # SGLang --disable-cuda-graph
    moe_a2a_backend: str | None = None            # SGLang --moe-a2a-backend


@record
class ModelDims:
    """The config sizes the start-up buffers depend on (from a checkpoint config)."""

    hidden: int
    hc_mult: int
    index_topk: int
    max_position_embeddings: int
    rope_head_dim: int
    compress_ratios: tuple[int, ...]   # main layers, then MTP layers
    num_main: int
    experts_per_token: int = 0         # num_experts_per_tok (0: not in the config)
    moe_intermediate: int = 0          # moe_intermediate_size
    routed_experts: int = 0            # n_routed_experts (DeepEP's buffers: budget/deepep.py)
    index_layers: tuple[int, ...] | None = None  # V4.1's index_source_layer_ids (None: V4, indexers by ratio)
    candidate_topk_blocks: int = 0     # V4.1's candidate filter width (0: no candidate_source_layer_id)
    expert_dtype: str = "fp4"          # routed experts' dtype; vLLM's default when absent (getattr(config, ..., "fp4"))

    @property
    def shared(self) -> bool:
        """V4.1's shared-source topology: its indexers sit on named layers, not on a ratio."""
        return self.index_layers is not None

    def ratios_of(self, layers: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(self.compress_ratios[i] for i in layers)


def model_dims(config: Mapping[str, Any], source: str) -> ModelDims | None:
    """None when the config lacks a field (a budget then lists the buffers as not modelled).

    V4.1 nests its fields under ``text_config``: read through the roofline's one flattener
    (``steptime/roles.py flat_config``), so both read the same fields.
    """
    from csa_plan.planner.steptime.roles import flat_config

    config = flat_config(config)
    keys = ("hidden_size", "hc_mult", "index_topk", "max_position_embeddings", "num_hidden_layers")
    if not all(k in config for k in keys) or not isinstance(config.get("compress_ratios"), list):
        return None
    return ModelDims(read_int(source, "hidden_size", config["hidden_size"]),
                     read_int(source, "hc_mult", config["hc_mult"]),
                     read_int(source, "index_topk", config["index_topk"]),
                     read_int(source, "max_position_embeddings", config["max_position_embeddings"]),
                     read_int(source, "qk_rope_head_dim", config.get("qk_rope_head_dim", 64)),
                     tuple(read_int(source, "compress_ratios", r) for r in config["compress_ratios"]),
                     read_int(source, "num_hidden_layers", config["num_hidden_layers"]),
                     read_int(source, "num_experts_per_tok", config.get("num_experts_per_tok", 0)),
                     read_int(source, "moe_intermediate_size", config.get("moe_intermediate_size", 0)),
                     read_int(source, "n_routed_experts", config.get("n_routed_experts", 0)),
                     _index_layers(config, source), _candidate_blocks(config, source), _expert_dtype(config, source))


def _expert_dtype(config: Mapping[str, Any], source: str) -> str:
    """The routed experts' dtype ("fp4": MXFP4, else block FP8); vLLM reads ``getattr(config, "expert_dtype",
    "fp4")`` (vllm-0.33.0 models/deepseek_v41/nvidia/model.py:1640, deepseek_v4/nvidia/model.py:261)."""
    value = config.get("expert_dtype", "fp4")
    if not isinstance(value, str) or not value:
        raise BadInput(source, "expert_dtype", f"expected a dtype name such as fp4 or fp8, got {value!r}")
    return value


def _index_layers(config: Mapping[str, Any], source: str) -> tuple[int, ...] | None:
    ids = config.get("index_source_layer_ids")
    if ids is None:
        return None
    if not isinstance(ids, list):
        raise BadInput(source, "index_source_layer_ids", "expected a list of layer ids")
    return tuple(read_int(source, f"index_source_layer_ids[{i}]", v) for i, v in enumerate(ids))


def _candidate_blocks(config: Mapping[str, Any], source: str) -> int:
    """vLLM allocates the candidate buffer only for a candidate source layer >= 0 and blocks > 0."""
    layer = config.get("candidate_source_layer_id", -1)
    if layer == -1 or layer is None:  # vLLM's getattr default (models/deepseek_v41/nvidia/model.py:769)
        return 0
    read_int(source, "candidate_source_layer_id", layer)
    return read_int(source, "candidate_topk_blocks", config.get("candidate_topk_blocks", 0))


@record
class StageContext:
    """What one pipeline stage's start-up depends on."""

    card_bytes: int
    placement: Placement
    stage: int
    layers: tuple[int, ...]   # decoder layers on this stage (MTP layers included when loaded)
    max_seq_len: int
    dims: ModelDims | None
    settings: StartupSettings

    @property
    def first(self) -> bool:
        return self.stage == 0

    @property
    def last(self) -> bool:
        return self.stage == self.placement.pp - 1
