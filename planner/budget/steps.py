"""One step of a device budget: what it takes (or leaves), and where that figure came from."""

from __future__ import annotations

from enum import Enum
from typing import Any

from csa_plan.planner.record import record


class StepKind(str, Enum):
    CARD = "card"              # the card's memory
    USABLE = "usable"          # the engine's share of it
    WEIGHTS = "weights"        # this device's weights
    RESERVE = "reserve"        # engine buffers, workspaces, activations, CUDA graphs
    KV = "kv"                  # what is left for the state pool


@record
class Step:
    """``bytes`` is the level after the step for CARD / USABLE / KV, the amount taken for the others.

    ``estimate`` marks a figure csa-plan estimates rather than reads from an engine rule
    or a measurement; ``source`` says which (an option, a file:line, the inventory).
    """

    kind: StepKind
    label: str
    bytes: int
    source: str
    estimate: bool = False
    band_pct: int | None = None  # an estimate's error band, +- percent of ``bytes`` (None: an exact rule)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "label": self.label, "bytes": self.bytes, "source": self.source,
                "estimate": self.estimate, "band_pct": self.band_pct}


@record
class Usable:
    """The engine's usable share of a card: the bytes, the fraction as the engine states it, and why."""

    bytes: int
    fraction: str
    source: str
    estimate: bool = False
