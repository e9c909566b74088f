"""One decode step of the physics clock, layer by layer: where its time goes (V4 and V4.1 alike).

Why: a per-role clock (``roles.py``) is only checkable if one can see each layer's share. Each
layer's terms are ``physics.model_cost`` run on that layer alone (its descriptor, its weights from
the inventory, the same shard rules), so the breakdown is the clock's own arithmetic, never a second
copy of it; the rest (head, final norm, Engram lookups, the per-step floor) is the whole step less
the layers' sum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping


@dataclass(frozen=True)
class LayerStep:
    """One layer's share of a decode step of ``requests`` requests at ``context`` tokens, one rank."""

    layer: int | None  # None: the rest (head, final norm, step floor, what no layer holds)
    role: str
    weight_bytes: float   # dense weights plus the routed experts the step's tokens touch
    state_bytes: float    # window rows, top-k records, index keys (and Engram rows)
    flops: float          # linears, attention, indexer
    seconds: float        # the fitted clock's share (coefficients applied)


class _Only:
    """An inventory restricted to some weights (``model_cost`` reads ``.weights`` only)."""

    def __init__(self, weights: tuple[Any, ...]) -> None:
        self.weights = weights


def decode_breakdown(spec: Any, config: Mapping[str, Any], inventory: Any, card_name: str, placement: Any,
                     engine: str, rules: Any, context: int, requests: int = 1, formats: Any = None,
                     engram: Any = None) -> tuple[LayerStep, ...]:
    """Each main layer's share of one decode step (``requests`` requests of one token at ``context``),
    then the rest; the seconds sum to ``physics_step_time``'s step exactly up to float rounding."""
    from csa_plan.planner.steptime.hardware import card_perf
    from csa_plan.planner.steptime.model import linear_seconds
    from csa_plan.planner.steptime.physics import basis_rows, fitted_beta, linear_model, model_cost
    from csa_plan.planner.steptime.roles import role_name

    perf = card_perf(card_name)
    beta, _, _ = fitted_beta(engine, perf.family)
    by_layer: dict[int | None, list[Any]] = {}
    for w in inventory.weights:
        by_layer.setdefault(None if w.is_mtp else w.layer, []).append(w)

    def step(s: Any, inv: Any, lookups: Any = None) -> tuple[float, Any]:
        cost = model_cost(s, config, inv, rules, placement, formats, lookups)
        c = linear_model(basis_rows(cost, perf), beta)
        return linear_seconds(c, requests, 0, 0.0, requests, requests * context), cost

    floor = float(beta.get("step", 0.0))
    out: list[LayerStep] = []
    total = 0.0
    for d in (d for d in spec.layers if not d.is_mtp):
        secs, cost = step(replace(spec, layers=(d,)), _Only(tuple(by_layer.get(d.layer_id, ()))))
        secs -= floor  # the per-step floor once, in the rest
        total += secs
        touched = cost.expert_bytes * -math.expm1(math.log1p(-cost.experts_per_token / cost.experts) * requests
                                                 * cost.shape.dp)
        flops = requests * (cost.token_gemm_flops + cost.token_attn_flops + cost.token_index_flops
                            + cost.position_flops * context)
        state = requests * (cost.request_read_bytes + cost.context_read_bytes * context + cost.engram_bytes_per_token)
        role = role_name(d) if d.sharing is not None else (f"ratio {d.compression_ratio}" if d.compression_ratio
                                                          else "window only")
        out.append(LayerStep(d.layer_id, role, cost.dense_bytes + touched, state, flops, secs))
    whole, cost = step(spec, inventory, engram)  # the Engram lookups are the model's, charged in the rest
    out.append(LayerStep(None, "rest: head, final norm, Engram lookups, floor", 0.0,
                         requests * cost.engram_bytes_per_token, 0.0, whole - total))
    return tuple(out)
