"""The runtime replay's report (``simulate --engine`` with a runtime-modelled engine): typed, then a dict.

``runtime_report`` condenses a ``RuntimeResult`` into frozen values: preemptions, the
prefix cache, units in use against the pool (peak, mean over steps, per pool at the
peak), running and waiting, per-request queue wait / time to first token / end-to-end,
refusals, and a downsampled series for the plot (from the replay's bounded step buckets,
``result.StepSeries``). ``as_dict`` is the ``runtime`` section
of the ``csa-plan/simulate/v1`` document.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from csa_plan.planner.replay.result import RuntimeResult

SERIES_POINTS = 120


@dataclass(frozen=True)
class Quantiles:
    count: int
    p50_s: float | None
    p99_s: float | None
    max_s: float | None
    p90_s: float | None = None
    mean_s: float | None = None


@dataclass(frozen=True)
class Preemptions:
    count: int
    requests: int
    most_for_one_request: int
    tokens_recomputed: int


@dataclass(frozen=True)
class PrefixCache:
    enabled: bool
    hit_tokens: int
    queried_tokens: int

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0


@dataclass(frozen=True)
class PoolUse:
    name: str
    at_peak: int
    peak: int
    usable: int | None = None  # the pool's own size, where the runtime keeps pools apart (SGLang's two)


@dataclass(frozen=True)
class Occupancy:
    unit: str
    usable_units: int
    peak_units: int
    mean_units: float
    pools: tuple[PoolUse, ...]
    peak_running: int
    mean_running: float
    peak_waiting: int
    mean_waiting: float


@dataclass(frozen=True)
class RuntimeReport:
    engine: str
    preemption_word: str
    modelled: tuple[str, ...]
    requests: int
    served: int
    refused: tuple[tuple[str, int], ...]  # (reason, requests)
    steps: int
    makespan_s: float
    preemptions: Preemptions
    prefix_cache: PrefixCache
    occupancy: Occupancy
    queue_wait: Quantiles
    ttft: Quantiles
    e2e: Quantiles
    series: dict[str, list]
    tpot: Quantiles = Quantiles(0, None, None, None)  # per request: (finished - first token) / (output - 1)
    output_tokens: int = 0  # served requests' output tokens
    output_tok_s_per_gpu: float | None = None  # output_tokens / makespan / GPUs
    step_time: dict[str, Any] | None = None  # the step-time source (``StepTime.as_dict``)

    @property
    def headline(self) -> str:
        p = self.preemptions
        line = (f"{self.engine} would {self.preemption_word} {p.count:,} time{'s' if p.count != 1 else ''}; "
                f"{p.requests:,} request{'s' if p.requests != 1 else ''} recomputed")
        if p.count:
            line += f" ({p.tokens_recomputed:,} tokens, at most {p.most_for_one_request} times for one request)"
        return line

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["headline"] = self.headline
        d["prefix_cache"]["hit_rate"] = self.prefix_cache.hit_rate
        d["refused"] = [{"reason": r, "requests": n} for r, n in self.refused]
        return d


def _quantiles(values_ns) -> Quantiles:
    import numpy as np

    v = np.asarray(values_ns, dtype=np.int64)
    if not len(v):
        return Quantiles(0, None, None, None)
    q = np.quantile(v, [0.5, 0.99, 0.9])
    return Quantiles(int(len(v)), float(q[0]) / 1e9, float(q[1]) / 1e9, float(v.max()) / 1e9, float(q[2]) / 1e9,
                     float(v.mean()) / 1e9)


quantiles = _quantiles  # the public name (disaggregation's per-part figures)


def _series(res: "RuntimeResult", points: int) -> dict[str, list]:
    import numpy as np

    s = res.series
    if not s.buckets:
        return {"t_s": [], "units": [], "running": [], "waiting": []}
    idx = np.unique(np.linspace(0, s.buckets - 1, min(points, s.buckets)).astype(np.int64))
    total = s.total_used
    # every point shows the largest value since the previous point: peaks survive downsampling
    edges = np.concatenate([[0], idx[1:]])
    peak = np.maximum.reduceat(total, edges)
    run = np.maximum.reduceat(s.running, edges)
    wait = np.maximum.reduceat(s.waiting, edges)
    t0 = int(res.arrival_ns[0]) if len(res.arrival_ns) else 0
    return {"t_s": [(int(s.end_ns[i]) - t0) / 1e9 for i in idx], "units": peak.tolist(), "running": run.tolist(),
            "waiting": wait.tolist()}


def runtime_report(res: "RuntimeResult", *, caching: bool, unit: str = "block", points: int = SERIES_POINTS,
                   output_tokens=None, devices: int = 1, step_time: dict[str, Any] | None = None) -> RuntimeReport:
    """``output_tokens`` (per request, the trace's) gives TPOT and output tokens/s over ``devices`` GPUs."""
    import numpy as np

    arrival = np.asarray(res.arrival_ns, dtype=np.int64)
    admitted = np.asarray(res.admitted_ns, dtype=np.int64)
    first = np.asarray(res.first_token_ns, dtype=np.int64)
    done = np.asarray(res.finished_ns, dtype=np.int64)
    pre = np.asarray(res.preemptions, dtype=np.int64)
    served = done >= 0
    reasons: dict[str, int] = {}
    for reason in res.refused.values():
        reasons[reason] = reasons.get(reason, 0) + 1
    s = res.series
    total = s.total_used
    if s.buckets:  # every figure exact over every step, whatever the series' bucket width
        k = int(np.argmax(total))
        pools = tuple(PoolUse(name, int(s.used[k, i]), int(s.pool_peak[i]),
                              res.pool_units[i] if i < len(res.pool_units) else None)
                      for i, name in enumerate(res.pools))
        mean_used, mean_running, mean_waiting = s.means()
        occ = Occupancy(unit, res.usable_units, int(total[k]), mean_used, pools, int(s.running.max()),
                        mean_running, int(s.waiting.max()), mean_waiting)
        makespan = (int(s.end_ns[-1]) - int(arrival[0])) / 1e9
    else:
        occ = Occupancy(unit, res.usable_units, 0, 0.0, tuple(PoolUse(n, 0, 0) for n in res.pools), 0, 0.0, 0, 0.0)
        makespan = 0.0
    return RuntimeReport(
        engine=res.label, preemption_word=res.preemption_word, modelled=res.notes, requests=int(len(arrival)),
        served=int(served.sum()),
        refused=tuple(sorted(reasons.items())), steps=s.steps, makespan_s=makespan,
        preemptions=Preemptions(int(pre.sum()), int((pre > 0).sum()), int(pre.max()) if len(pre) else 0,
                                int(res.recomputed_tokens)),
        prefix_cache=PrefixCache(caching, int(res.prefix_hit_tokens), int(res.prefix_query_tokens)),
        occupancy=occ,
        queue_wait=_quantiles((admitted - arrival)[admitted >= 0]),
        ttft=_quantiles((first - arrival)[first >= 0]),
        e2e=_quantiles((done - arrival)[served]),
        series=_series(res, points),
        **_latency(first, done, served, output_tokens, makespan, devices),
        step_time=step_time,
    )


@dataclass(frozen=True)
class WindowFigures:
    """The requests that arrived in a steady-state window (``planner/steady.py``): what the rate
    criterion (``serve.sustains``) reads, measured on them alone."""

    requests: int
    served: int
    refused: tuple[tuple[str, int], ...]
    queue_wait: Quantiles
    ttft: Quantiles
    tpot: Quantiles


def window_figures(res: "RuntimeResult", output_tokens, start_ns: int, end_ns: int) -> WindowFigures:
    """Queue wait, TTFT and TPOT of the requests arriving in (start_ns, end_ns]."""
    import numpy as np

    arrival = np.asarray(res.arrival_ns, dtype=np.int64)
    inside = (arrival > start_ns) & (arrival <= end_ns)
    admitted = np.asarray(res.admitted_ns, dtype=np.int64)[inside]
    first = np.asarray(res.first_token_ns, dtype=np.int64)[inside]
    done = np.asarray(res.finished_ns, dtype=np.int64)[inside]
    a = arrival[inside]
    served = done >= 0
    reasons: dict[str, int] = {}
    for i, reason in res.refused.items():
        if start_ns < int(arrival[i]) <= end_ns:
            reasons[reason] = reasons.get(reason, 0) + 1
    tpot = _latency(first, done, served, np.asarray(output_tokens)[inside], 0.0, 1).get("tpot", Quantiles(0, None, None, None))
    return WindowFigures(int(inside.sum()), int(served.sum()), tuple(sorted(reasons.items())),
                         _quantiles((admitted - a)[admitted >= 0]), _quantiles((first - a)[first >= 0]), tpot)


def _latency(first, done, served, output_tokens, makespan_s: float, devices: int) -> dict[str, Any]:
    """TPOT per request (its inter-token latency: the time after its first token over the tokens after it)
    and output tokens/s per GPU."""
    import numpy as np

    if output_tokens is None:
        return {}
    out = np.asarray(output_tokens, dtype=np.int64)
    many = served & (out >= 2) & (first >= 0)
    tpot = (done[many] - first[many]) / (out[many] - 1)
    total = int(out[served].sum())
    rate = total / makespan_s / max(1, devices) if makespan_s > 0 else None
    return {"tpot": _quantiles(np.round(tpot).astype(np.int64)), "output_tokens": total, "output_tok_s_per_gpu": rate}
