"""Residency over time, bucketed for a plot or a sparkline (rendering aid, not accounting).

Each bucket holds the highest residency reached in it (or carried into it), so a
short spike is never smoothed away when a long run is drawn in a few pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from csa_plan.planner.simulate.fast import Decisions, group_levels, timeline
from csa_plan.planner.simulate.scenario import Scenario

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True, eq=False)
class Series:
    edges_ns: "np.ndarray"  # bucket starts, len = buckets
    groups: tuple[tuple[tuple[int, ...], "np.ndarray"], ...]  # (devices, max resident bytes per bucket)
    in_flight: "np.ndarray"  # max requests in flight per bucket
    limit_bytes: int


def _bucket_max(times: "np.ndarray", levels: "np.ndarray", edges: "np.ndarray") -> "np.ndarray":
    """Per bucket: the highest level observed in it, or carried into it from before its start.
    ``times`` are sorted, so each bucket is one slice (no per-observation bucket index)."""
    import numpy as np

    out = np.zeros(len(edges), dtype=np.int64)
    if len(times) == 0:
        return out
    first = np.searchsorted(times, edges, side="left")  # the first observation at or after each edge
    before = first - 1  # the level carried into each bucket: the last observation before its start
    out = np.where(before >= 0, levels[np.maximum(before, 0)], 0)
    stops = np.append(first[1:], len(times))
    filled = first < stops
    if filled.any():
        out[filled] = np.maximum(out[filled], np.maximum.reduceat(levels, first[filled]))
    return out


def residency_series(scn: Scenario, d: Decisions, buckets: int = 80) -> Series:
    import numpy as np

    placement = scn.config.placement
    tl = timeline(scn, d)  # the same events the observables were taken from
    end = int(max(tl.last_release_ns, scn.arrival_ns[-1] if scn.requests else 0, 1))
    edges = np.linspace(0, end, buckets, endpoint=False).astype(np.int64)
    groups = []
    for r in range(placement.dp):
        for s in range(placement.pp):
            per_tier = np.array([stages[s].total_bytes for stages in scn.bundles], dtype=np.int64)
            times, total = group_levels(tl, r, per_tier)
            devices = tuple(placement.device(r, s, k) for k in range(placement.tp))
            groups.append((devices, _bucket_max(times, total, edges)))
    times, flight = group_levels(tl, None, np.ones(len(scn.bundles), dtype=np.int64))
    return Series(edges, tuple(groups), _bucket_max(times, flight, edges), scn.config.limit_bytes)


SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: "np.ndarray", top: int) -> str:
    """One character per bucket, scaled to ``top`` (the limit, or the maximum when unlimited)."""
    if top <= 0:
        return SPARK[0] * len(values)
    return "".join(SPARK[min(len(SPARK) - 1, int(v) * len(SPARK) // (top + 1))] for v in values.tolist())
