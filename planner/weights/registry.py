"""Tensor inventories by architecture: a new architecture is a new entry here, not a branch elsewhere."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from csa_plan.planner.errors import BadInput
from csa_plan.planner.weights import deepseek_v4, deepseek_v41
from csa_plan.planner.weights.tensors import Inventory

Builder = Callable[[Mapping[str, Any], str], Inventory]

ARCHITECTURES: dict[str, Builder] = {
    "DeepseekV4ForCausalLM": deepseek_v4.build,
    "DeepseekV41ForCausalLM": deepseek_v41.build,
}
MODEL_TYPES: dict[str, str] = {"deepseek_v4": "DeepseekV4ForCausalLM", "deepseek_v41": "DeepseekV41ForCausalLM",
                               "deepseek_v41_text": "DeepseekV41ForCausalLM"}


def architecture_of(config: Mapping[str, Any]) -> str | None:
    """The config's architecture name (``architectures[0]``, else from ``model_type``)."""
    names = config.get("architectures")
    if isinstance(names, list) and names and isinstance(names[0], str):
        return names[0]
    model_type = config.get("model_type")
    return MODEL_TYPES.get(model_type) if isinstance(model_type, str) else None


def inventory_for(config: Mapping[str, Any], source: str) -> Inventory:
    """The inventory of the config's architecture; one that has no entry is bad input."""
    name = architecture_of(config)
    builder = ARCHITECTURES.get(name) if name else None
    if builder is None:
        known = ", ".join(ARCHITECTURES)
        raise BadInput(source, "architectures", f"no tensor inventory for {name or 'an unnamed architecture'!r} "
                       f"(known: {known}); give --weights SIZE or a model directory with safetensors files")
    return builder(config, source)
