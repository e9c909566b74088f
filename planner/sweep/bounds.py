"""A bound on an engine point before it is replayed (issue 45 item 5): the busy time its step clock must spend.

Why: replaying a shape that cannot serve the rate costs as much as replaying one that can. The step clock
(``planner/steptime/model.py`` ``linear_seconds``: c0 + c1 T + c2 P + c3 PA + c4 D + c5 DC + c6 (1 - e^(c7 T))
for a step of T tokens, P of them prefill at summed positions PA, D decoding requests of summed context DC)
is a sum of non-negative terms when every coefficient is non-negative, so the busy seconds a replica must
spend per second of arrivals at ``rate`` are at least what the workload's own totals give, whatever the
scheduler does:

* steps: each yields at most ``max_batch`` x (1 + k) output tokens (``max_batch``: the fewer of the engine's
  ``max_running`` and the pool's units over what one token's request is charged -- not a whole request's
  admission charge: the hybrid pools free sliding-window blocks as a request runs, so a replay holds far more
  requests than usable units over one request's charge; k: draft tokens a step),
  so at least rate x mean_osl / (max_batch (1 + k)) steps a second, each at least c0;
* tokens: every prompt token is prefilled once (P and T), at its positions (PA, summed as ``StepBatch``
  sums them), and every output token is decoded in a step of at most 1 + k tokens a request (D, T, and DC
  at least the shortest prompt each);
* c6's term is at least 0.

A replica is busy at most one second a second (one step in flight), so a lower bound above 1 proves the
rate is not sustained: the point is not replayed, and says so with the figures. A clock with a negative
coefficient gives no bound (the point is replayed); the fixed clock is bounded by its decode floor
alone. Prompt tokens are counted as prefilled once each: the plan's and the traces' requests share no
prefix (no token content), so prefix caching computes every prompt token. The bound never makes a point feasible: every point that is not proven
infeasible is replayed, so every answer comes from the exact replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Bound:
    """The busy seconds per second one replica needs at least (``busy_s_per_s``) and what it is made of."""

    busy_s_per_s: float
    max_batch: int
    rate_per_replica_per_s: float
    drafts: int
    terms: tuple[tuple[str, float], ...]
    who: str = "a replica"  # whose busy time: a disaggregated point bounds each role's worker apart

    @property
    def infeasible(self) -> bool:
        return self.busy_s_per_s > 1.0

    def line(self) -> str:
        top = ", ".join(f"{name} {s:.3g} s" for name, s in sorted(self.terms, key=lambda t: -t[1])[:3])
        return (f"bound: {self.who} needs at least {self.busy_s_per_s:.3g} s of steps a second at "
                f"{self.rate_per_replica_per_s:.4g} req/s ({top}; at most {self.max_batch} running, "
                f"{1 + self.drafts} tokens a step each) > 1 s: not replayed")


def busy_bound(setup: Any, rate_per_s: float, mean_isl: float, mean_osl: float, min_isl: int,
               mean_positions: float, who: str = "a replica") -> Bound | None:
    """The lower bound on one replica's busy seconds per second at ``rate_per_s`` for the deployment
    (``serving.serve.RuntimeSetup``); None when the clock's form gives none (no linear coefficients)."""
    time, sizing, plan = setup.time, setup.sizing, setup.plan
    lam = rate_per_s / setup.dp
    per_request = max(1, plan.admission_units(1))  # what a running request holds at least: one token's units
    max_batch = max(1, min(sizing.max_running, sizing.usable_units // per_request))
    k = drafts(plan)
    steps = lam * mean_osl / (max_batch * (1 + k))
    decoded = lam * mean_osl / (1 + k)  # decoding requests in steps, summed, at least
    if time.linear is None:  # the fixed clock: a step lasts at least its decode time
        terms = (("steps", steps * time.decode_ns / 1e9),)
    else:
        c = time.linear
        if min(c[:6]) < 0 or c[6] * (1.0 - 2.718281828459045 ** c[7]) < 0:
            return None  # a negative term: the positive ones alone bound nothing
        parts = {"steps": (c[0], steps), "tokens": (c[1], lam * mean_isl + decoded),
                 "prefill": (c[2], lam * mean_isl), "positions": (c[3], lam * mean_positions),
                 "decode requests": (c[4], decoded), "decode context": (c[5], decoded * min_isl)}
        terms = tuple((name, coef * amount) for name, (coef, amount) in parts.items() if coef > 0)
    return Bound(sum(s for _, s in terms), max_batch, lam, k, terms, who)


def drafts(plan: Any) -> int:
    """Draft tokens a step proposes for a request, from the plan's resolved settings (vLLM
    ``--num-speculative-tokens``, SGLang ``--speculative-num-steps``): the most any step can accept."""
    k = 0
    for resolved in plan.settings:
        if resolved.option in ("--num-speculative-tokens", "--speculative-num-steps", "--speculative-num-draft-tokens") \
                and isinstance(resolved.value, int):
            k = max(k, resolved.value)  # draft tokens counts the verified one too: the larger is the safe side
    return k
