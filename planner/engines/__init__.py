"""Layout profiles: how a given engine would lay out the same state groups.

``exact`` is CONTRACT §2. Other profiles register here under their ``--layout`` name;
an unknown name is bad input, not a silent fallback to ``exact``. Each engine lives
in its own module with the source of every constant cited beside it.
"""

from __future__ import annotations

from csa_plan.planner.errors import BadInput
from csa_plan.planner.layout import group_bytes, swa_ring_bytes
from csa_plan.planner.engines.base import LayoutProfile
from csa_plan.planner.engines.bf16_reference import BF16_REFERENCE
from csa_plan.planner.engines.onnx_genai import ONNX_GENAI_B6
from csa_plan.planner.engines.sglang import SGLANG, SGLANG_FP4
from csa_plan.planner.engines.vllm import VLLM, VLLM_FP4

EXACT = LayoutProfile(
    name="exact",
    summary="CONTRACT §2: only the buffers each ratio needs, 583-byte fp8 records",
    group_bytes=group_bytes,
    swa_bytes=swa_ring_bytes,
    sources=("CONTRACT §2",),
)

PROFILES: dict[str, LayoutProfile] = {
    p.name: p for p in (EXACT, ONNX_GENAI_B6, VLLM, VLLM_FP4, SGLANG, SGLANG_FP4, BF16_REFERENCE)
}

__all__ = ["EXACT", "PROFILES", "LayoutProfile", "get_profile"]


def get_profile(name: str, source: str = "options", field: str = "--layout") -> LayoutProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise BadInput(source, field, f"unknown layout {name!r} (known: {', '.join(PROFILES)})") from None
