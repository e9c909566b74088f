"""The engine registry: every engine model under its name, and the names that went away.

``get_engine("vllm-0.33")`` is the only way callers reach an engine model; an unknown
name is bad input listing the known ones, and the retired per-layer ``--layout vllm`` /
``sglang`` names say what replaced them.
"""

from __future__ import annotations

from typing import Mapping, TypeVar

from csa_plan.planner.engines.engine import EngineModel
from csa_plan.planner.engines.onnx_genai_engine import ONNX_GENAI
from csa_plan.planner.engines.sglang_0_5_23 import SGLANG_0523
from csa_plan.planner.engines.vllm_0_33 import VLLM_025, VLLM_026, VLLM_033
from csa_plan.planner.errors import BadInput

T = TypeVar("T")

ENGINES: dict[str, EngineModel] = {e.name: e for e in (VLLM_033, VLLM_026, VLLM_025, SGLANG_0523, ONNX_GENAI)}

# An engine named without a release: its newest modelled release (every output names the one used).
NEWEST: dict[str, str] = {"vllm": VLLM_033.name, "sglang": SGLANG_0523.name}

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
        from csa_plan.planner.suggest import unknown_problem

        raise BadInput(source, field, unknown_problem(kind, name, registry)) from None


def resolve_engine_name(name: str) -> tuple[str, str | None]:
    """``(registry name, note)``: a bare engine name is its newest modelled release, and the note says so."""
    key = name.strip().lower() if isinstance(name, str) else name
    if key in NEWEST:
        return NEWEST[key], f"--engine {key} names the newest modelled release, {NEWEST[key]}"
    return name, None


def get_engine(name: str, source: str = "options", field: str = "--engine") -> EngineModel:
    return lookup("engine", ENGINES, resolve_engine_name(name)[0], source, field)
