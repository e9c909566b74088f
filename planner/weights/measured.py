"""Which weight figure a budget uses: a checkpoint's own (measured), else the config's inventory.

The measured figure wins; the result says which source it came from and how far the
inventory was from it, so a user sees whether the config-only answer can be trusted.
"""

from __future__ import annotations

from enum import Enum
import json
from functools import lru_cache
from typing import TYPE_CHECKING

from csa_plan.planner.record import record
from csa_plan.planner.weights.config import read_model_config
from csa_plan.planner.weights.registry import ARCHITECTURES, architecture_of, inventory_for
from csa_plan.planner.weights.tensors import Inventory

if TYPE_CHECKING:  # the safetensors reader loads only for a model directory (start-up: docs/architecture.md)
    from csa_plan.planner.weights.safetensors import Checkpoint


class WeightsSource(str, Enum):
    INVENTORY = "inventory"
    HEADERS = "safetensors headers"
    INDEX = "model.safetensors.index.json"


@record
class ModelWeights:
    """The model's total tensor bytes (every device together, before sharding)."""

    source: WeightsSource
    total_bytes: int
    tensor_count: int
    element_count: int | None
    inventory: Inventory | None
    checkpoint: Checkpoint | None

    @property
    def inventory_delta_bytes(self) -> int | None:
        """Inventory minus measured (0 = exact); None when one of them is missing."""
        if self.inventory is None or self.checkpoint is None:
            return None
        return self.inventory.nbytes - self.checkpoint.data_bytes

    @property
    def note(self) -> str:
        where = self.checkpoint.directory if self.checkpoint else (self.inventory.source if self.inventory else "")
        delta = self.inventory_delta_bytes
        if self.source is WeightsSource.INVENTORY:
            return f"from the config's tensor inventory ({self.inventory.source if self.inventory else ''})"
        if delta is None:
            return f"measured from {self.source.value} in {where} (no inventory for this architecture)"
        if delta == 0:
            return f"measured from {self.source.value} in {where}; the inventory agrees exactly"
        return f"measured from {self.source.value} in {where}; the inventory is {delta:+,} B off"


def model_weights(ref: str, *, required: bool = True) -> ModelWeights | None:
    """Weights of a preset, config or model directory: the checkpoint's when one is there, else the
    inventory's. None for a YAML spec or ONNX graph; an unknown architecture with no checkpoint is bad
    input when ``required`` (the budget has nothing to subtract), else None."""
    config = read_model_config(ref)
    if config is None:
        return None
    checkpoint = None
    if config.directory is not None:
        from csa_plan.planner.weights.safetensors import read_checkpoint

        checkpoint = read_checkpoint(config.directory)
    inventory = None
    if config.data and architecture_of(config.data) in ARCHITECTURES:
        inventory = _cached(config.data_key, config.source)
    if checkpoint is not None:
        from csa_plan.planner.weights.safetensors import CheckpointSource

        source = WeightsSource.HEADERS if checkpoint.source is CheckpointSource.HEADERS else WeightsSource.INDEX
        return ModelWeights(source, checkpoint.data_bytes, checkpoint.tensor_count, checkpoint.element_count,
                            inventory, checkpoint)
    if inventory is not None:
        return ModelWeights(WeightsSource.INVENTORY, inventory.nbytes, inventory.tensor_count,
                            inventory.element_count, inventory, None)
    if required and config.data:
        inventory_for(config.data, config.source)  # raises BadInput naming the unknown architecture
    return None


@lru_cache(maxsize=8)
def _cached(key: str, source: str) -> Inventory:
    """Inventories are pure functions of the config text: build each once per process."""
    return inventory_for(json.loads(key), source)
