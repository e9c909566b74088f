"""What the step-time roofline reads from a card: HBM bandwidth, dense tensor throughput, the
scale-up link. The figures live in the one card table (``planner/cards.py``, ``Card.perf``), each
row with its datasheet source; a card without them has no physics step time (the caller says so
and offers ``--step-time fixed``).

Figures are the datasheets' dense (not 2:4 sparse) peaks and the per-direction NVLink
bandwidth (half the bidirectional figure NVIDIA quotes). The fitted coefficients of
``physics.py`` absorb how far real kernels stay from them.
"""

from __future__ import annotations

from csa_plan.planner.cards import CARDS, CardPerf

__all__ = ("CardPerf", "PERF", "card_perf")

PERF: dict[str, CardPerf] = {name: c.perf for name, c in CARDS.items() if c.perf is not None}


def card_perf(name: str) -> CardPerf | None:
    return PERF.get(name)
