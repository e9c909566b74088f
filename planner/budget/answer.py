"""The capacity answer (the ``fit`` key of every --json) every command gives: requests of max_seq_len that fit, and the longest
max_seq_len at which ``concurrency`` requests fit, each with the authority that produced it.

With an engine named, the engine decides (``engine: vllm-0.33``): the count is what its own
admission takes one after another into an empty pool of the device budget's KV memory
(``admission.engine_admits``), and the longest context is found by bisection over the
engine plan, re-sizing the device budget and the engine's pool at every length (start-up
reserves grow with max_seq_len). An engine that refuses gives no count. Without an engine
the exact layout answers (``layout: exact``): pool // bytes per request of max_seq_len.

This is the one place a count is made; check, compare, simulate and sweep all call it.
"""

from __future__ import annotations

from typing import Any, Callable

from csa_plan.planner.capacity import DeviceFit
from csa_plan.planner.model import ModelSpec
from csa_plan.planner.record import record


def engine_authority(name: str) -> str:
    return f"engine: {name}"


def layout_authority(name: str = "exact") -> str:
    return f"layout: {name}"


@record
class CapacityAnswer:
    """One command's capacity answer (the ``fit`` key of every ``--json``)."""

    authority: str                    # "engine: vllm-0.33" | "layout: exact"
    max_seq_len: int
    concurrency: int
    kv_memory_bytes: int | None       # the state pool per device it was taken in
    per_request_bytes: int | None     # what one request of max_seq_len is charged
    requests_that_fit: int | None     # None: no answer (see no_answer) or unbounded
    longest_context: int | None       # the largest max_seq_len at which `concurrency` requests fit
    no_answer: str | None = None      # why there is no count (an engine refusal, no pool, a refused plan)
    unbounded: bool = False           # 0 bytes per request: any number fits
    source: str = ""
    steady_decode: dict[str, Any] | None = None  # vLLM: requests the pool holds once they decode (admission.py)

    @property
    def answered(self) -> bool:
        return self.no_answer is None

    @property
    def fits(self) -> bool | None:
        """Whether ``concurrency`` requests of max_seq_len fit; None when there is no answer."""
        if not self.answered:
            return None
        return self.unbounded or (self.requests_that_fit or 0) >= self.concurrency

    def as_dict(self) -> dict[str, Any]:
        return {"authority": self.authority, "max_seq_len": self.max_seq_len, "concurrency": self.concurrency,
                "kv_memory_bytes": self.kv_memory_bytes, "per_request_bytes": self.per_request_bytes,
                "requests_that_fit": self.requests_that_fit, "unbounded": self.unbounded,
                "longest_context": self.longest_context, "fits": self.fits, "answered": self.answered,
                "no_answer": self.no_answer, "source": self.source, "steady_decode": self.steady_decode}


def no_answer(authority: str, length: int, concurrency: int, why: str,
              kv_memory_bytes: int | None = None) -> CapacityAnswer:
    return CapacityAnswer(authority, length, concurrency, kv_memory_bytes, None, None, None, no_answer=why)


def layout_answer(cap: DeviceFit | None, length: int, concurrency: int, kv_memory_bytes: int | None,
                  layout: str = "exact", why_none: str | None = None) -> CapacityAnswer:
    """The exact layout's answer from the ledger's fit (``capacity``) in the state pool."""
    authority = layout_authority(layout)
    if cap is None:
        return no_answer(authority, length, concurrency, why_none or "no device memory named (--device-memory): "
                         "every request fits an unlimited device", kv_memory_bytes)
    if cap.no_answer is not None:
        return CapacityAnswer(authority, length, concurrency, kv_memory_bytes, cap.per_request_bytes, None, None,
                              no_answer=cap.no_answer)
    return CapacityAnswer(authority, length, concurrency, kv_memory_bytes, cap.per_request_bytes,
                          cap.requests_that_fit, cap.longest_context, unbounded=cap.requests_that_fit is None,
                          source="state pool // bytes per request of max_seq_len (the exact layout)")


@record
class EngineCount:
    """The engine's admission at one max_seq_len: the check, and the count (None: refused / no pool)."""

    check: Any                        # budget.engine_pool.EngineCheck
    count: int | None
    charge_units: int | None
    charge_bytes: int | None
    source: str


