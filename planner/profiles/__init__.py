"""Layout profiles: how a given engine would lay out the same state groups.

``exact`` is CONTRACT §2. Other profiles register here under their ``--layout`` name;
an unknown name is bad input, not a silent fallback to ``exact``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..descriptor import Descriptor
from ..errors import BadInput
from ..layout import GroupBytes, group_bytes, swa_ring_bytes


@dataclass(frozen=True)
class LayoutProfile:
    name: str
    summary: str
    group_bytes: Callable[[Descriptor, int], GroupBytes]  # (admitted CSA/HCA descriptor, query_len)
    swa_bytes: Callable[[Descriptor], GroupBytes]


EXACT = LayoutProfile(
    name="exact",
    summary="CONTRACT §2: only the buffers each ratio needs, 583-byte fp8 records",
    group_bytes=group_bytes,
    swa_bytes=swa_ring_bytes,
)

PROFILES: dict[str, LayoutProfile] = {EXACT.name: EXACT}


def get_profile(name: str, source: str = "options", field: str = "--layout") -> LayoutProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise BadInput(source, field, f"unknown layout {name!r} (known: {', '.join(PROFILES)})") from None
