"""The throughput–interactivity frontier (``simulate --max-concurrency 1,4,16,64,256``): one closed-loop
replay per client concurrency, condensed to the two figures the engines' benchmark posts plot.

Why a list of concurrencies and not a rate: the published serving figures (vLLM's ``bench serve``,
SGLang's ``bench_serving``, InferenceMAX) are all taken with a closed-loop client at a fixed
``--max-concurrency``, and a deployment is compared with another by the curve those points draw:
output tokens/s per GPU (what the deployment costs) against output tokens/s per user (what each
user sees, ``1 / TPOT`` p50). Each point is the replay ``simulate --max-concurrency C`` gives alone,
through the same loop, step clock and client (``serve.serve``); nothing here replays anything.

A point is *on the frontier* when no other point of the same run is at least as good on both axes
and better on one (the points a user would choose among); the others are dominated (a higher
concurrency that only queues, a lower one that gains no interactivity).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from csa_plan.planner.errors import BadInput

PER_USER = "1 / TPOT p50 (output tokens/s one request sees while it decodes)"
PER_GPU = "output tokens of served requests / makespan / GPUs (the benchmark client's output throughput per GPU)"


@dataclass(frozen=True)
class FrontierPoint:
    """One client concurrency's replay, as the frontier shows it (seconds; tokens/s)."""

    concurrency: int
    requests: int
    served: int
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    tpot_p50_s: float | None
    tpot_p99_s: float | None
    output_tok_s_per_gpu: float | None
    output_tok_s_per_user: float | None
    peak_running: int
    preemptions: int
    makespan_s: float
    on_frontier: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_concurrencies(levels: tuple[int, ...], source: str = "options", field: str = "--max-concurrency") -> None:
    """Bad input for a list the frontier cannot draw: a level below 1 or one given twice."""
    seen: set[int] = set()
    for c in levels:
        if c < 1:
            raise BadInput(source, field, f"each concurrency must be at least 1, got {c}")
        if c in seen:
            raise BadInput(source, field, f"concurrency {c:,} is given twice")
        seen.add(c)


def frontier_point(concurrency: int, runtime: dict[str, Any]) -> FrontierPoint:
    """The point of one replay's ``runtime`` section (``RuntimeReport.as_dict``)."""
    tpot = runtime["tpot"]["p50_s"]
    return FrontierPoint(concurrency=concurrency, requests=runtime["requests"], served=runtime["served"],
                         ttft_p50_s=runtime["ttft"]["p50_s"], ttft_p99_s=runtime["ttft"]["p99_s"],
                         tpot_p50_s=tpot, tpot_p99_s=runtime["tpot"]["p99_s"],
                         output_tok_s_per_gpu=runtime.get("output_tok_s_per_gpu"),
                         output_tok_s_per_user=None if not tpot else 1.0 / tpot,
                         peak_running=runtime["occupancy"]["peak_running"],
                         preemptions=runtime["preemptions"]["count"], makespan_s=runtime["makespan_s"])


def mark_frontier(points: list[FrontierPoint]) -> list[FrontierPoint]:
    """The points with ``on_frontier`` set: not dominated on (tok/s per GPU, tok/s per user)."""
    from dataclasses import replace

    def xy(p: FrontierPoint) -> tuple[float, float] | None:
        if p.output_tok_s_per_gpu is None or p.output_tok_s_per_user is None:
            return None
        return p.output_tok_s_per_gpu, p.output_tok_s_per_user

    out = []
    for p in points:
        a = xy(p)
        dominated = a is None or any(
            b is not None and b[0] >= a[0] and b[1] >= a[1] and b != a for b in map(xy, points))
        out.append(replace(p, on_frontier=not dominated))
    return out


def frontier_document(first: dict[str, Any], points: list[FrontierPoint], code: int) -> dict[str, Any]:
    """The frontier run's document: the first replay's head (workload, model, deployment, engine,
    step time, budget), then one point per concurrency in the order given."""
    head = {k: first[k] for k in ("schema", "workload", "model", "deployment", "engine", "budget", "fit")
            if k in first}
    time = dict(first.get("time") or {})
    time.pop("max_concurrency", None)
    head["time"] = time
    head["frontier"] = {"concurrencies": [p.concurrency for p in points], "per_user": PER_USER, "per_gpu": PER_GPU,
                        "points": [p.as_dict() for p in mark_frontier(points)],
                        "modelled": list((first.get("runtime") or {}).get("modelled") or ())}
    head["exit_code"] = int(code)
    return head
