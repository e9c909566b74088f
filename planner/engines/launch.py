"""A planned deployment as its engine is started: the launch command in the engine's own vocabulary.

``launch_argv`` writes what csa-plan modelled, and only that: the model, the parallel shape, the
context length and every engine setting the plan was given, each under the flag the engine
release spells it with (``FLAGS``; vLLM's MTP draft count as ``--speculative-config`` JSON, method
``mtp``; SGLang's draft steps with ``--speculative-algorithm NEXTN``). The shape is written as each
engine reads it (``planner/engines/flags.py``): vLLM ``--tensor-parallel-size tp --data-parallel-size dp``
and ``--enable-expert-parallel`` when expert parallelism spans tp x dp; SGLang ``--tp-size`` is every GPU
of the server, so csa-plan's tp x dp DP-attention shape is ``--tp-size tp*dp --dp-size dp
--enable-dp-attention`` and EP is ``--ep-size``. ``replicas`` independent servers behind a router are the
same command ``replicas`` times. A setting the engine reads from its environment is in ``Launch.env``; one
no flag of the release carries is listed in ``Launch.unexpressed`` rather than guessed. Every argv is
checked against each release's own argument parser (``tests/engines/test_launch_flags.py``, the flag
tables ``tools/extract_engine_flags.py`` extracts).
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
             "cudagraph_capture_sizes": "--cudagraph-capture-sizes", "compilation_config": "--compilation-config",
             "all2all_backend": "--all2all-backend"},
    "sglang": {"tp": "--tp-size", "dp": "--dp-size", "max_seq_len": "--context-length",
               "mem_fraction_static": "--mem-fraction-static", "max_running_requests": "--max-running-requests",
               "chunked_prefill_size": "--chunked-prefill-size", "page_size": "--page-size",
               "kv_cache_dtype": "--kv-cache-dtype", "speculative_num_steps": "--speculative-num-steps",
               "speculative_eagle_topk": "--speculative-eagle-topk",
               "speculative_num_draft_tokens": "--speculative-num-draft-tokens",
               "moe_runner_backend": "--moe-runner-backend",
               # 0.5.23 spells the decode capture size per phase (arg_groups/fields/exec_.py:629); no --cuda-graph-max-bs
               "cuda_graph_max_bs": "--cuda-graph-max-bs-decode",
               "enable_encoder_swa_bounded_replay": "--enable-encoder-swa-bounded-replay",
               "disable_cuda_graph": "--disable-cuda-graph", "moe_a2a_backend": "--moe-a2a-backend",
               "load_balance_method": "--load-balance-method"},
}
# Boolean settings whose False is a flag of its own (vLLM's BooleanOptionalAction ``--no-X``), by release: vLLM
# 0.33 and 0.34 register --enable-prefix-caching as a plain switch (no --no- form; tests/fixtures/engine_flags.json).
NEGATABLE: dict[str, tuple[str, ...]] = {
    "vllm-0.25": ("async_scheduling", "enforce_eager", "enable_prefix_caching"),
    "vllm-0.26": ("async_scheduling", "enforce_eager", "enable_prefix_caching"),
    "vllm-0.27": ("async_scheduling", "enforce_eager", "enable_prefix_caching"),
    "vllm-0.28": ("async_scheduling", "enforce_eager", "enable_prefix_caching"),
    "vllm-0.33": ("async_scheduling", "enforce_eager"),
    "vllm-0.34": ("async_scheduling", "enforce_eager"),
}
# Settings an engine reads from its environment, not its command line: (variable, value when True).
ENV: dict[str, dict[str, str]] = {
    "vllm": {"estimate_cudagraphs": "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"},
    "sglang": {"shared_expert_tp1": "SGLANG_SHARED_EXPERT_TP1"},
}
PROGRAM = {"vllm": ("vllm", "serve"), "sglang": ("python", "-m", "sglang.launch_server", "--model-path")}


@dataclass(frozen=True)
class Launch:
    engine: str  # the engine model's name (vllm-0.33)
    argv: tuple[str, ...]
    unexpressed: tuple[str, ...] = ()  # settings planned that no plain flag of this engine carries
    env: tuple[tuple[str, str], ...] = ()  # settings the engine reads from its environment
    replicas: int = 1  # independent servers behind a router, each started by this command

    @property
    def text(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env)
        text = (env + " " if env else "") + shlex.join(self.argv)
        return text if self.replicas == 1 else f"{text}  # x{self.replicas} servers behind a router"

    def as_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "argv": list(self.argv), "env": dict(self.env), "replicas": self.replicas,
                "text": self.text, "unexpressed": list(self.unexpressed)}


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
                settings: Any = None, ep: int | None = None, replicas: int = 1) -> Launch | None:
    """The command that starts ``engine`` as planned (``ep``: expert-parallel ranks, None or 1 for none;
    ``replicas``: independent servers of this shape behind a router); None for an engine that is no server."""
    fam = family(engine)
    if fam is None:
        return None
    flags = FLAGS[fam]
    argv = [*PROGRAM[fam], model_id(model)]
    if fam == "sglang":  # --tp-size is every GPU; csa-plan's dp is DP attention within them (flags.py)
        argv += [flags["tp"], str(tp * dp)]
        if dp > 1:
            argv += [flags["dp"], str(dp), "--enable-dp-attention"]
        if ep is not None and ep > 1:
            argv += ["--ep-size", str(ep)]
    else:
        argv += [flags["tp"], str(tp)]
        if dp > 1:
            argv += [flags["dp"], str(dp)]
        if ep is not None and ep > 1:  # vLLM: EP is on (over tp x dp) or off (weights/rules.py _vllm_groups)
            argv.append("--enable-expert-parallel")
    if max_seq_len is not None:
        argv += [flags["max_seq_len"], str(max_seq_len)]
    unexpressed, env = [], []
    for name in () if settings is None else settings.given():
        value = getattr(settings, name)
        if name in ("gpu", "gpu_memory_bytes"):
            continue  # the card: what the GPUs are, not a flag
        if name in ENV[fam]:
            env.append((ENV[fam][name], "1" if value else "0"))
            continue
        flag = flags.get(name)
        if fam == "vllm" and name == "num_speculative_tokens":  # vLLM takes the draft as one JSON option
            if value:
                import json

                argv += ["--speculative-config", json.dumps({"method": _draft_method(model),
                                                             "num_speculative_tokens": value})]
            continue
        if fam == "sglang" and name == "speculative_num_steps" and value:
            argv += ["--speculative-algorithm", "NEXTN"]  # DeepSeek's MTP head (SGLang resolves it to EAGLE)
        if flag is None:
            unexpressed.append(name)
        elif isinstance(value, bool):
            if value:
                argv.append(flag)
            elif name in NEGATABLE.get(engine, ()):  # vLLM's BooleanOptionalAction: --no-X
                argv.append("--no-" + flag[2:])
            # otherwise off is the flag left out (a store_true switch, off by default)
        elif isinstance(value, tuple):
            argv += [flag, *(str(v) for v in value)]
        else:
            argv += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return Launch(engine, tuple(argv), tuple(unexpressed), tuple(env), replicas)


# The role flags of a disaggregated deployment, as each release's parser spells them. vLLM 0.33: one JSON option,
# ``--kv-transfer-config`` (engine/arg_utils.py:1881) read into KVTransferConfig (config/kv_transfer.py:60-73:
# ``kv_connector``, ``kv_role`` one of kv_producer / kv_consumer / kv_both); the NIXL connector is registered as
# "NixlConnector" (distributed/kv_transfer/kv_connector/factory.py:178) and asks for kv_producer on prefill
# instances and kv_consumer on decode ones (kv_both is deprecated there: nixl/connector.py:97-103).
# SGLang 0.5.23: ``--disaggregation-mode prefill|decode`` and ``--disaggregation-transfer-backend`` (its default,
# mooncake, written out: srt/arg_groups/fields/disagg.py:55-71).
VLLM_KV_ROLE = {"prefill": "kv_producer", "decode": "kv_consumer"}
SGLANG_TRANSFER_BACKEND = "mooncake"


def disaggregated_launch(engine: str, model: str, roles: Any, max_seq_len: int | None = None,
                         settings: Any = None) -> dict[str, Launch] | None:
    """Each role's command (``roles``: ``serving.disaggregation.Disaggregation``): the aggregated command of one
    worker of that role's shape (``launch_argv`` with its tp, dp and ep: vLLM ``--data-parallel-size`` and
    ``--enable-expert-parallel``, SGLang ``--tp-size tp*dp --dp-size dp --enable-dp-attention --ep-size``),
    started ``workers`` times, with the role's connector flags. A
    router that sends each request to a prefill and then a decode worker sits in front (vLLM's NIXL proxy, Dynamo
    or llm-d; SGLang's ``sglang_router --pd-disaggregation``): it is no engine flag and is not written."""
    import json

    fam = family(engine)
    if fam is None:
        return None
    out = {}
    for name in ("prefill", "decode"):
        role = getattr(roles, name)
        base = launch_argv(engine, model, role.tp, role.dp, max_seq_len, settings, ep=role.ep, replicas=role.workers)
        if fam == "vllm":
            extra = ("--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector",
                                                         "kv_role": VLLM_KV_ROLE[name]}, separators=(",", ":")))
        else:
            extra = ("--disaggregation-mode", name, "--disaggregation-transfer-backend", SGLANG_TRANSFER_BACKEND)
        out[name] = Launch(base.engine, base.argv + extra, base.unexpressed, base.env, role.workers)
    return out
