"""``check --engine E --kv-offloading-size GiB`` (vLLM) or ``--enable-hierarchical-cache [--hicache-size GB |
--hicache-ratio R]`` (SGLang): the host KV tier's capacity in tokens of reusable prefix, from the engine's own
sizing rule and the same plan and pool ``check --engine`` answers with (``engines/host_tier.py``)."""

from __future__ import annotations

from typing import Any

from csa_plan.planner.errors import BadInput


def host_tier_answer(request: Any, report: dict[str, Any], flags: Any) -> dict[str, Any] | None:
    """``report['host_tier']`` for the check ``request`` answered with ``report``; None without flags."""
    from csa_plan.planner.budget.deployment import Deployment, card_settings, engine_settings_for
    from csa_plan.planner.cards import card
    from csa_plan.planner.engines.host_tier import resolve_tier
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings, target_of
    from csa_plan.planner.loaders.model_files import load_model

    if flags is None or not flags.given:
        return None
    if request.engine is None:
        raise BadInput("options", "--kv-offloading-size" if flags.kv_offloading_size_gib is not None
                       else "--enable-hierarchical-cache", "sizes an engine's host KV tier: add --engine vllm-0.33 "
                       "(--kv-offloading-size) or --engine sglang-0.5.23 (--enable-hierarchical-cache)")
    field = flags.check_for(request.engine, None)
    budget = report.get("budget") or {}
    kv = request.kv_memory_bytes if request.kv_memory_bytes is not None else budget.get("kv_memory_bytes")
    if kv is None:
        raise BadInput("options", field, "the host tier's capacity needs the engine's pool: --device-memory (or "
                                         "--gpu) or --kv-memory")
    spec = load_model(request.model, max_seq_len=request.options.max_seq_len)
    es = card_settings(request.engine_settings or EngineSettings(), request.device_memory_bytes, request.engine)
    d = request.deployment or Deployment()
    es = engine_settings_for(request.engine, es, d)
    length = request.options.max_seq_len or max(x.max_seq_len for x in spec.layers)
    plan = get_engine(request.engine).configure(spec, es, length)
    tier = resolve_tier(plan, plan.size_pool(int(kv)), request.options.tp, card(target_of(es)[0].name),
                        offloading_gib=flags.kv_offloading_size_gib, hicache_gb=flags.hicache_size_gb,
                        hicache_ratio=flags.hicache_ratio, field=field)
    return tier.as_dict()
