"""Engines: engine models (what an engine release really allocates and admits) and layout profiles.

Engine models — ``vllm-0.33``, ``sglang-0.5.23``, ``onnx-genai`` — implement one interface
(``engine.EngineModel`` / ``engine.EnginePlan``) and live in ``registry.ENGINES``; callers
reach them with ``registry.get_engine(name)``. Each reproduces its engine's own memory
planning: per-request bytes at any length and phase, start-up reservations, the pool a
KV memory budget yields, and admission (docs/engines.md).

Layout profiles are per-layer byte layouts that are not engines: ``exact`` (CONTRACT §2),
``bf16-reference`` (the published-figure accounting) and ``onnx-genai-b6`` (the reference
runtime's buffer manager). They register here under their ``--layout`` name; an unknown
name is bad input, and the retired ``vllm``/``sglang`` layout names say which engine
model replaced them.
"""

from __future__ import annotations

from csa_plan.planner.layout import group_bytes, swa_ring_bytes
from csa_plan.planner.engines.base import LayoutProfile
from csa_plan.planner.engines.bf16_reference import BF16_REFERENCE
from csa_plan.planner.engines.onnx_genai import ONNX_GENAI_B6

EXACT = LayoutProfile(
    name="exact",
    summary="CONTRACT §2: only the buffers each ratio needs, 583-byte fp8 records",
    group_bytes=group_bytes,
    swa_bytes=swa_ring_bytes,
    sources=("CONTRACT §2",),
)

PROFILES: dict[str, LayoutProfile] = {p.name: p for p in (EXACT, ONNX_GENAI_B6, BF16_REFERENCE)}

__all__ = ["EXACT", "PROFILES", "LayoutProfile", "get_profile"]


def get_profile(name: str, source: str = "options", field: str = "--layout") -> LayoutProfile:
    profile = PROFILES.get(name)
    if profile is not None:  # the common case never imports the engine models (start-up)
        return profile
    from csa_plan.planner.engines.registry import lookup

    return lookup("layout", PROFILES, name, source, field)
