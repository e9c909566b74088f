"""The ``csa-plan/simulate/v1`` document: one dict for --json and for the terminal."""

from __future__ import annotations

from typing import Any

from csa_plan.planner.schemas import SIMULATE
from csa_plan.planner.reports.text import id_runs
from csa_plan.planner.reports.vocabulary import device_limit, model_info, waits
from csa_plan.planner.workloads.formats import trace_document

MAX_TIERS_LISTED = 64


def seconds(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e9


def simulate_report(wl, spec, config, scn, result, *, capacity=None, verified=None, plan_refusals=(),
                    exit_code: int, split=None) -> dict[str, Any]:
    p = config.placement
    report: dict[str, Any] = {
        "schema": SIMULATE,
        "workload": {"source": wl.source, "requests": len(wl), "classes": list(wl.class_names), "notes": list(wl.notes),
                     **trace_document(wl.trace)},
        "model": {"name": spec.name, "source": spec.source, "layout": config.layout},
        "deployment": {"tp": p.tp, "pp": p.pp, "dp": p.dp, "router": p.router.value, "devices": p.device_count},
        "memory": {"limit_bytes": config.limit_bytes, "unlimited": config.limit_bytes == 0},
        "reserve": {"mode": config.reserve.value, "bucket": config.bucket},
        "policy": config.policy.value,
        "time": {"prefill_tok_s": config.time.prefill_tok_s, "tpot_ms": config.time.tpot_ms,
                 "rate_scale": config.time.rate_scale},
        "plan_refusals": [r.as_dict() for r in plan_refusals],
        "exit_code": exit_code,
        "engine": None,
    }
    if getattr(config, "engine", None) is not None and scn is not None:
        report["engine"] = config.engine.describe(spec, p.pp, config.limit_bytes, scn.max_seq_len)
        report["engine"]["max_running"] = config.max_running or None
    report["model_info"] = model_info(spec.name, spec.source)
    report["device_limit"] = device_limit(config.limit_bytes)
    if split is not None:
        report["deployment"]["stage_split"] = split.describe()
        report["deployment"]["stage_layers"] = [id_runs(list(ids)) for ids in split.layers]
    if scn is not None:
        report["reserve"]["max_seq_len"] = scn.max_seq_len
        report["reserve"]["tiers"] = [
            {"tokens": tokens, "per_device_bytes_by_stage": [b.total_bytes for b in stages]}
            for tokens, stages in list(zip(scn.tier_tokens, scn.bundles))[:MAX_TIERS_LISTED]]
        report["reserve"]["tier_count"] = len(scn.tier_tokens)
    if capacity is not None:
        base = wl.base_rate_per_s()
        report["capacity"] = {
            "rate_scale": capacity.rate_scale, "at_least": capacity.capped,
            "rate_per_s": capacity.rate_scale * base if capacity.rate_scale is not None and base else None,
            "floor_rate_scale": capacity.floor, "floor": capacity.floor_reason,
            "probes": [{"rate_scale": s, "ok": ok} for s, ok in capacity.probes],
            "criterion": "no OutOfMemory refusal" + ("" if config.policy.value == "refuse" else ", wait p99 <= --max-wait")
                         + " in steady state",
            **capacity.steady_dict(),
        }
    if result is None:
        return report
    report["requests"] = {
        "total": result.requests, "admitted": result.admitted, "refused": result.refused, "queued": result.queued,
        "refusals": dict(result.refusals),
        "by_class": [{"class": n, "admitted": a, "refused": r} for n, a, r in result.by_class],
    }
    report["wait_s"], report["wait_ns"] = waits(result.wait_p50_ns, result.wait_p99_ns, result.wait_max_ns)
    report["peak"] = {"bytes": result.peak_bytes, "at_s": seconds(result.peak_ns), "at_ns": result.peak_ns,
                      "by_class": result.at_peak.as_dict(), "class_max": result.class_max.as_dict(),
                      "in_flight": result.peak_in_flight}
    devices = []
    for d in result.devices:
        mean, peak_util = result.utilization(d)
        devices.append({
            "device": d.device, "stage": p.stage_of(d.device), "replica": d.device // p.devices_per_replica,
            "limit_bytes": d.limit_bytes, "peak_bytes": d.peak_bytes, "peak_at_s": seconds(d.peak_ns),
            "peak_at_ns": d.peak_ns, "by_class_at_peak": d.at_peak.as_dict(), "byte_seconds": d.byte_ns / 1e9,
            "mean_utilization": mean, "peak_utilization": peak_util, "final_bytes": d.final.total_bytes,
        })
    report["devices"] = devices
    report["span_s"] = seconds(result.span_ns)
    report["baseline_ok"] = result.baseline_ok
    report["verified_against_ledger_replay"] = verified
    return report


def runtime_document(wl, spec, config, plan, sizing, code) -> dict[str, Any]:
    """The head of a ``simulate --engine`` document whose engine runtime is replayed step by step (the
    replay's own sections are added by the caller)."""
    p = config.placement
    engine = None
    if plan is not None:
        e = plan.engine
        engine = {"name": e.name, "engine": e.engine_name, "version": e.version,
                  "settings": [s.as_dict() for s in plan.settings], "unit_bytes": plan.unit_bytes,
                  "pool": sizing.as_dict() if sizing else None}
    return {
        "schema": SIMULATE,
        "workload": {"source": wl.source, "requests": len(wl), "classes": list(wl.class_names),
                     "notes": list(wl.notes), **trace_document(wl.trace)},
        "model": {"name": spec.name, "source": spec.source, "layout": config.layout},
        "deployment": {"tp": p.tp, "pp": p.pp, "dp": p.dp, "router": p.router.value, "devices": p.device_count},
        "memory": {"limit_bytes": config.limit_bytes, "unlimited": config.limit_bytes == 0},
        "reserve": None,
        "policy": None,
        "time": {"prefill_tok_s": config.time.prefill_tok_s, "tpot_ms": config.time.tpot_ms,
                 "rate_scale": config.time.rate_scale,
                 "step_model": "a step lasts max(tpot_ms / 1000, prefill tokens in it / prefill_tok_s) s"},
        "plan_refusals": [],
        "exit_code": int(code),
        "engine": engine,
        "model_info": model_info(spec.name, spec.source),
    }


def side_by_side_document(first: dict[str, Any], docs: list[dict[str, Any]], code: int) -> dict[str, Any]:
    """Several engines on one trace: the shared head of the first engine that started, then each engine's
    own document (or its refusal) in the order named."""
    return {"schema": SIMULATE, "workload": first["workload"], "model": first["model"],
            "deployment": first["deployment"], "side_by_side": docs, "exit_code": int(code)}
