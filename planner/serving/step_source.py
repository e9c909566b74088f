"""Which step time a replay runs under (``--step-time physics|measured|fixed``): the one place a
``StepTime`` is built for a deployment, so simulate, --find-capacity and sweep time a step alike.
"""

from __future__ import annotations

from typing import Any

from csa_plan.planner.errors import BadInput
from csa_plan.planner.steptime.model import StepSource, StepTime

FIXED_PROVENANCE = "the two constants (--tpot-ms, --prefill-tok-s), the same on every GPU"


def engine_family(plan: Any) -> str:
    """vllm | sglang: whose kernels' data a step-time source reads for this engine release."""
    name = plan.engine.engine_name.lower()
    return "sglang" if name.startswith("sglang") else "vllm"


def model_inputs(spec: Any) -> tuple[dict[str, Any], Any]:
    """The checkpoint config and the weight inventory of ``spec`` (bad input when it has none)."""
    from csa_plan.planner.weights.config import read_model_config
    from csa_plan.planner.weights.measured import model_weights

    for ref in (spec.source, spec.name):
        config = read_model_config(ref) if isinstance(ref, str) else None
        if config is not None and config.data:
            weights = model_weights(ref, required=False)
            if weights is not None and weights.inventory is not None:
                return dict(config.data), weights.inventory
    raise BadInput("options", "--step-time", f"{spec.name}: a physics or measured step time needs the model's "
                                             "checkpoint config (a preset, config.json or model directory); "
                                             "give --step-time fixed for a YAML or ONNX model")


def engine_formats(plan: Any) -> Any:
    """The record widths the engine release really stores for V4.1, as ``roles.ReadFormats``: SGLang
    0.5.23's pools (``engines/sglang/v41.py``), vLLM 0.33's KV specs (``v41_layer_specs``: a source's
    ``self_attn`` records, its ``indexer.k_cache`` keys, a main layer's ``swa_cache`` rows); None where the
    plan has no V4.1 pool (the descriptors' formats then stand, and the provenance says so)."""
    from csa_plan.planner.steptime.roles import ReadFormats

    specs = getattr(plan, "specs", None) if getattr(plan, "shared", False) else None
    if specs:
        def width(suffix: str, draft: bool = False) -> int | None:
            return next((sp.state_content_bytes for sp in specs if sp.name.endswith(suffix) and sp.is_draft == draft),
                        None)

        rec, key, win = width(".self_attn"), width(".indexer.k_cache"), width(".swa_cache")
        if None not in (rec, key, win):
            return ReadFormats(rec, win, key, f"{plan.engine.name}'s KV specs ({rec} B records, {win} B windows, "
                                              f"{key} B keys)")
    v = getattr(plan, "v41", None)
    if v is None:
        return None
    from csa_plan.planner.engines.sglang.v41 import LOW_RATIO_INDEX_BYTES

    return ReadFormats(v.compressed.bytes_per_token, v.window.bytes_per_token, LOW_RATIO_INDEX_BYTES,
                       f"{plan.engine.name}'s layouts ({v.compressed.name} records, {v.window.name} windows, "
                       f"{LOW_RATIO_INDEX_BYTES} B FP4 keys; backend {v.backend})")


def step_time_for(spec: Any, config: Any, plan: Any) -> StepTime:
    """The step time of ``config.time.step_time`` for ``plan`` on ``config``'s deployment."""
    t = config.time
    source = StepSource(t.step_time)
    if source is StepSource.FIXED:
        return StepTime(t.tpot_ms, t.prefill_tok_s, source=StepSource.FIXED, provenance=FIXED_PROVENANCE,
                        band="none stated: the constants are the user's")
    from csa_plan.planner.engines.settings import target_of

    settings = config.engine.settings
    if settings.gpu is None and settings.gpu_memory_bytes is not None:
        raise BadInput("options", "--device-memory", f"a raw size ({int(settings.gpu_memory_bytes):,} bytes) names no "
                                                     f"card, and --step-time {source.value} reads the card's "
                                                     "bandwidth and FLOPS: give --gpu NAME (or --device-memory NAME)")
    gpu, _ = target_of(settings)
    tp = config.placement.tp
    data, inventory = model_inputs(spec)
    if source is StepSource.MEASURED:
        from csa_plan.planner.steptime.measured import measured_step_time

        return measured_step_time(spec, data, gpu.name, tp, config.placement, engine_family(plan),
                                  plan.engine.label())
    from csa_plan.planner.steptime.physics import physics_step_time

    from csa_plan.planner.weights.rules import rules_for

    rules = rules_for(plan.engine.name, settings.moe_runner_backend, gpu.capability, settings.shared_expert_tp1)
    from csa_plan.planner.steptime.roles import engram_read, flat_config

    from csa_plan.planner.cards import HOSTS

    draft, note = replay_drafts(plan, data)
    p = config.placement  # simulate takes no Engram option: the release's default placement is what runs
    engram = engram_read(flat_config(data), plan.engine.name, p.tp, p.dp, HOSTS.get(gpu.name))
    return physics_step_time(spec, data, inventory, gpu.name, config.placement, engine_family(plan),
                             plan.engine.label(), rules, draft, note, moe_backend_of(plan, settings, gpu),
                             formats=engine_formats(plan), engram=engram)


def moe_backend_of(plan: Any, settings: Any, gpu: Any) -> tuple[str | None, str]:
    """(the backend term's key or None, the backend as the engine spells it): SGLang's resolved
    ``--moe-runner-backend`` (its start-up's own resolution, auto -> flashinfer_mxfp4 for FP4 experts)
    or its ``--moe-a2a-backend`` where one dispatches; vLLM's ``--moe-backend``."""
    from csa_plan.planner.steptime.physics import moe_backend_key

    if engine_family(plan) == "sglang":
        from csa_plan.planner.engines.sglang.startup import moe_runner

        a2a = settings.moe_a2a_backend
        runner = str(moe_runner(settings.moe_runner_backend, gpu).value)
        spelled = f"--moe-a2a-backend {a2a}" if a2a not in (None, "none") else f"--moe-runner-backend {runner}"
        return moe_backend_key("sglang", runner, a2a), spelled
    name = settings.moe_backend or "auto"
    return moe_backend_key("vllm", name), f"--moe-backend {name}"


def replay_drafts(plan: Any, config: Any = None) -> tuple[Any, str]:
    """The speculative method the replay runs, as the clock costs it (``steptime/drafts.py``), and what the
    provenance says: vLLM's replay drafts ``--num-speculative-tokens`` tokens a step, as DSpark where the
    checkpoint carries a DSpark drafter (its config names ``dspark_target_layer_ids``: Flash-0731,
    Pro-0813, V4.1), else as MTP; SGLang's replay drafts ``--speculative-num-steps`` EAGLE tokens a step
    (``speculative_num_draft_tokens`` - 1, top-k 1: the one algorithm its settings resolve)."""
    from csa_plan.planner.dspark import DSPARK_MARKER
    from csa_plan.planner.steptime.drafts import DraftMethod, draft_plan

    resolved = getattr(plan, "resolved", None)
    if engine_family(plan) == "vllm":
        method = DraftMethod.DSPARK if config is not None and DSPARK_MARKER in config else DraftMethod.MTP
        return draft_plan(method, int(getattr(resolved, "num_speculative_tokens", 0) or 0)), ""
    tokens = int(getattr(resolved, "draft_tokens", 0) or 0)  # speculative_num_draft_tokens = steps + 1
    return draft_plan(DraftMethod.EAGLE, max(0, tokens - 1)), ""
