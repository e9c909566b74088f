"""Layout profiles: per-layer byte layouts that are not engine models, under their ``--layout`` name.

``exact`` (CONTRACT §2), ``bf16-reference`` (the published-figure accounting,
``profile_bf16_reference``) and ``onnx-genai-b6`` (the reference runtime's buffer manager,
``profile_onnx_genai``). An unknown name is bad input, and the retired ``vllm``/``sglang``
layout names say which engine model replaced them. They sit beside ``layout.py`` at the floor
of the model core: ``plan.py`` sizes every layer through one of them, and nothing here
imports an engine (the engine registry reuses ``lookup``).
"""

from __future__ import annotations

from typing import Mapping, TypeVar

from csa_plan.planner.errors import BadInput
from csa_plan.planner.layout import group_bytes, swa_ring_bytes
from csa_plan.planner.profile import LayoutProfile
from csa_plan.planner.profile_bf16_reference import BF16_REFERENCE
from csa_plan.planner.profile_onnx_genai import ONNX_GENAI_B6
from csa_plan.planner.suggest import unknown_problem

T = TypeVar("T")

EXACT = LayoutProfile(
    name="exact",
    summary="CONTRACT §2: only the buffers each ratio needs, 583-byte fp8 records",
    group_bytes=group_bytes,
    swa_bytes=swa_ring_bytes,
    sources=("CONTRACT §2",),
)

PROFILES: dict[str, LayoutProfile] = {p.name: p for p in (EXACT, ONNX_GENAI_B6, BF16_REFERENCE)}

__all__ = ["EXACT", "PROFILES", "LayoutProfile", "get_profile", "lookup"]


def get_profile(name: str, source: str = "options", field: str = "--layout") -> LayoutProfile:
    return lookup("layout", PROFILES, name, source, field)


# The per-layer layout profiles these names used to select under-counted what the engines hold.
RETIRED_LAYOUTS: dict[str, str] = {
    "vllm": "vllm-0.33", "vllm-fp4": "vllm-0.33 (with --indexer-kv-dtype mxfp4)",
    "sglang": "sglang-0.5.23", "sglang-fp4": "sglang-0.5.23 (with --indexer-kv-dtype fp4)",
}


def retired_message(name: str) -> str | None:
    new = RETIRED_LAYOUTS.get(name)
    if new is None:
        return None
    return (f"the per-layer layout {name!r} was replaced by the engine model {new.split()[0]!r}: "
            f"use --engine {new}")


def lookup(kind: str, registry: Mapping[str, T], name: str, source: str, field: str) -> T:
    """``registry[name]``, else bad input: the replacement of a retired layout, or the closest name."""
    try:
        return registry[name]
    except KeyError:
        retired = retired_message(name)
        if retired:
            raise BadInput(source, field, retired) from None
        raise BadInput(source, field, unknown_problem(kind, name, registry, versioned=True)) from None
