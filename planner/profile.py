"""The layout-profile record and the integer helpers every profile shares.

A profile answers one question: how many bytes would *this engine* hold on one
device for one admitted CSA/HCA group (``group_bytes``) or one sliding-window-only
layer (``swa_bytes``)? Engine pools are mapped onto the six state classes of
CONTRACT §2 (see docs/compare.md, "Layout profiles", for each engine's mapping). ``*_padding_bytes``
says how much of that total is padding: the profile's bytes minus the same
content (the same records/rows in the engine's own widths) packed without
block rounding or page alignment.
"""

from __future__ import annotations

from typing import Callable

from csa_plan.planner.descriptor import Descriptor
from csa_plan.planner.layout import GroupBytes
from csa_plan.planner.record import record


def no_group_padding(d: Descriptor, query_len: int) -> int:
    return 0


def no_swa_padding(d: Descriptor) -> int:
    return 0


@record
class LayoutProfile:
    """A per-layer byte layout that is not an engine (``--layout``): how it sizes each group."""

    name: str
    summary: str
    group_bytes: Callable[[Descriptor, int], GroupBytes]  # (admitted CSA/HCA descriptor, query_len)
    swa_bytes: Callable[[Descriptor], GroupBytes]
    group_padding_bytes: Callable[[Descriptor, int], int] = no_group_padding
    swa_padding_bytes: Callable[[Descriptor], int] = no_swa_padding
    sources: tuple[str, ...] = ()  # where each rule comes from (rendered in docs and --json)
