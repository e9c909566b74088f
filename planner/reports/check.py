"""The versioned machine-readable form of a check (``--json``), built from plan objects.

Schema ``csa-plan/check/v1`` is documented in docs/json-schemas.md; keys are only ever added.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from csa_plan.planner.capacity import DeviceFit
from csa_plan.planner.descriptor import Descriptor
from csa_plan.planner.layout import LayerKind
from csa_plan.planner.memory import DeviceBudget
from csa_plan.planner.plan import LayerPlan, ModelPlan

from csa_plan.planner.reports.schemas import CHECK as CHECK_SCHEMA


class Verdict:
    ADMITTED = "admitted"
    REFUSED = "refused"
    DOES_NOT_FIT = "does_not_fit"


def verdict(plan: ModelPlan, cap: DeviceFit | None) -> str:
    if plan.refusals:
        return Verdict.REFUSED
    if cap is not None and not cap.fits:
        return Verdict.DOES_NOT_FIT
    return Verdict.ADMITTED


def descriptor_dict(d: Descriptor) -> dict[str, Any]:
    out = asdict(d)
    out["present_edges"] = sorted(e.value for e in d.present_edges)
    return out


def layer_dict(layer: LayerPlan) -> dict[str, Any]:
    d = layer.descriptor
    return {
        "layer_id": d.layer_id,
        "kind": layer.kind.value,
        "is_mtp": d.is_mtp,
        "compression_ratio": d.compression_ratio,
        "admitted": layer.admitted,
        "refusal_types": [r.type.value for r in layer.refusals],
        "bytes": layer.bytes.as_dict() if layer.bytes is not None else None,
        "descriptor": descriptor_dict(d),
    }


def layer_groups(plan: ModelPlan) -> list[dict[str, Any]]:
    """Identical layers collapse into one row: same kind, MTP flag, bytes and refusal types."""
    groups: dict[tuple, list[LayerPlan]] = {}
    for layer in plan.layers:
        key = (layer.kind, layer.descriptor.is_mtp, layer.bytes, tuple(r.type for r in layer.refusals))
        groups.setdefault(key, []).append(layer)
    out = []
    for (kind, is_mtp, group_bytes, types), layers in groups.items():
        out.append({
            "kind": kind.value,
            "is_mtp": is_mtp,
            "count": len(layers),
            "layer_ids": [l.descriptor.layer_id for l in layers],
            "admitted": not types,
            "refusal_types": [t.value for t in types],
            "bytes_per_group": group_bytes.as_dict() if group_bytes is not None else None,
            "bytes_all": group_bytes.scaled(len(layers)).as_dict() if group_bytes is not None else None,
        })
    return out


def effective(plan: ModelPlan, field: str) -> Any:
    values = {getattr(l.descriptor, field) for l in plan.layers}
    return values.pop() if len(values) == 1 else sorted(values, key=str)


def check_report(plan: ModelPlan, budget: DeviceBudget | None, cap: DeviceFit | None, exit_code: int) -> dict[str, Any]:
    o = plan.options
    m = plan.model
    from csa_plan.planner.reports.vocabulary import device_limit, model_info

    report = {
        "schema": CHECK_SCHEMA,
        "model": {
            "name": m.name,
            "source": m.source,
            "num_main_layers": m.num_main_layers,
            "num_mtp_layers": m.num_mtp_layers,
            "compress_ratios": list(m.compress_ratios),
            "notes": list(m.notes),
        },
        "options": {
            "gate": o.gate.value,
            "tp": o.tp,
            "query_len": o.query_len,
            "max_seq_len": effective(plan, "max_seq_len"),
            "batch": effective(plan, "batch"),
            "cache_format": effective(plan, "cache_format"),
            "window": effective(plan, "window"),
        },
        "counts": {k.value.lower(): plan.count(k) for k in LayerKind},
        "verdict": verdict(plan, cap),
        "exit_code": exit_code,
        "refusals": [r.as_dict() for r in plan.refusals],
        "groups": layer_groups(plan),
        "layers": [layer_dict(l) for l in plan.layers],
        "totals": {
            "per_request_per_device": plan.per_device.as_dict(),
            "devices": o.tp,
            "per_request_all_devices_bytes": plan.all_devices_bytes,
            "refused_layers_excluded": sorted({r.layer for r in plan.refusals if r.layer is not None}),
        },
        "memory": None if budget is None else {
            "device_memory_bytes": budget.memory_bytes,
            "reserved_bytes": budget.reserved_bytes,
            **(cap.as_dict() if cap else {}),
        },
    }
    if report["memory"] is not None:
        report["memory"].setdefault("limit_bytes", budget.limit_bytes)
        report["memory"].setdefault("unlimited", False)
    report["model_info"] = model_info(m.name, m.source)
    report["device_limit"] = device_limit(budget.limit_bytes if budget is not None else None)
    return report

