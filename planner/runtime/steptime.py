"""The one step-time model every engine runtime is timed by (issue 25, item 3).

A step lasts ``max(tpot_ms / 1000, prefill tokens scheduled in it / prefill_tok_s)``
seconds: a decode-only step costs one ``--tpot-ms``; a step that carries prefill chunks
(recomputation after a preemption included) costs them at ``--prefill-tok-s``; decodes
ride along. Integer nanoseconds, rounded up, so a clock never stalls. Replace this one
function to change the time model for every engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from csa_plan.planner.units import NS_PER_S


@dataclass(frozen=True)
class StepTime:
    """The two throughputs of the step-time model, fixed for one replay."""

    tpot_ms: float
    prefill_tok_s: float

    @property
    def decode_ns(self) -> int:
        return max(1, math.ceil(self.tpot_ms * 1_000_000))


def step_ns(prefill_tokens: int, time: StepTime) -> int:
    """Nanoseconds one step lasts (see the module docstring)."""
    decode = time.decode_ns
    if prefill_tokens <= 0:
        return decode
    return max(decode, math.ceil(prefill_tokens * NS_PER_S / time.prefill_tok_s))
