"""What a ``run-gpu`` run is: its layers, its requests and the one memory rule.

``plan_run`` turns the command's options into admitted descriptors (or refusals), and
``RunPlan.need_bytes`` is the single statement of how much device memory the run takes:
every layer's group for each of the ``requests`` requests, plus one more request's groups
for the full-recompute check (a second copy of each layer that is reset and prefilled
from position 0 at the recompute steps). The CLI refuses a ``--limit`` below it before
anything is allocated, and ``run_checks`` asserts the ledger holds exactly that.
"""

from __future__ import annotations

from dataclasses import dataclass

from csa_plan.planner.errors import BadInput

MIN_STEPS = 16
MAX_STEPS = 1024  # each step runs the oracle and (up to RECOMPUTE_ALL_STEPS_MAX) a full recompute
MAX_REQUESTS = 64  # each request has its own groups, prefill, decode and oracle: keeps a run bounded
RECOMPUTE_REQUESTS = 1  # the extra request whose groups the recompute check uses
TINY = {"num_heads": 4, "window": 16, "index_num_heads": 4, "index_topk": 8}
TINY_MAX_SEQ_LEN = 256
# The default length reaches the long-context paths at the real geometry: CSA selects top-1024
# of 32,768 records (k < n) and both CSA and HCA merge 2 attention chunks (the planned
# workspace holds 2 partial states once window + selected rows >= 2 x 514).
DEFAULT_MAX_SEQ_LEN = 131072
EMULATE_DEFAULT_MAX_SEQ_LEN = 1024  # the CPU emulator is ~10^5x slower than a GPU
MAX_VERIFIED_SEQ_LEN = 1 << 20


@dataclass(frozen=True)
class RunPlan:
    descriptors: tuple
    requests: int
    steps: int

    @property
    def groups_per_layer(self) -> int:
        return self.requests + RECOMPUTE_REQUESTS

    @property
    def per_request(self):
        from csa_plan.planner.layout import ZERO, group_bytes

        return sum((group_bytes(d, 1) for d in self.descriptors), ZERO)

    @property
    def need_bytes(self) -> int:
        """Device bytes the run charges: (requests + 1 recompute request) x one request's groups."""
        return self.per_request.total_bytes * self.groups_per_layer

    def limit_refusal(self, limit: int | None) -> str | None:
        if limit is None or self.need_bytes <= limit:
            return None
        return (f"OutOfMemory: {self.requests} request(s) plus the recompute request need {self.need_bytes:,} "
                f"bytes on device 0, the limit is {limit:,} bytes; raise --limit or lower --max-seq-len/--requests")


def default_max_seq_len(tiny: bool, backend: str) -> int:
    if tiny:
        return TINY_MAX_SEQ_LEN
    return EMULATE_DEFAULT_MAX_SEQ_LEN if backend == "emulate" else DEFAULT_MAX_SEQ_LEN


def check_counts(requests: int, steps: int, limit: int | None) -> None:
    if steps < MIN_STEPS:
        raise BadInput("options", "--steps", f"must be at least {MIN_STEPS}, got {steps}")
    if steps > MAX_STEPS:
        raise BadInput("options", "--steps", f"must be at most {MAX_STEPS}, got {steps:,}")
    if requests < 1:
        raise BadInput("options", "--requests", "must be at least 1")
    if requests > MAX_REQUESTS:
        raise BadInput("options", "--requests", f"must be at most {MAX_REQUESTS} (each request runs its own "
                                                f"groups, prefill, decode and oracle), got {requests:,}")
    if limit is not None and limit <= 0:
        raise BadInput("options", "--limit", "must be positive (omit it for an unlimited ledger)")


def plan_run(model: str, layers: str | None, requests: int, max_seq_len: int | None, steps: int, tp: int,
             tiny: bool, backend: str) -> tuple[RunPlan, list[str]]:
    """The run's descriptors (batch 1, after --tp and --tiny) and every refusal line."""
    from csa_plan.planner.gate import Gate
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.plan import PlanOptions, apply_options, plan_layer
    from csa_plan.kernels.kernel_limits import REFUSAL_TYPE, descriptor_problems

    L = max_seq_len or default_max_seq_len(tiny, backend)
    if L < steps + 1:
        raise BadInput("options", "--max-seq-len", f"must exceed --steps ({steps}), got {L}")
    if L > MAX_VERIFIED_SEQ_LEN:
        raise BadInput("options", "--max-seq-len", f"run-gpu verifies up to {MAX_VERIFIED_SEQ_LEN:,} tokens, "
                                                   f"got {L:,}")
    spec = load_model(model, max_seq_len=L)
    descs = [d for d in apply_options(spec, PlanOptions(max_seq_len=L, tp=tp)) if d.compression_ratio != 0]
    by_id = {d.layer_id: d for d in descs}
    if layers:
        try:
            ids = [int(x) for x in layers.split(",") if x.strip()]
        except ValueError:
            raise BadInput("options", "--layers", f"{layers!r} is not a comma-separated list of layer ids") from None
        seen = set()
        for i in ids:
            if i in seen:
                raise BadInput("options", "--layers", f"layer {i} is listed twice (each layer runs once)")
            seen.add(i)
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise BadInput("options", "--layers", f"no CSA/HCA layer with id {missing[0]} in {model}")
        chosen = [by_id[i] for i in ids]
    else:
        chosen = []
        for ratio in (4, 128):
            first = next((d for d in descs if d.compression_ratio == ratio), None)
            if first is not None:
                chosen.append(first)
    if not chosen:
        raise BadInput("options", "--layers", f"{model} has no CSA or HCA layer")
    if tiny:
        chosen = [d.with_(num_heads=TINY["num_heads"], window=min(TINY["window"], L),
                          **({"index_num_heads": TINY["index_num_heads"], "index_topk": TINY["index_topk"]}
                             if d.compression_ratio == 4 else {})) for d in chosen]
    chosen = [d.with_(batch=1) for d in chosen]
    refusals = []
    for d in chosen:
        plan = plan_layer(d, Gate.OP, 1)
        refusals += [r.message for r in plan.refusals]
        if not plan.refusals:
            refusals += [f"{REFUSAL_TYPE}: layer {d.layer_id}: {f} {p}" for f, p in descriptor_problems(d)]
    return RunPlan(tuple(chosen), requests, steps), refusals
