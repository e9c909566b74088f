"""The ``csa-plan/plan/v1`` document: the fewest GPUs per card, the winning shape, its launch command,
and the shapes that lose with why."""

from __future__ import annotations

from typing import Any

from csa_plan.planner.schemas import PLAN


def _shape(p: Any, r: Any) -> dict[str, Any]:
    from csa_plan.planner.engines.launch import launch_argv

    rt = r.runtime
    if p.disaggregation is not None:  # each role's command (answer.launch.prefill, answer.launch.decode)
        from csa_plan.planner.engines.launch import disaggregated_launch

        roles = disaggregated_launch(p.engine, p.model, p.disaggregation, p.max_seq_len, p.engine_settings)
        launch_doc = None if roles is None else {name: x.as_dict() for name, x in roles.items()}
    else:
        launch = None if p.engine is None else launch_argv(p.engine, p.model, p.tp, p.dp, p.max_seq_len,
                                                          p.engine_settings, ep=p.ep, replicas=p.replicas)
        launch_doc = None if launch is None else launch.as_dict()
    return {"device": p.device, "engine": p.engine, "layout": p.layout_label, "tp": p.tp, "dp": p.dp,
            "devices": p.devices, "disaggregation": r.disaggregation,
            "settings": dict(p.settings) or None, "expert_parallel": p.expert_parallel, "replicas": p.replicas,
            "feasible": r.feasible, "violations": list(r.violations), "steady": r.steady,
            "ttft_p99_s": None if rt is None else rt.ttft_p99_s, "tpot_p99_s": None if rt is None else rt.tpot_p99_s,
            "wait_p99_s": None if r.wait_p99_ns is None else r.wait_p99_ns / 1e9,
            "step_time": None if rt is None else rt.step_time, "key": p.key,
            "launch": launch_doc}


def plan_report(req: Any, spec: Any, triage: Any, results: list[tuple[Any, Any]], requests: int) -> dict[str, Any]:
    from csa_plan.planner.steady import RULE

    shapes = [_shape(p, r) for p, r in results]
    cards = []
    for device in req.devices:
        mine = [s for s in shapes if s["device"] == device]
        feasible = sorted((s for s in mine if s["feasible"]),
                          key=lambda s: (s["devices"], s["tpot_p99_s"] or 0.0, s["ttft_p99_s"] or 0.0))
        best = feasible[0] if feasible else None
        losers = [s for s in mine if s is not best]
        cards.append({"device": device, "answer": best, "devices": None if best is None else best["devices"],
                      "runners_up": losers})
    answered = [c for c in cards if c["answer"] is not None]
    answer = min(answered, key=lambda c: (c["devices"], req.devices.index(c["device"])))["answer"] if answered else None
    return {
        "schema": PLAN,
        "question": {"model": req.model, "rate_per_s": req.rate_per_s, "isl": req.isl, "osl": req.osl,
                     "ttft_p99_max_s": req.ttft_p99_s, "tpot_p99_max_s": req.tpot_p99_s,
                     "wait_p99_max_s": req.wait_p99_s, "devices": list(req.devices), "engines": list(req.engines),
                     "tp": list(req.tps), "max_dp": req.max_dp, "step_time": req.step_time,
                     "settings": dict(req.settings) or None, "disaggregated": req.disaggregated},
        "workload": {"requests": requests, "arrivals": f"Poisson at {req.rate_per_s:g} req/s (seed {req.seed})",
                     "rate_rule": RULE},
        "skipped": [{"key": s.key, "reason": s.reason.value, "detail": s.detail} for s in triage.skipped],
        "cards": cards,
        "answer": answer,
        "evaluated": len(results),
        "grid_points": len(spec.points),
    }
