"""The same model under every layout profile and engine model, side by side (pure; no printing).

One ``CompareRow`` per profile or engine: bytes per request per device at the chosen
max_seq_len, the asymptotic bytes per token (the exact slope of bytes(L) as L
grows, measured over one whole period of every block size), the fixed cost per
request (classes that do not grow with L: carry, index carry, dense ring), the
padding waste, the difference to ``exact`` and, given a device limit, how many
concurrent requests fit.

An engine row (``vllm-0.33``, ``sglang-0.5.23``, ``onnx-genai``) is what a *decoding*
request of max_seq_len holds in that engine, at the engine's defaults, in its own block or
page granularity; its fit is what the engine admits with the limit as its KV memory
(``EnginePlan.admits``: blocks and the running-request cap), and its ``startup_budget_bytes``
is what the engine budgets such a request at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from csa_plan.planner.descriptor import MAX_SEQ_LEN_LIMIT
from csa_plan.planner.layout import GroupBytes, LayerKind
from csa_plan.planner.model import ModelSpec
from csa_plan.planner.plan import ModelPlan, PlanOptions, plan_model
from csa_plan.planner.profiles import PROFILES, get_profile
from csa_plan.planner.engines.engine import EngineRefused, Phase
from csa_plan.planner.engines.registry import ENGINES, get_engine
from csa_plan.planner.engines.settings import EngineSettings

# Every block/page size the profiles use (4, 64, 128, 256 tokens) divides this, so
# bytes(L + SLOPE_PERIOD) - bytes(L) is exactly SLOPE_PERIOD x the asymptotic slope
# once L is past every saturation point (window, top-k).
SLOPE_PERIOD = 1 << 16
SLOPE_HIGH = MAX_SEQ_LEN_LIMIT


@dataclass(frozen=True)
class CompareRow:
    profile: str
    summary: str
    per_request_bytes: int
    by_class: GroupBytes
    bytes_per_token: Fraction
    fixed_request_bytes: int
    padding_bytes: int
    over_exact_bytes: int
    requests_that_fit: int | None  # None: no limit, a refused model (no answer) or 0 bytes (unbounded)
    kind: str = "profile"  # "profile" (a per-layer layout) or "engine" (an engine model)
    startup_budget_bytes: int | None = None  # engines: what the engine budgets one request at start-up
    sources: tuple[str, ...] = ()
    slope_layers: tuple[int, ...] = ()  # the admitted layers the slope is measured over
    requests_unbounded: bool = False  # admitted, a limit given, and 0 bytes per request
    limit_bytes: int | None = None  # the memory this row's count is taken in (an engine: its own pool)
    pool_refused: str | None = None  # engines: why the engine refuses a pool of ``limit_bytes`` at start-up
    charge_bytes: int | None = None  # what admission charges one request of max_seq_len (engines: while it prefills)

    def as_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "kind": self.kind,
            "startup_budget_bytes": self.startup_budget_bytes,
            "summary": self.summary,
            "per_request_bytes": self.per_request_bytes,
            "by_class": self.by_class.as_dict(),
            "bytes_per_token": {"numerator": self.bytes_per_token.numerator,
                                "denominator": self.bytes_per_token.denominator,
                                "value": float(self.bytes_per_token)},
            "fixed_request_bytes": self.fixed_request_bytes,
            "padding_bytes": self.padding_bytes,
            "over_exact_bytes": self.over_exact_bytes,
            "requests_that_fit": self.requests_that_fit,
            "requests_unbounded": self.requests_unbounded,
            "limit_bytes": self.limit_bytes,
            "pool_refused": self.pool_refused,
            "charge_bytes": self.per_request_bytes if self.kind != "engine" else self.charge_bytes,
            "authority": f"{'engine' if self.kind == 'engine' else 'layout'}: {self.profile}",
            "sources": list(self.sources),
        }


@dataclass(frozen=True)
class Comparison:
    model: ModelSpec
    options: PlanOptions
    limit_bytes: int | None
    rows: tuple[CompareRow, ...]
    refused_layers: tuple[int, ...]  # layers left out of every total (typed refusals)
    engine_refusals: tuple = ()  # EngineRefusal records: engines that would refuse this model

    @property
    def admitted(self) -> bool:
        return not self.refused_layers and not self.engine_refusals

    def row(self, profile: str) -> CompareRow:
        return next(r for r in self.rows if r.profile == profile)


def padding_bytes(plan: ModelPlan) -> int:
    """Sum of the profile's padding over every admitted layer of a plan."""
    profile = get_profile(plan.options.layout)
    total = 0
    for layer in plan.layers:
        if layer.bytes is None:
            continue
        if layer.kind is LayerKind.SWA:
            total += profile.swa_padding_bytes(layer.descriptor)
        else:
            total += profile.group_padding_bytes(layer.descriptor, plan.options.query_len)
    return total


