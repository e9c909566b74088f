"""The ``csa-plan/sweep/v2`` document: the grid, what was skipped, the ranked results, the answer.

``SweepHead`` is the answer first (the verdict, the answer point with its devices, sustainable
rate and capacity answer, and how many points were feasible); the text renderer and the JSON
document both read it (``head`` and ``verdict``), so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from csa_plan.planner.schemas import SWEEP
from csa_plan.planner.reports.text import shown_path
from csa_plan.planner.sweep.spec import AXES as POINT_AXES


def _varying(points: list[dict[str, Any]]) -> list[str]:
    """The axes that take more than one value: what tells two rows apart."""
    return [a for a in POINT_AXES if len({repr(p[a]) for p in points}) > 1]


def _label(point: dict[str, Any], axes: list[str]) -> str:
    parts = []
    for a in axes:
        value = point[a]
        if a == "disaggregation":  # layout aggregated | layout 1P tp8 + 2D tp8
            parts.append(f"layout {value or 'aggregated'}")
            continue
        if point.get("disaggregation") and a in ("tp", "pp", "dp", "replicas"):
            continue  # each role names its shape (the layout)
        if a == "model" and isinstance(value, str) and "/" in value:
            value = value.rsplit("/", 1)[-1]
        missing = {"engine": "exact (no engine)", "step_time": "the spec's", "settings": "defaults"}.get(a, "model")
        if a == "settings" and value:
            value = " ".join(f"{k} {v}" for k, v in value.items())
        parts.append(f"{a} {value if value is not None else missing}")
    return ", ".join(parts) or "the only point"


def _model_info(ref: str) -> dict[str, Any]:
    from csa_plan.planner.reports.vocabulary import model_info
    from csa_plan.planner.sweep.evaluate import load_point_model

    spec = load_point_model(ref, None)  # cached: every point of the grid names one of a few models
    return model_info(spec.name, spec.source)


def _shared(point: dict[str, Any], r) -> dict[str, Any]:
    """The keys every document shares (planner/reports/vocabulary.py), per result."""
    from csa_plan.planner.reports.vocabulary import device_limit, waits

    wait_s, wait_ns = waits(p99_ns=r.wait_p99_ns, only_p99=True)
    return {"model_info": _model_info(point["model"]), "device_limit": device_limit(point["limit_bytes"]),
            "wait_s": wait_s, "wait_ns": wait_ns}


def _launch(p) -> dict[str, Any] | None:
    """The point as its engine is started (``engines/launch.py``): None for a point without a server."""
    from csa_plan.planner.engines.launch import launch_argv

    if p.engine is None:
        return None
    if p.disaggregation is not None:  # each role's command: launch.prefill, launch.decode
        from csa_plan.planner.engines.launch import disaggregated_launch

        roles = disaggregated_launch(p.engine, p.model, p.disaggregation, p.max_seq_len, p.engine_settings)
        return None if roles is None else {name: x.as_dict() for name, x in roles.items()}
    launch = launch_argv(p.engine, p.model, p.tp, p.dp, p.max_seq_len, p.engine_settings)
    return None if launch is None else launch.as_dict()


class SweepVerdict:
    ANSWERED = "answered"                  # some point meets every constraint: the first ranked (exit 0)
    NO_FEASIBLE_POINT = "no_feasible_point"  # none does (exit 3)


@dataclass(frozen=True)
class SweepHead:
    """The answer first: which deployment, at how many devices and what rate, and its capacity answer."""

    verdict: str
    exit_code: int
    name: str
    objective: str
    answer_key: str | None
    answer_label: str | None
    devices: int | None
    sustainable_rate_per_s: float | None
    sustainable_rate_scale: float | None
    rate_limited_by_memory: bool | None   # False: not limited by memory within this trace (no measured rate)
    limit_bytes: int | None               # the answer's state pool per device
    fit: dict[str, Any] | None            # the answer's capacity answer (budget/answer.py CapacityAnswer)
    feasible: int
    simulated: int
    points: int
    skipped: int
    launch: dict[str, Any] | None = None  # the answer as its engine is started (engines/launch.py)

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict,
                "head": {"verdict": self.verdict, "exit_code": self.exit_code, "name": self.name,
                         "objective": self.objective, "answer_key": self.answer_key,
                         "answer_label": self.answer_label, "devices": self.devices,
                         "sustainable_rate_per_s": self.sustainable_rate_per_s,
                         "sustainable_rate_scale": self.sustainable_rate_scale,
                         "rate_limited_by_memory": self.rate_limited_by_memory, "limit_bytes": self.limit_bytes,
                         "fit": self.fit, "feasible": self.feasible, "simulated": self.simulated,
                         "points": self.points, "skipped": self.skipped, "launch": self.launch}}


def sweep_head(report: dict[str, Any]) -> SweepHead:
    a = report["answer"]
    g = report["grid"]
    verdict = SweepVerdict.ANSWERED if a is not None else SweepVerdict.NO_FEASIBLE_POINT
    return SweepHead(verdict, report["exit_code"], report["spec"]["name"], report["spec"]["objective"],
                     None if a is None else a["key"], None if a is None else a["label"],
                     None if a is None else a["devices"], None if a is None else a["sustainable_rate_per_s"],
                     None if a is None else a["sustainable_rate_scale"],
                     None if a is None else a["rate_limited_by_memory"],
                     None if a is None else a["point"]["limit_bytes"], None if a is None else a["fit"],
                     g["feasible"], len(report["results"]), g["points"], g["skipped"],
                     None if a is None else a.get("launch"))


def sweep_report(spec, plan, ans, *, executor_name: str, elapsed_s: float, exit_code: int) -> dict[str, Any]:
    from csa_plan.planner.sweep.evaluate import point_capacity

    points = {p.key: p.as_dict() for p in spec.points}
    by_key = {p.key: p for p in spec.points}
    varying = _varying(list(points.values()))
    c = spec.context
    results = [{"point": points[r.key], "label": _label(points[r.key], varying), **r.report_dict(),
                **_shared(points[r.key], r), "fit": point_capacity(by_key[r.key]).as_dict(),
                "launch": _launch(by_key[r.key])}
               for r in ans.results]
    models = sorted({p.model for p in spec.points})
    by_key = {r["key"]: r for r in results}
    ran = len(ans.results) - len(plan.resumed)
    report: dict[str, Any] = {
        "schema": SWEEP,
        "model_info": _model_info(models[0]) if len(models) == 1 else None,
        "spec": {"source": spec.source, "name": spec.name, "objective": spec.objective.value,
                 "constraints": {"zero_refusals": c.constraints.zero_refusals,
                                 "wait_p99_max_s": c.constraints.wait_p99_max_s,
                                 "min_mean_utilization": c.constraints.min_mean_utilization,
                                 "ttft_p99_max_s": c.constraints.ttft_p99_max_s,
                                 "tpot_p99_max_ms": c.constraints.tpot_p99_max_ms},
                 "search": {"rel_tol": c.search.rel_tol, "min_scale": c.search.min_scale,
                            "max_scale": c.search.max_scale},
                 "time": {"prefill_tok_s": c.prefill_tok_s, "tpot_ms": c.tpot_ms, "step_time": c.step_time},
                 "rate_rule": c.rate_rule,
                 "varying_axes": varying},
        "workload": {"source": shown_path(c.workload), "requests": plan.bounds.requests, "min_tokens": plan.bounds.min_tokens,
                     "max_tokens": plan.bounds.max_tokens, "base_rate_per_s": plan.bounds.base_rate_per_s},
        "grid": {"points": len(spec.points), "skipped": len(plan.skipped), "resumed": len(plan.resumed),
                 "ran": ran, "feasible": len(ans.ranked)},
        "skipped": {"counts": dict(plan.skip_counts()),
                    "points": [{"key": s.key, "label": _label(points[s.key], varying), "reason": s.reason.value,
                                "detail": s.detail} for s in plan.skipped]},
        "results": results,
        "ranked": [r.key for r in ans.ranked],
        "pareto_front": [r.key for r in ans.front],
        "not_limited_by_memory": [r.key for r in ans.unbounded],
        "answer": by_key[ans.best.key] if ans.best else None,
        "executor": executor_name,
        "elapsed_s": elapsed_s,
        "points_per_s": (ran / elapsed_s) if elapsed_s > 0 and ran else None,
        "exit_code": exit_code,
    }
    report.update(sweep_head(report).as_dict())
    return report
