"""The simulated clock: integer nanoseconds in int64, and the one refusal of a time past it.

Every replay (the reservation ledger's decision loops, the engine runtimes and their compiled
twins) keeps time on this clock, so its bounds live here, below all of them: an arrival or a
request's prefill or decode time stays at or below ``MAX_SIM_NS``, every event time at or below
``MAX_CLOCK_NS``, and a value past them is bad input naming what pushed it there, never a
wrapped time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from csa_plan.planner.errors import BadInput

if TYPE_CHECKING:
    import numpy as np

MAX_SIM_NS = 1 << 61  # about 73 years: an arrival, and each of a request's prefill and decode times
MAX_CLOCK_NS = (1 << 63) - 1  # the int64 nanosecond clock (about 292 years): every event time stays at or below


def refuse_past_clock(latest_arrival_ns: int, rate_scale: float) -> None:
    """A rate scale that puts the latest arrival past the simulated clock (``MAX_SIM_NS``) is bad input
    naming --rate-scale, on every path (the ledger's, the engine replays'), never a wrapped time."""
    import numpy as np

    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        refuse_past(np.array([float(latest_arrival_ns)]) / rate_scale, "--rate-scale")


def refuse_past(seconds_ns: "np.ndarray", option: str) -> None:
    """Bad input naming ``option`` when any float nanosecond time is past ``MAX_SIM_NS`` (inf and NaN too)."""
    import numpy as np

    if seconds_ns.size and not float(np.max(seconds_ns)) <= MAX_SIM_NS:
        raise BadInput("options", option, "makes simulated times exceed the int64 nanosecond clock (~73 years)")
