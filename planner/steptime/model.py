"""The one step-time model every engine runtime is timed by (issues 25 and 35).

Every replay (both engines, their Python twins and their compiled loops) asks this module how
long one scheduled step lasts, given what the step holds (``StepBatch``): the prefill tokens
and the positions they sit at, the decoding requests, their tokens (drafts included) and their
context lengths. Two forms, one of which a replay carries (``StepTime``):

* **fixed** (``--step-time fixed``, or ``--tpot-ms`` / ``--prefill-tok-s`` given): the two
  constants of issue 25, ``max(tpot_ms / 1000, prefill tokens / prefill_tok_s)`` seconds.
* **linear** (``physics``, the default, and ``measured``): seconds =
  ``c0 + c_tok*T + c_pre*P + c_pos*PA + c_req*D + c_ctx*DC + c_exp*(1 - exp(q_log*T))`` where T
  is the step's tokens, P its prefill tokens, PA their summed positions, D the decoding requests, DC their
  summed context, and the last term the routed-expert weights the T tokens touch per rank
  (each token picks k of E experts: ``q_log = log(1 - k/E)``). ``planner/steptime/physics.py``
  derives the coefficients from the card, the model and the deployment, with coefficients
  fitted on published measurements; ``planner/steptime/measured.py`` fits the same form to
  aiconfigurator-core's per-step estimates.

Evaluated in this exact order, in float64, in Python and in C (``steptime.h``), so the twins
agree to the nanosecond. Integer nanoseconds, rounded up, at least 1, so a clock never stalls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from csa_plan.planner.units import NS_PER_S

LINEAR_TERMS = 8  # c0, c_tok, c_pre, c_pos, c_req, c_ctx, c_exp, q_log


class StepSource(str, Enum):
    """Where a replay's step durations come from (``--step-time``)."""

    PHYSICS = "physics"
    MEASURED = "measured"
    FIXED = "fixed"


@dataclass(frozen=True)
class StepTime:
    """One replay's step-time model: the fixed constants, and (``linear`` set) the batch model.

    ``source`` names where it came from; ``provenance`` is the line every output prints (data,
    engine version, GPU, any nearest-case substitution); ``band`` the stated error band."""

    tpot_ms: float
    prefill_tok_s: float
    linear: tuple[float, ...] | None = None
    source: StepSource = StepSource.FIXED
    provenance: str = ""
    band: str = ""

    def __post_init__(self) -> None:
        if self.linear is not None and len(self.linear) != LINEAR_TERMS:
            raise ValueError(f"a linear step model has {LINEAR_TERMS} coefficients, got {len(self.linear)}")

    @property
    def decode_ns(self) -> int:
        return max(1, math.ceil(self.tpot_ms * 1_000_000))

    @property
    def label(self) -> str:
        """What outputs print as the step-time source."""
        if self.linear is None:
            return f"fixed ({self.tpot_ms:g} ms a decode step, {self.prefill_tok_s:,.0f} prefill tokens/s)"
        return f"{self.source.value}: {self.provenance}" if self.provenance else self.source.value

    def as_dict(self) -> dict[str, object]:
        d: dict[str, object] = {"source": self.source.value, "label": self.label, "band": self.band or None}
        if self.linear is None:
            d.update(tpot_ms=self.tpot_ms, prefill_tok_s=self.prefill_tok_s)
        else:
            d["coefficients"] = dict(zip(("c0_s", "per_token_s", "per_prefill_token_s", "per_prefill_position_s",
                                          "per_decode_request_s", "per_decode_context_token_s", "experts_s",
                                          "expert_miss_log"), self.linear))
        return d


class StepBatch:
    """What one step holds, accumulated request by request by the scheduler (a hot path: slots)."""

    __slots__ = ("prefill", "prefill_pos", "decode_reqs", "decode_tokens", "decode_ctx")

    def __init__(self) -> None:
        self.prefill = 0  # prompt (or recomputation) tokens
        self.prefill_pos = 0.0  # their positions summed (1-based): attention and indexer work
        self.decode_reqs = 0
        self.decode_tokens = 0  # one per decoding request, plus its draft tokens
        self.decode_ctx = 0  # the decoding requests' context lengths summed

    def add_prefill(self, before: int, n: int) -> None:
        """A chunk of ``n`` tokens after ``before`` computed ones (positions before+1 .. before+n)."""
        self.prefill += n
        self.prefill_pos += float(n * before + n * (n + 1) // 2)

    def add_decode(self, context: int, n: int) -> None:
        self.decode_reqs += 1
        self.decode_tokens += n
        self.decode_ctx += context

    def add_decodes(self, reqs: int, tokens: int, contexts: int) -> None:
        """``reqs`` decodes at once (``tokens`` and context lengths ``contexts`` summed): the integer sums
        ``add_decode`` makes one by one, for a scheduler's hot loop."""
        self.decode_reqs += reqs
        self.decode_tokens += tokens
        self.decode_ctx += contexts


def linear_seconds(c: tuple[float, ...], tokens: int, prefill: int, prefill_pos: float, decode_reqs: int,
                   decode_ctx: int) -> float:
    """The linear form (module docstring), in the order ``steptime.h`` evaluates it."""
    t = float(tokens)
    return (c[0] + c[1] * t + c[2] * float(prefill) + c[3] * prefill_pos + c[4] * float(decode_reqs)
            + c[5] * float(decode_ctx) + c[6] * (1.0 - math.exp(c[7] * t)))


def batch_ns(batch: StepBatch, time: StepTime) -> int:
    """Nanoseconds a step holding ``batch`` lasts (see the module docstring)."""
    if time.linear is None:
        return step_ns(batch.prefill, time)
    s = linear_seconds(time.linear, batch.prefill + batch.decode_tokens, batch.prefill, batch.prefill_pos,
                       batch.decode_reqs, batch.decode_ctx)
    x = math.ceil(s * 1e9) if s == s and s < 9.2e9 else 1 << 63
    return max(1, x)


def step_ns(prefill_tokens: int, time: StepTime) -> int:
    """Nanoseconds of a step under the fixed constants."""
    decode = time.decode_ns
    if prefill_tokens <= 0:
        return decode
    return max(decode, math.ceil(prefill_tokens * NS_PER_S / time.prefill_tok_s))


def step_time_label(step_time: dict, fallback: str = "") -> str:
    """A step-time source as every output names it: its label and its stated error band
    (simulate's `step time:` line, sweep's engine points)."""
    label, band = step_time.get("label") or fallback, step_time.get("band")
    return label + (f" (error band: {band})" if band else "")
