"""Requests of max_seq_len a budget's state pool admits: the engine model's admission when an engine
is named, else the ledger's (pool // per-request bytes of the contract layout)."""

from __future__ import annotations

from typing import Any

from csa_plan.planner.budget.device import Budget


def requests_that_fit(device: Budget, cap: Any, engine: Any = None) -> dict[str, Any] | None:
    """``cap``: the ledger's DeviceFit (or None); ``engine``: an EngineCheck with a sized pool (or None)."""
    if not device.fits:
        return None
    if engine is not None and getattr(engine, "sizing", None) is not None and engine.plan is not None:
        return engine_admits(engine.plan, engine.sizing)
    if cap is None:
        return None
    if cap.no_answer is not None:  # a refused model: no count (its admitted layers alone are not the model)
        return {"count": None, "per_request_bytes": cap.per_request_bytes, "no_answer": cap.no_answer,
                "source": "the ledger: no answer for a refused model"}
    return {"count": cap.requests_that_fit, "per_request_bytes": cap.per_request_bytes,
            "unbounded": cap.requests_that_fit is None,
            "source": "the ledger: state pool // bytes per request of max_seq_len (the exact layout)"}


def engine_admits(plan: Any, sizing: Any) -> dict[str, Any]:
    """How many requests of max_seq_len the engine admits one after another into an empty pool, by its
    own ``admits`` (units held by each as the engine charges them, and its running-request cap)."""
    length = plan.max_seq_len
    # what ``admits`` counts in used_units (vLLM: every group's blocks while it prefills; SGLang: its full
    # pages, the SWA pool being sized for max_running_requests at start-up), never another pool's units
    need = plan.admission_units(length)
    n = min(sizing.max_running, sizing.usable_units // need) if need else sizing.max_running
    # the engine's own check agrees at the boundary: n admitted, the next one refused
    while n > 0 and not plan.admits(sizing, (n - 1) * need, n - 1, length):
        n -= 1
    while plan.admits(sizing, n * need, n, length):
        n += 1
    return {"count": n, "units_per_request": need, "unit": sizing.unit_name, "unit_bytes": sizing.unit_bytes,
            "max_running": sizing.max_running,
            "source": f"{plan.engine.name} admission: {sizing.usable_units:,} usable {sizing.unit_name}s, "
                      f"{need:,} per request while it prefills, at most {sizing.max_running:,} running"}
