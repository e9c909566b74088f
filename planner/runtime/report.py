"""The runtime replay's document: what one engine's scheduler did with a trace, for --json and the terminal.

Engine-neutral: it reads a ``RuntimeResult`` only. Pages/blocks in use per pool (peak, mean, each
pool at the total's peak), running and waiting, preemptions (SGLang: retractions) — count,
requests, most for one request, tokens recomputed —, prefix-cache hit tokens and rate, per-request
queue wait / time to first token / end-to-end (p50, p99, max), refusals, and the series the plot
draws (bucketed: max per bucket).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from csa_plan.planner.runtime.result import RuntimeResult

RUNTIME = "csa-plan/simulate-runtime/v1"
SERIES_POINTS = 60


def _pcts(values_ns: list[int]) -> dict[str, float | int | None]:
    import numpy as np

    if not values_ns:
        return {"count": 0, "p50_s": None, "p99_s": None, "max_s": None}
    a = np.asarray(values_ns, dtype=np.int64)
    return {"count": int(a.size), "p50_s": float(np.percentile(a, 50)) / 1e9,
            "p99_s": float(np.percentile(a, 99)) / 1e9, "max_s": int(a.max()) / 1e9}


def _series(res: "RuntimeResult", points: int) -> dict[str, Any]:
    import numpy as np

    s = res.series
    n = s.steps
    if n == 0:
        return {"end_s": [], "used": [], "running": [], "waiting": []}
    edges = np.linspace(0, n, min(points, n) + 1).astype(np.int64)
    idx = [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    return {"end_s": [int(s.end_ns[b - 1]) / 1e9 for _a, b in idx],
            "used": [[int(x) for x in s.used[a:b].max(axis=0)] for a, b in idx],
            "running": [int(s.running[a:b].max()) for a, b in idx],
            "waiting": [int(s.waiting[a:b].max()) for a, b in idx]}


def runtime_document(res: "RuntimeResult", *, engine: dict[str, Any], time: dict[str, float],
                     prefix_caching: bool, points: int = SERIES_POINTS) -> dict[str, Any]:
    import numpy as np

    s = res.series
    arrival = res.arrival_ns.tolist()
    n = len(arrival)
    admitted = [a for a in res.admitted_ns]
    waits = [a - arrival[i] for i, a in enumerate(admitted) if a >= 0 and i not in res.refused]
    ttft = [f - arrival[i] for i, f in enumerate(res.first_token_ns) if f >= 0]
    e2e = [f - arrival[i] for i, f in enumerate(res.finished_ns) if f >= 0]
    total = s.total_used if s.steps else np.zeros(0, dtype=np.int64)
    at = int(total.argmax()) if s.steps else -1
    pools = []
    for k, name in enumerate(res.pools):
        col = s.used[:, k] if s.steps else np.zeros(0, dtype=np.int64)
        usable = res.pool_units[k] if k < len(res.pool_units) else None
        pools.append({"pool": name, "usable_units": usable,
                      "peak_units": int(col.max()) if s.steps else 0,
                      "mean_units": float(col.mean()) if s.steps else 0.0,
                      "at_total_peak_units": int(col[at]) if s.steps else 0})
    pre = res.preemptions
    reasons: dict[str, int] = {}
    for why in res.refused.values():
        reasons[why] = reasons.get(why, 0) + 1
    span_ns = int(s.end_ns[-1]) - arrival[0] if s.steps and n else 0
    return {
        "schema": RUNTIME,
        "engine": engine,
        "time": time,
        "prefix_caching": prefix_caching,
        "requests": n,
        "finished": sum(1 for f in res.finished_ns if f >= 0),
        "refused": len(res.refused),
        "refused_reasons": reasons,
        "steps": s.steps,
        "makespan_s": span_ns / 1e9,
        "pools": pools,
        "peak_total_units": int(total.max()) if s.steps else 0,
        "peak_at_s": int(s.end_ns[at]) / 1e9 if s.steps else None,
        "usable_units": res.usable_units,
        "running": {"max": int(s.running.max()) if s.steps else 0,
                    "mean": float(s.running.mean()) if s.steps else 0.0},
        "waiting": {"max": int(s.waiting.max()) if s.steps else 0,
                    "mean": float(s.waiting.mean()) if s.steps else 0.0},
        "waited": sum(1 for w in waits if w > 0),
        "preemptions": {"count": int(sum(pre)), "requests": sum(1 for x in pre if x),
                        "max_for_one_request": max(pre) if pre else 0,
                        "tokens_recomputed": res.recomputed_tokens},
        "prefix_cache": {"hit_tokens": res.prefix_hit_tokens, "query_tokens": res.prefix_query_tokens,
                         "hit_rate": (res.prefix_hit_tokens / res.prefix_query_tokens
                                      if res.prefix_query_tokens else 0.0)},
        "queue_wait": _pcts(waits),
        "ttft": _pcts(ttft),
        "e2e": _pcts(e2e),
        "notes": list(res.notes),
        "series": _series(res, points),
    }
