"""A budget as a JSON-ready mapping (the ``budget`` key of check, compare, simulate and sweep)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from csa_plan.planner.budget.device import Budget


def budget_document(b: Budget) -> dict[str, Any]:
    w = b.weights
    dw = b.device_weights
    p = b.request.placement
    binding = b.binding
    return {
        "engine": b.engine,
        "deployment": {"tp": p.tp, "pp": p.pp, "dp": p.dp, "ep": dw.ep if dw else p.ep,
                       "moe_tp": dw.moe_tp if dw else None, "gpus": p.device_count, "mtp_weights": b.mtp},
        "card_bytes": b.card_bytes,
        "model_weights": None if w is None else {
            "source": w.source.value,
            "total_bytes": w.total_bytes,
            "tensors": w.tensor_count,
            "elements": w.element_count,
            "inventory_bytes": w.inventory.nbytes if w.inventory else None,
            "inventory_delta_bytes": w.inventory_delta_bytes,
            "note": w.note,
        },
        "device_weights": None if dw is None else {
            "rules": dw.engine,
            "sources": list(dw.sources),
            "all_devices_bytes": dw.all_devices_bytes,
            "per_stage": [{"stage": s.stage, "devices": s.devices, "bytes": s.nbytes,
                           "by_part": {part.value: n for part, n in s.by_part}} for s in dw.stages],
        },
        "per_device_weights_bytes": [s.weights_bytes for s in b.stages],
        "binding_stage": binding.stage,
        "usable_bytes": binding.usable_bytes,
        "weights_bytes": binding.weights_bytes,
        "reserve_bytes": binding.reserve_bytes,
        "kv_memory_bytes": b.kv_memory_bytes,
        "kv_memory_given": b.request.kv_memory_bytes is not None,  # --kv-memory replaces usable - weights - reserves
        "weights_fit": b.fits,
        "estimates": any(s.estimate for s in binding.steps),
        "resolved_settings": b.resolved,
        "stages": [s.as_dict() for s in b.stages],
        "smallest_fitting": list(b.smallest_fitting),
        "smallest_fitting_searched": b.searched,
        "calibration": b.calibration.as_dict() if b.calibration is not None else None,
        "engram": None if b.engram is None else b.engram.as_dict(),
        "host": None if b.host is None else b.host.as_dict(),
    }
