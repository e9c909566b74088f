"""Requests that fit a device budget's state pool, per pipeline stage, in the ledger's accounting."""

from __future__ import annotations

from csa_plan.planner.budget.device import Budget
from csa_plan.planner.budget.deployment import ledger_budget
from csa_plan.planner.capacity import DeviceFit, capacity
from csa_plan.planner.memory import DeviceBudget
from csa_plan.planner.model import ModelSpec
from csa_plan.planner.plan import ModelPlan


def budget_fit(spec: ModelSpec, plan: ModelPlan, device: Budget, concurrency: int) -> tuple[DeviceBudget | None,
                                                                                           DeviceFit | None]:
    """The ledger limit and the fit. With one stage: ``capacity`` on the state pool. With pipeline
    stages: each stage holds only its layers' state, so the requests that fit are the least over
    stages of pool // that stage's bytes per request (no longest-context search then). None, None
    when the weights do not fit: there is no pool."""
    limit = ledger_budget(device)
    if limit is None:
        return limit, None
    if len(device.stages) == 1 or plan.refusals:  # a refused plan gets no count (capacity says why)
        return limit, capacity(spec, plan, limit.limit_bytes, concurrency)
    if any(d.sharing is not None for d in spec.layers):  # shared state: no stage boundary inside a group
        from csa_plan.planner.sharing import require_whole_groups

        require_whole_groups(spec.layers, [s.layers for s in device.stages])
    fits = []
    num_main = spec.num_main_layers
    for stage in device.stages:
        layers = set(stage.layers)
        if stage.stage == len(device.stages) - 1:
            layers |= set(range(num_main, len(plan.layers)))  # the contract keeps MTP state on the last stage
        per = sum(l.bytes.total_bytes for i, l in enumerate(plan.layers) if i in layers and l.bytes is not None)
        fits.append((stage.kv_memory_bytes // per if per else None, per, stage.kv_memory_bytes))
    n, per, kv = min(fits, key=lambda f: (f[0] is None, f[0] or 0))  # None: a stage with 0 bytes holds any number
    return limit, DeviceFit(limit_bytes=kv, per_request_bytes=per, concurrency=concurrency, requests_that_fit=n,
                            fits=per * concurrency <= kv, needed_bytes=per * concurrency, longest_context=None)
