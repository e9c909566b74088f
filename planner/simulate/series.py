"""Residency over time, bucketed for a plot or a sparkline (rendering aid, not accounting).

Each bucket holds the highest residency reached in it (or carried into it), so a
short spike is never smoothed away when a long run is drawn in a few pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from csa_plan.planner.simulate.fast import Decisions, event_order, group_series, instant_ends
from csa_plan.planner.simulate.scenario import Outcome, Scenario

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True, eq=False)
class Series:
    edges_ns: "np.ndarray"  # bucket starts, len = buckets
    groups: tuple[tuple[tuple[int, ...], "np.ndarray"], ...]  # (devices, max resident bytes per bucket)
    in_flight: "np.ndarray"  # max requests in flight per bucket
    limit_bytes: int


def _bucket_max(times: "np.ndarray", levels: "np.ndarray", edges: "np.ndarray") -> "np.ndarray":
    import numpy as np

    out = np.zeros(len(edges), dtype=np.int64)
    if len(times) == 0:
        return out
    # the level carried into each bucket: the last observation before its start
    before = np.searchsorted(times, edges, side="left") - 1
    carried = np.where(before >= 0, levels[np.maximum(before, 0)], 0)
    out = carried.copy()
    which = np.searchsorted(edges, times, side="right") - 1
    np.maximum.at(out, np.clip(which, 0, len(edges) - 1), levels)
    return out


def residency_series(scn: Scenario, d: Decisions, buckets: int = 80) -> Series:
    import numpy as np

    placement = scn.config.placement
    adm = np.flatnonzero(d.outcome == Outcome.ADMITTED.value)
    t_in = d.admit_ns[adm]
    t_out = t_in + scn.hold_ns[adm]
    end = int(max(t_out.max() if len(t_out) else 0, scn.arrival_ns[-1] if scn.requests else 0, 1))
    edges = np.linspace(0, end, buckets, endpoint=False).astype(np.int64)
    groups = []
    for r in range(placement.dp):
        m = d.replica[adm] == r
        for s in range(placement.pp):
            per_tier = np.array([stages[s].total_bytes for stages in scn.bundles], dtype=np.int64)
            times, total, _ = group_series(t_out[m], t_in[m], [per_tier[scn.tier[adm][m]]], 1)
            devices = tuple(placement.device(r, s, k) for k in range(placement.tp))
            groups.append((devices, _bucket_max(times, total, edges)))
    order = event_order(t_out, t_in)
    times = np.concatenate([t_out, t_in])[order]
    flight = np.cumsum(np.concatenate([-np.ones(len(adm), np.int64), np.ones(len(adm), np.int64)])[order])
    ends = instant_ends(times)
    return Series(edges, tuple(groups), _bucket_max(times[ends], flight[ends], edges), scn.config.limit_bytes)


SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: "np.ndarray", top: int) -> str:
    """One character per bucket, scaled to ``top`` (the limit, or the maximum when unlimited)."""
    if top <= 0:
        return SPARK[0] * len(values)
    return "".join(SPARK[min(len(SPARK) - 1, int(v) * len(SPARK) // (top + 1))] for v in values.tolist())
