"""Residency over time, bucketed for a plot or a sparkline (rendering aid, not accounting).

Each bucket holds the highest residency reached in it (or carried into it), so a
short spike is never smoothed away when a long run is drawn in a few pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from csa_plan.planner.simulate.fast import Decisions, signed_table
from csa_plan.planner.simulate.timeline import scan, timeline
from csa_plan.planner.simulate.scenario import Scenario

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
    or carried into it, from the same events the observables were taken from (a slice at a time)."""
    import numpy as np

    placement = scn.config.placement
    tl = timeline(scn, d)
    end = int(max(tl.last_release_ns, scn.arrival_ns[-1] if scn.requests else 0, 1))
    edges = np.linspace(0, end, buckets, endpoint=False).astype(np.int64)
    per_stage = [np.array([stages[s].total_bytes for stages in scn.bundles], dtype=np.int64).reshape(-1, 1)
                 for s in range(placement.pp)]
    flight = np.ones((len(scn.bundles), 1), dtype=np.int64)
    groups = []
    if placement.dp == 1:  # every group sees every event: one scan for all of them and the requests in flight
        top = scan(scn, d, tl, signed_table(np.concatenate(per_stage + [flight], axis=1)), edges=edges).buckets()
        in_flight = top[:, -1]
        for s in range(placement.pp):
            groups.append((tuple(placement.device(0, s, k) for k in range(placement.tp)), top[:, s].copy()))
    else:
        for r in range(placement.dp):
            top = scan(scn, d, tl, signed_table(np.concatenate(per_stage, axis=1)), r, edges=edges).buckets()
            for s in range(placement.pp):
                groups.append((tuple(placement.device(r, s, k) for k in range(placement.tp)), top[:, s].copy()))
        in_flight = scan(scn, d, tl, signed_table(flight), edges=edges).buckets()[:, 0]
    return Series(edges, tuple(groups), in_flight.copy(), scn.config.limit_bytes)


SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: "np.ndarray", top: int) -> str:
    """One character per bucket, scaled to ``top`` (the limit, or the maximum when unlimited)."""
    if top <= 0:
        return SPARK[0] * len(values)
    return "".join(SPARK[min(len(SPARK) - 1, int(v) * len(SPARK) // (top + 1))] for v in values.tolist())
