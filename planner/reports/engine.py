"""The engine part of ``check --engine``: what the engine model says, as a plain dict.

Carried under the ``engine`` key of the ``csa-plan/check/v1`` document (keys only added):
the engine and version, every resolved setting with its source, the engine's own
structures (vLLM: specs and KV cache groups; SGLang: pools), what the engine budgets a
request at start-up beside what a decoding and a prefilling request of max_seq_len hold,
the pool a ``--kv-memory`` budget yields (with the engine's own log line), the
tensor-parallel rules, and the refusal when the engine would refuse.
"""

from __future__ import annotations

from typing import Any

from csa_plan.planner.engines.engine import EngineModel, EnginePlan, EngineRefusal, Phase, PoolSizing


def engine_report(engine: EngineModel, plan: EnginePlan | None, sizing: PoolSizing | None,
                  refusal: EngineRefusal | None, kv_memory_bytes: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": engine.name,
        "engine": engine.engine_name,
        "version": engine.version,
        "summary": engine.summary,
        "sources": list(engine.sources),
        "kv_memory_bytes": kv_memory_bytes,
        "refusal": refusal.as_dict() if refusal else None,
        "settings": None, "max_seq_len": None, "structures": None, "startup_budget": None,
        "decode": None, "prefill": None, "pool": None, "tp": None,
    }
    if plan is None:
        return out
    length = plan.max_seq_len
    out.update({
        "settings": [s.as_dict() for s in plan.settings],
        "max_seq_len": length,
        "unit_bytes": plan.unit_bytes,
        "structures": plan.describe(),
        "startup_budget": plan.startup_budget().as_dict(),
        "decode": plan.footprint(length, Phase.DECODE).as_dict(),
        "prefill": plan.footprint(length, Phase.PREFILL).as_dict(),
        "pool": sizing.as_dict() if sizing else None,
        "tp": [r.as_dict() for r in plan.tp_rules()],
    })
    return out
