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


def steady_decode(plan: Any, sizing: Any) -> dict[str, Any] | None:
    """How many requests of max_seq_len the pool holds once they decode, where that differs from what
    admission charges (vLLM: admission budgets every windowed group for a chunk of in-flight tokens, a
    decoding request holds them for 1 + drafts): ``count`` (at most the running cap), ``by_memory``,
    ``per_request_bytes``, ``limited_by``. None for an engine whose pools are not one shared unit pool
    (SGLang: its separate pools), or whose decode charge is the admission charge."""
    from csa_plan.planner.engines.engine import Phase

    length = plan.max_seq_len
    held = plan.footprint(length, Phase.DECODE)
    if not held.uses or any(u.unit_bytes != sizing.unit_bytes for u in held.uses):
        return None
    units, need = held.units, plan.admission_units(length)
    if not units or units >= need or sizing.usable_units < need:
        return None
    # admitted one after another, each while the others decode: the n-th needs its whole charge free
    by_memory = (sizing.usable_units - need) // units + 1
    count = min(by_memory, sizing.max_running)
    return {"count": count, "by_memory": by_memory, "per_request_bytes": units * sizing.unit_bytes,
            "units_per_request": units,
            "limited_by": "memory" if by_memory <= sizing.max_running else "running cap",
            "source": f"({sizing.usable_units:,} usable {sizing.unit_name}s - {need:,} one admission charges) // "
                      f"{units:,} a decoding request holds (1 token in flight) + 1, at most "
                      f"{sizing.max_running:,} running"}
