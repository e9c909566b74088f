"""A planned deployment as its engine is started: the launch command in the engine's own vocabulary.

``launch_argv`` writes what csa-plan modelled, and only that: the model, the parallel shape, the
context length and every engine setting the plan was given, each under the flag the engine
release spells it with (``FLAGS``; vLLM's MTP draft count as ``--speculative-config`` JSON, method
``mtp``). A setting the engine has no plain flag for is listed in
``Launch.unexpressed`` rather than guessed.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

# The flags of each engine family's server, as its own argument parser spells them (vLLM:
# vllm/engine/arg_utils.py EngineArgs.add_cli_args; SGLang: python/sglang/srt/server_args.py
# ServerArgs.add_cli_args), for what csa-plan plans.
FLAGS: dict[str, dict[str, str]] = {
    "vllm": {"tp": "--tensor-parallel-size", "dp": "--data-parallel-size", "max_seq_len": "--max-model-len",
             "gpu_memory_utilization": "--gpu-memory-utilization", "max_num_seqs": "--max-num-seqs",
             "max_num_batched_tokens": "--max-num-batched-tokens", "block_size": "--block-size",
             "kv_cache_dtype": "--kv-cache-dtype", "enable_prefix_caching": "--enable-prefix-caching",
             "async_scheduling": "--async-scheduling", "enforce_eager": "--enforce-eager",
             "max_cudagraph_capture_size": "--max-cudagraph-capture-size", "moe_backend": "--moe-backend",
             "all2all_backend": "--all2all-backend"},
    "sglang": {"tp": "--tp-size", "dp": "--dp-size", "max_seq_len": "--context-length",
               "mem_fraction_static": "--mem-fraction-static", "max_running_requests": "--max-running-requests",
               "chunked_prefill_size": "--chunked-prefill-size", "page_size": "--page-size",
               "kv_cache_dtype": "--kv-cache-dtype", "speculative_num_steps": "--speculative-num-steps",
               "speculative_eagle_topk": "--speculative-eagle-topk",
               "speculative_num_draft_tokens": "--speculative-num-draft-tokens",
               "moe_runner_backend": "--moe-runner-backend", "cuda_graph_max_bs": "--cuda-graph-max-bs",
               "disable_cuda_graph": "--disable-cuda-graph", "moe_a2a_backend": "--moe-a2a-backend"},
}
PROGRAM = {"vllm": ("vllm", "serve"), "sglang": ("python", "-m", "sglang.launch_server", "--model-path")}


@dataclass(frozen=True)
class Launch:
    engine: str  # the engine model's name (vllm-0.33)
    argv: tuple[str, ...]
    unexpressed: tuple[str, ...] = ()  # settings planned that no plain flag of this engine carries

    @property
    def text(self) -> str:
        return shlex.join(self.argv)

    def as_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "argv": list(self.argv), "text": self.text, "unexpressed": list(self.unexpressed)}


def family(engine: str) -> str | None:
    """``vllm`` or ``sglang`` for an engine model's name; None for one that is no server (onnx-genai)."""
    for name in FLAGS:
        if engine.startswith(name + "-"):
            return name
    return None


def model_id(ref: str) -> str:
    """What the server loads: a bundled preset's Hugging Face repository, else the reference as given."""
    from csa_plan.planner.loaders.model_files import PRESET_REPOS, preset_name

    name = preset_name(ref)
    for repo, preset in PRESET_REPOS.items():
        if preset == name:
            return repo
    return ref


def _draft_method(ref: str) -> str:
    """``dspark`` for a bundled V4 checkpoint that carries a DSpark drafter after its main layers (Flash-0731,
    Pro-0813: csa-plan plans its draft layers, which vLLM builds only under that method,
    models/deepseek_v4/nvidia/dspark.py:105; ``mtp`` builds num_nextn_predict_layers, mtp.py:175), else ``mtp``."""
    import json

    from csa_plan.planner.dspark import dspark_draft_layers
    from csa_plan.planner.loaders.model_files import PRESETS, preset_name
    from csa_plan.planner.presets import read_preset

    name = preset_name(ref)
    if name is None:
        return "mtp"
    return "dspark" if dspark_draft_layers(json.loads(read_preset(PRESETS[name])), name) is not None else "mtp"


def launch_argv(engine: str, model: str, tp: int, dp: int = 1, max_seq_len: int | None = None,
                settings: Any = None) -> Launch | None:
    """The command that starts ``engine`` as planned; None for an engine that is no server."""
    fam = family(engine)
    if fam is None:
        return None
    flags = FLAGS[fam]
    argv = [*PROGRAM[fam], model_id(model), flags["tp"], str(tp)]
    if dp > 1:
        argv += [flags["dp"], str(dp)]
    if max_seq_len is not None:
        argv += [flags["max_seq_len"], str(max_seq_len)]
    unexpressed = []
    for name in () if settings is None else settings.given():
        value = getattr(settings, name)
        if name in ("gpu", "gpu_memory_bytes"):
            continue  # the card: what the GPUs are, not a flag
        flag = flags.get(name)
        if fam == "vllm" and name == "num_speculative_tokens":  # vLLM takes the draft as one JSON option
            if value:
                import json

                argv += ["--speculative-config", json.dumps({"method": _draft_method(model),
                                                             "num_speculative_tokens": value})]
            continue
        if flag is None:
            unexpressed.append(name)
        elif isinstance(value, bool):
            if value:
                argv.append(flag)
            elif fam == "vllm":  # vLLM's boolean flags take --no-X; SGLang's store_true flags are off unless given
                argv.append("--no-" + flag[2:])
        else:
            argv += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return Launch(engine, tuple(argv), tuple(unexpressed))
