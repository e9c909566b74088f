"""How many requests fit, the longest context that fits, and what would fit instead."""

from __future__ import annotations

from dataclasses import replace

from csa_plan.planner.bisection import largest_passing
from csa_plan.planner.descriptor import MAX_SEQ_LEN_LIMIT
from csa_plan.planner.model import ModelSpec
from csa_plan.planner.plan import ModelPlan, PlanOptions, plan_model
from csa_plan.planner.record import record


@record
class DeviceFit:
    """The memory answer of ``check``. A refused model gets none: its counts are None and
    ``no_answer`` says why (a count from the layers that happen to be admitted would
    describe a model nobody can run)."""

    limit_bytes: int
    per_request_bytes: int
    concurrency: int
    requests_that_fit: int | None  # None: no answer, or unbounded (0 bytes per request)
    fits: bool | None  # None: no answer (the model is refused)
    needed_bytes: int | None  # concurrency x per-request bytes
    longest_context: int | None  # largest max_seq_len at which `concurrency` requests fit
    no_answer: str | None = None

    @property
    def answered(self) -> bool:
        return self.no_answer is None

    @property
    def requests_unbounded(self) -> bool:
        return self.answered and self.per_request_bytes == 0

    def as_dict(self) -> dict[str, object]:
        return {
            "limit_bytes": self.limit_bytes,
            "unlimited": False,
            "per_request_bytes": self.per_request_bytes,
            "concurrency": self.concurrency,
            "requests_that_fit": self.requests_that_fit,
            "requests_unbounded": self.requests_unbounded,
            "fits": self.fits,
            "needed_bytes": self.needed_bytes,
            "longest_context": self.longest_context,
            "answered": self.answered,
            "no_answer": self.no_answer,
        }


def capacity(model: ModelSpec, plan: ModelPlan, limit_bytes: int, concurrency: int = 1) -> DeviceFit:
    per_request = plan.per_request_per_device_bytes
    if plan.refusals:
        n = len(plan.refusals)
        return DeviceFit(limit_bytes=limit_bytes, per_request_bytes=per_request, concurrency=concurrency,
                        requests_that_fit=None, fits=None, needed_bytes=None, longest_context=None,
                        no_answer=f"the model is refused ({n} refusal{'s' if n != 1 else ''}); "
                                  "a count from its admitted layers alone would not be an answer")
    fit = limit_bytes // per_request if per_request else None
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
    return largest_passing(ok, low, MAX_SEQ_LEN_LIMIT)
