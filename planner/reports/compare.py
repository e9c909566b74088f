"""The ``csa-plan/compare/v1`` document: one row per layout profile."""

from __future__ import annotations

from typing import Any

from csa_plan.planner.engines.compare import Comparison
from csa_plan.planner.plan import apply_options
from csa_plan.planner.reports.schemas import COMPARE


def comparison_report(c: Comparison) -> dict[str, Any]:
    """The csa-plan/compare/v1 JSON document."""
    o = c.options
    lengths = sorted({d.max_seq_len for d in apply_options(c.model, o)})
    from csa_plan.planner.reports.vocabulary import device_limit, model_info

    return {
        "model_info": model_info(c.model.name, c.model.source),
        "device_limit": device_limit(c.limit_bytes),
        "schema": COMPARE,
        "model": {"name": c.model.name, "source": c.model.source},
        "options": {"max_seq_len": lengths[0] if len(lengths) == 1 else lengths, "batch": o.batch, "query_len": o.query_len, "tp": o.tp,
                    "gate": o.gate.value, "window": o.window, "cache_format": o.cache_format},
        "limit_bytes": c.limit_bytes,
        "refused_layers": list(c.refused_layers),
        "engine_refusals": [r.as_dict() for r in c.engine_refusals],
        "profiles": [r.as_dict() for r in c.rows],
    }
