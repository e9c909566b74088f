"""What a decision loop decided, per request: outcome, replica and admission time.

Apart from ``fast.py`` (which decides) and ``timeline.py`` (which reads the decisions as events),
so that both depend on this record and neither on the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from csa_plan.planner.reserve.scenario import Outcome

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True, eq=False)
class Decisions:
    """Per request: outcome, replica (-1 if refused) and admission time (-1 if refused).

    ``stored_admit_ns`` is None when every admitted request was admitted on its arrival (the
    refuse policy): the admission times are then the arrivals (``arrival_ns``), read where
    needed instead of kept (8 bytes per request)."""

    outcome: "np.ndarray"
    replica: "np.ndarray"
    stored_admit_ns: "np.ndarray | None"
    arrival_ns: "np.ndarray | None" = None
    cache: dict = field(default_factory=dict, compare=False, repr=False)  # derived views (the event timeline)

    @property
    def admit_ns(self) -> "np.ndarray":
        """Admission time per request, -1 if refused (built when not stored)."""
        import numpy as np

        if self.stored_admit_ns is not None:
            return self.stored_admit_ns
        return np.where(self.outcome == Outcome.ADMITTED.value, self.arrival_ns, -1)

    def admit_of(self, admitted: "np.ndarray") -> "np.ndarray":
        """Admission times of the given admitted requests (indexes)."""
        return (self.stored_admit_ns if self.stored_admit_ns is not None else self.arrival_ns)[admitted]

    def same_as(self, other: "Decisions") -> bool:
        import numpy as np

        return all(np.array_equal(getattr(self, k), getattr(other, k)) for k in ("outcome", "replica", "admit_ns"))
