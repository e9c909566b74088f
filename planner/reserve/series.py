"""Residency over time, bucketed for a plot or a sparkline (rendering aid, not accounting).

Each bucket holds the highest residency reached in it (or carried into it), so a
short spike is never smoothed away when a long run is drawn in a few pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from csa_plan.planner.reserve.fast import observe
from csa_plan.planner.reserve.decisions import Decisions
from csa_plan.planner.reserve.scenario import Scenario

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True, eq=False)
class Series:
    edges_ns: "np.ndarray"  # bucket starts, len = buckets
    groups: tuple[tuple[tuple[int, ...], "np.ndarray"], ...]  # (devices, max resident bytes per bucket)
    in_flight: "np.ndarray"  # max requests in flight per bucket
    limit_bytes: int


def residency_series(scn: Scenario, d: Decisions, buckets: int = 80) -> Series:
    """Per (replica, stage) group and for the requests in flight: the highest level in each bucket
    or carried into it, from the same events and the same passes as the observables (taken
    from ``simulate(..., series_buckets=buckets)`` when it ran with them, else observed here)."""
    placement = scn.config.placement
    cached = d.cache.get(("series", buckets))
    if cached is None:
        observe(scn, d, series_buckets=buckets)
        cached = d.cache[("series", buckets)]
    edges, per_group, in_flight = cached
    groups = []
    for r in range(placement.dp):
        for s in range(placement.pp):
            devices = tuple(placement.device(r, s, k) for k in range(placement.tp))
            groups.append((devices, per_group[r * placement.pp + s]))
    return Series(edges, tuple(groups), in_flight, scn.config.limit_bytes)


SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: "np.ndarray", top: int) -> str:
    """One character per bucket, scaled to ``top`` (the limit, or the maximum when unlimited)."""
    if top <= 0:
        return SPARK[0] * len(values)
    return "".join(SPARK[min(len(SPARK) - 1, int(v) * len(SPARK) // (top + 1))] for v in values.tolist())
