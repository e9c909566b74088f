"""The new-token ratio: how much of every running request's remaining output admission reserves.

sglang-0.5.23 ``srt/managers/scheduler_components/new_token_ratio_tracker.py``:

* ``from_config`` (lines 21-32): init = min(SGLANG_INIT_NEW_TOKEN_RATIO x schedule_conservativeness, 1),
  min = min(init x SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR, 1), decay = (init - min) / DECAY_STEPS;
  defaults ``srt/environ.py:646-649``: 0.7, 0.14, 600 steps, SGLANG_RETRACT_DECODE_STEPS 20;
* ``decay_step`` (34-35): current = max(current - decay, min), once per decode step that did not
  retract (``managers/scheduler.py:4541-4542``);
* ``estimate_new_token_ratio_after_retract`` (40-50): over the requests *kept* after a retraction,
  min(1, (decoded + 20 x kept) / (sum max_new_tokens + 1)); the scheduler sets current to it
  (``managers/scheduler.py:4493,4513``).

Floats are computed in the engine's own order so the values are bit-identical.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

INIT_NEW_TOKEN_RATIO = 0.7  # environ.py:646
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14  # environ.py:647
NEW_TOKEN_RATIO_DECAY_STEPS = 600  # environ.py:648
RETRACT_DECODE_STEPS = 20  # environ.py:649


@dataclass(frozen=True)
class RatioRule:
    init: float
    min: float
    decay: float

    @classmethod
    def from_config(cls, schedule_conservativeness: float = 1.0) -> "RatioRule":
        init = min(INIT_NEW_TOKEN_RATIO * schedule_conservativeness, 1.0)
        min_ratio = min(init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        decay = (init - min_ratio) / NEW_TOKEN_RATIO_DECAY_STEPS
        return cls(init=init, min=min_ratio, decay=decay)

    def decayed(self, current: float) -> float:
        return max(current - self.decay, self.min)


def ratio_after_retract(kept: Iterable[tuple[int, int]]) -> float:
    """``kept``: (decoded tokens, max_new_tokens) of each request left in the batch."""
    decoded = total_max_new = count = 0
    for out, max_new in kept:
        decoded += out
        total_max_new += max_new
        count += 1
    return min(1.0, (decoded + RETRACT_DECODE_STEPS * count) / (total_max_new + 1))