def fixed_request_bytes(plan: ModelPlan) -> int:
    b = plan.per_device
    return b.carry_bytes + b.index_carry_bytes + b.dense_ring_bytes


def bytes_per_token(model: ModelSpec, options: PlanOptions, layer_ids: tuple[int, ...] | None = None) -> Fraction:
    """Exact asymptotic slope of per-request bytes in max_seq_len.

    ``layer_ids`` restricts the model to those layers: the slope then describes the same
    layers as a per-request total from which refused layers were left out (a slope taken
    over layers that are refused at the chosen length would describe another model).
    """
    if layer_ids is not None:
        keep = set(layer_ids)
        model = replace(model, layers=tuple(d for d in model.layers if d.layer_id in keep), graph_refusals=())
        if not model.layers:
            return Fraction(0)
    high = plan_model(model, replace(options, max_seq_len=SLOPE_HIGH)).per_request_per_device_bytes
    low = plan_model(model, replace(options, max_seq_len=SLOPE_HIGH - SLOPE_PERIOD)).per_request_per_device_bytes
    return Fraction(high - low, SLOPE_PERIOD)


def engine_row(name: str, model: ModelSpec, options: PlanOptions, exact_total: int,
               limit_bytes: int | None, settings: EngineSettings | None = None) -> CompareRow:
    """A decoding request of max_seq_len in the engine, at the engine's defaults (on ``settings``' GPU)."""
    engine = get_engine(name)
    defaults = settings or EngineSettings()
    if defaults.gpu is not None and "gpu" not in engine.options:  # an engine with no --gpu is not given one
        from dataclasses import replace as with_

        defaults = with_(defaults, gpu=None)
    length = options.max_seq_len or max(d.max_seq_len for d in model.layers)
    plan = engine.configure(model, defaults, length)  # EngineRefused: the caller records it
    held = plan.footprint(length, Phase.DECODE)
    high_len, low_len = SLOPE_HIGH, SLOPE_HIGH - SLOPE_PERIOD
    high = engine.configure(model, defaults, high_len).footprint(high_len, Phase.DECODE).total_bytes
    low = engine.configure(model, defaults, low_len).footprint(low_len, Phase.DECODE).total_bytes
    fit = None
    pool_refused = None
    charge = None
    if limit_bytes is not None:
        try:
            from csa_plan.planner.budget.admission import engine_admits

            admits = engine_admits(plan, plan.size_pool(limit_bytes))  # the one admission rule (check's)
            fit, charge = admits["count"], admits["units_per_request"] * admits["unit_bytes"]
        except EngineRefused as exc:
            fit, pool_refused = 0, exc.refusal.message
    by_class = held.by_class()
    return CompareRow(
        profile=name, summary=engine.summary, per_request_bytes=held.total_bytes, by_class=by_class,
        bytes_per_token=Fraction(high - low, SLOPE_PERIOD),
        fixed_request_bytes=by_class.carry_bytes + by_class.index_carry_bytes + by_class.dense_ring_bytes,
        padding_bytes=held.padding_bytes, over_exact_bytes=held.total_bytes - exact_total,
        requests_that_fit=fit, kind="engine", startup_budget_bytes=plan.startup_budget().total_bytes,
        sources=engine.sources, limit_bytes=limit_bytes, pool_refused=pool_refused, charge_bytes=charge)