def engine_count(spec: ModelSpec, engine: str, settings: Any, length: int, kv_memory_bytes: int | None) -> EngineCount:
    from csa_plan.planner.budget.admission import engine_admits
    from csa_plan.planner.budget.engine_pool import engine_check

    result = engine_check(spec, engine, settings, length, kv_memory_bytes)
    if result.refusal is not None or result.sizing is None or result.plan is None:
        return EngineCount(result, None, None, None, "")
    admits = engine_admits(result.plan, result.sizing)
    return EngineCount(result, admits["count"], admits["units_per_request"],
                       admits["units_per_request"] * admits["unit_bytes"], admits["source"])


def engine_answer(spec: ModelSpec, engine: str, settings: Any, length: int, concurrency: int,
                  kv_at: Callable[[int], int | None], upper: int,
                  no_pool: str = "no state pool: the weights and start-up reserves do not fit"
                  ) -> tuple[CapacityAnswer, EngineCount]:
    """The engine's answer at ``length`` and its longest context for ``concurrency`` requests.

    ``kv_at(L)`` is the KV memory per device the device budget leaves at max_seq_len L (None or
    <= 0: no pool, ``no_pool`` says why); ``upper`` the longest max_seq_len the model allows."""
    authority = engine_authority(engine)
    kv = kv_at(length)
    here = engine_count(spec, engine, settings, length, kv if kv is not None and kv > 0 else None)
    if here.check.refusal is not None:
        return no_answer(authority, length, concurrency, f"{engine} refuses this configuration ({here.check.refusal.setting}; the refusal says why)",
                         kv), here
    if kv is None or kv <= 0:
        return no_answer(authority, length, concurrency, no_pool, kv), here

    def count_at(n_tokens: int) -> int:
        memory = kv_at(n_tokens)
        if memory is None or memory <= 0:
            return 0
        try:
            return engine_count(spec, engine, settings, n_tokens, memory).count or 0
        except Exception:  # noqa: BLE001  (a length the engine or budget cannot take is not a fit)
            return 0

    longest = longest_length(count_at, concurrency, upper, known={length: here.count or 0})
    return CapacityAnswer(authority, length, concurrency, kv, here.charge_bytes, here.count, longest,
                          source=here.source, steady_decode=_steady(here)), here


def _steady(here: EngineCount) -> dict[str, Any] | None:
    if here.count is None:
        return None
    from csa_plan.planner.budget.admission import steady_decode

    return steady_decode(here.check.plan, here.check.sizing)


def longest_length(count_at: Callable[[int], int], concurrency: int, upper: int,
                   known: dict[int, int] | None = None) -> int | None:
    """The largest L in [1, upper] with count_at(L) >= concurrency (counts fall as L grows), by bisection."""
    seen = dict(known or {})

    def ok(n_tokens: int) -> bool:
        if n_tokens not in seen:
            seen[n_tokens] = count_at(n_tokens)
        return seen[n_tokens] >= concurrency

    from csa_plan.planner.bisection import largest_passing

    return largest_passing(ok, 1, upper)


def point_answer(spec: ModelSpec, engine: str | None, settings: Any, length: int, kv_memory_bytes: int | None,
                 tp: int = 1, layout: str = "exact") -> CapacityAnswer:
    """The answer at one point (one request of ``length``; no longest-context search): what simulate,
    sweep and compare report beside check. The same count as check's, from the same functions."""
    from csa_plan.planner.capacity import capacity
    from csa_plan.planner.plan import PlanOptions, plan_model

    if engine is not None:
        if kv_memory_bytes is None or kv_memory_bytes <= 0:
            return no_answer(engine_authority(engine), length, 1, "no state pool", kv_memory_bytes)
        here = engine_count(spec, engine, settings, length, kv_memory_bytes)
        if here.check.refusal is not None:
            return no_answer(engine_authority(engine), length, 1,
                             f"{engine} refuses this configuration ({here.check.refusal.setting})", kv_memory_bytes)
        return CapacityAnswer(engine_authority(engine), length, 1, kv_memory_bytes, here.charge_bytes, here.count,
                              None, source=here.source, steady_decode=_steady(here))
    if kv_memory_bytes is None or kv_memory_bytes <= 0:
        return no_answer(layout_authority(layout), length, 1, "no state pool", kv_memory_bytes)
    plan = plan_model(spec, PlanOptions(max_seq_len=length, tp=tp, layout=layout))
    cap = capacity(spec, plan, kv_memory_bytes, 1)
    answer = layout_answer(cap, length, 1, kv_memory_bytes, layout)
    from dataclasses import replace

    return replace(answer, longest_context=None)
