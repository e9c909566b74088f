"""How many requests fit, the longest context that fits, and what would fit instead."""

from __future__ import annotations

from dataclasses import dataclass, replace

from csa_plan.planner.descriptor import MAX_SEQ_LEN_LIMIT
from csa_plan.planner.model import ModelSpec
from csa_plan.planner.plan import ModelPlan, PlanOptions, plan_model


@dataclass(frozen=True)
class DeviceFit:
    """How many requests of one size a device limit holds, and the longest context that fits."""

    limit_bytes: int
    per_request_bytes: int
    concurrency: int
    requests_that_fit: int
    fits: bool
    needed_bytes: int  # concurrency x per-request bytes
    longest_context: int | None  # largest max_seq_len at which `concurrency` requests fit

    def as_dict(self) -> dict[str, object]:
        return {
            "limit_bytes": self.limit_bytes,
            "per_request_bytes": self.per_request_bytes,
            "concurrency": self.concurrency,
            "requests_that_fit": self.requests_that_fit,
            "fits": self.fits,
            "needed_bytes": self.needed_bytes,
            "longest_context": self.longest_context,
        }


def capacity(model: ModelSpec, plan: ModelPlan, limit_bytes: int, concurrency: int = 1) -> DeviceFit:
    per_request = plan.per_request_per_device_bytes
    fit = limit_bytes // per_request if per_request else 0
    needed = per_request * concurrency
    return DeviceFit(
        limit_bytes=limit_bytes,
        per_request_bytes=per_request,
        concurrency=concurrency,
        requests_that_fit=fit,
        fits=needed <= limit_bytes,
        needed_bytes=needed,
        longest_context=longest_context(model, plan.options, limit_bytes, concurrency),
    )


def longest_context(model: ModelSpec, options: PlanOptions, limit_bytes: int, concurrency: int) -> int | None:
    """Bisect max_seq_len: bytes never shrink as the context grows, so the answer is unique.

    Only contexts at which every layer the plan admitted stays admitted are considered
    (a window longer than the context is a refusal, not a fit).
    """
    base = plan_model(model, options)

    def ok(length: int) -> bool:
        p = plan_model(model, replace(options, max_seq_len=length))
        if len(p.refusals) > len(base.refusals):
            return False
        return p.per_request_per_device_bytes * concurrency <= limit_bytes

    low = max((d.window for d in (l.descriptor for l in base.layers)), default=1)
    low = max(low, 1)
    if low > MAX_SEQ_LEN_LIMIT or not ok(low):
        return None
    high = MAX_SEQ_LEN_LIMIT
    if ok(high):
        return high
    while high - low > 1:  # invariant: ok(low), not ok(high)
        mid = (low + high) // 2
        if ok(mid):
            low = mid
        else:
            high = mid
    return low