def compare(model: ModelSpec, options: PlanOptions, limit_bytes: int | None = None,
            profiles: tuple[str, ...] | None = None, engines: tuple[str, ...] | None = None,
            engine_limits: dict[str, int | None] | None = None,
            settings: EngineSettings | None = None) -> Comparison:
    """One row per profile and engine (all registered ones by default), ``exact`` as the reference.
    ``engine_limits`` gives an engine its own KV memory (its device budget) instead of ``limit_bytes``.

    A model with a refused layer gets no 'requests that fit' (None) from a profile or an engine:
    the totals leave the refused layers out, and a count from them would not be an answer.
    """
    if profiles is None and engines is None:
        names, engine_names = tuple(PROFILES), tuple(ENGINES)
    else:
        names, engine_names = profiles or (), engines or ()
    for name in names:
        get_profile(name)
    for name in engine_names:
        get_engine(name)
    exact_plan = plan_model(model, replace(options, layout="exact"))
    exact_total = exact_plan.per_request_per_device_bytes
    rows = []
    refused: tuple[int, ...] = ()
    for name in names:
        opts = replace(options, layout=name)
        plan = plan_model(model, opts)
        refused = tuple(layer.descriptor.layer_id for layer in plan.layers if layer.bytes is None)
        admitted = tuple(layer.descriptor.layer_id for layer in plan.layers if layer.bytes is not None)
        total = plan.per_request_per_device_bytes
        fit = None
        if limit_bytes is not None and not plan.refusals and total:
            fit = limit_bytes // total
        rows.append(CompareRow(
            profile=name,
            summary=get_profile(name).summary,
            per_request_bytes=total,
            by_class=plan.per_device,
            bytes_per_token=bytes_per_token(model, opts, admitted if refused else None),
            fixed_request_bytes=fixed_request_bytes(plan),
            padding_bytes=padding_bytes(plan),
            over_exact_bytes=total - exact_total,
            requests_that_fit=fit,
            sources=get_profile(name).sources,
            slope_layers=admitted,
            requests_unbounded=limit_bytes is not None and not plan.refusals and total == 0,
            limit_bytes=limit_bytes,
        ))
    engine_refusals = []
    for name in engine_names:
        try:
            limit = engine_limits.get(name, limit_bytes) if engine_limits else limit_bytes
            # A model the gate refuses gets no count from an engine either (the same rule as the profiles).
            rows.append(engine_row(name, model, options, exact_total, None if exact_plan.refusals else limit,
                                   settings))
        except EngineRefused as exc:
            engine_refusals.append(exc.refusal)
    return Comparison(model=model, options=options, limit_bytes=limit_bytes, rows=tuple(rows),
                      refused_layers=refused, engine_refusals=tuple(engine_refusals))


def context_lengths(low: int, high: int, points: int = 24) -> tuple[int, ...]:
    """Roughly geometric lengths from low to high inclusive, for the chart."""
    low = max(1, low)
    if high <= low:
        return (high,)
    out = {low, high}
    ratio = (high / low) ** (1 / (points - 1))
    for i in range(1, points - 1):
        out.add(min(high, max(low, round(low * ratio ** i))))
    return tuple(sorted(out))


def curves(model: ModelSpec, options: PlanOptions, lengths: tuple[int, ...],
           profiles: tuple[str, ...] | None = None) -> dict[str, tuple[int, ...]]:
    """Bytes per request per device at each length, one series per profile or engine
    (an engine's series: a decoding request at each length, the engine planned for the longest)."""
    names = profiles or tuple(PROFILES) + tuple(ENGINES)
    out = {}
    for name in names:
        if name in ENGINES:
            try:
                plan = get_engine(name).configure(model, EngineSettings(), max(lengths))
            except EngineRefused:
                continue
            out[name] = tuple(plan.footprint(n, Phase.DECODE).total_bytes for n in lengths)
        else:
            out[name] = tuple(plan_model(model, replace(options, layout=name, max_seq_len=n))
                              .per_request_per_device_bytes for n in lengths)
    return out
