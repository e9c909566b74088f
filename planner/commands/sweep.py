"""``sweep`` as a use case: resume, triage, run the points, rank them, decide the exit code.

Finished points are appended to the resume file as they complete, so an interrupted
sweep (Ctrl-C) keeps them and ``--resume`` picks up where it stopped.
"""

from __future__ import annotations

import time
from contextlib import closing, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

from csa_plan.planner.errors import BadInput, ExitCode

Tick = Callable[[int, "int | None", "str | None"], None]


@dataclass(frozen=True)
class SweepRequest:
    spec_path: str
    jobs: int = 0
    ray_address: str | None = None
    resume_path: str | None = None
    deployment: Any = None  # planner.budget.Deployment: --tp/--pp/--dp/--weights/--reserved override the grid
    step_time: str | None = None  # --step-time: overrides the spec's time.step_time


@dataclass(frozen=True, eq=False)
class SweepOutcome:
    exit_code: ExitCode
    report: dict[str, Any] | None = None  # None when interrupted
    finished: int = 0  # points run in this invocation
    to_run: int = 0


def run_sweep(req: SweepRequest,
              progress: Callable[[str, int], ContextManager[Tick]] = lambda label, total: nullcontext(
                  lambda *a: None)) -> SweepOutcome:
    from csa_plan.planner.reports.sweep import sweep_report
    from csa_plan.planner.sweep.evaluate import Task, WorkloadBounds, answer, evaluate, load_context_workload, triage
    from csa_plan.planner.sweep.resume import resume_line
    from csa_plan.planner.sweep.resume import ResumeFile, ResumeIdentity
    from csa_plan.planner.sweep.executors import make_executor, signals_interrupt
    from csa_plan.planner.sweep.spec import load_spec

    spec = _override(load_spec(req.spec_path), req.deployment)
    if req.step_time is not None:
        from dataclasses import replace

        if req.step_time != "fixed" and all(getattr(p, "engine", None) is None for p in spec.points):
            raise BadInput("options", "--step-time", f"{spec.source}'s grid has no engine point (only an engine's "
                                                     "replay has a step clock): drop it or add an engine to the grid")
        if any(p.step_time for p in spec.points):
            raise BadInput("options", "--step-time", f"{spec.source} has a step_time grid axis: give the sources "
                                                     "there, or drop the axis to use --step-time")
        spec = replace(spec, context=replace(spec.context, step_time=req.step_time))
    digest = spec.digest
    resume_path = req.resume_path
    sink = None
    if resume_path is not None:  # opened once: its header and every record checked, a torn tail repaired
        ctx = spec.context
        bounds = WorkloadBounds.of(load_context_workload(ctx.workload, ctx.sort, ctx.seed))
        identity = ResumeIdentity.of(spec, bounds.requests, bounds.base_rate_per_s)
        sink = ResumeFile(resume_path, identity, {p.key: p for p in spec.points})
    try:
        plan = triage(spec, sink.done if sink else {})
        executor = make_executor(req.jobs, req.ray_address)
    except BaseException:
        if sink is not None:
            sink.close()
        raise
    results = list(plan.resumed)
    started = time.perf_counter()
    try:
        with signals_interrupt(), progress("sweeping", len(plan.to_run)) as tick:
            tasks = [Task(spec.context, p) for p in plan.to_run]
            with closing(executor.map(evaluate, tasks)) as finished:  # closed at once: workers stopped
                for k, result in enumerate(finished, 1):
                    results.append(result)
                    if sink is not None:
                        sink.append(resume_line(digest, result))
                    tick(k, len(tasks), f"sweeping: {k}/{len(tasks)} points")
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM / SIGHUP (executors.Terminated)
        return SweepOutcome(ExitCode.INTERRUPTED, None, len(results) - len(plan.resumed), len(plan.to_run))
    finally:
        if sink is not None:
            sink.close()
    elapsed = time.perf_counter() - started
    ans = answer(spec, results)
    code = ExitCode.OK if ans.best is not None else ExitCode.REFUSED
    report = sweep_report(spec, plan, ans, executor_name=executor.name, elapsed_s=elapsed, exit_code=int(code))
    return SweepOutcome(code, report, len(results) - len(plan.resumed), len(plan.to_run))


def _override(spec: Any, deployment: Any) -> Any:
    """The grid with the command line's deployment options in place of its tp / pp / dp / reserved axes
    (``--weights`` replaces the weights the budget counts, ``--reserved`` its start-up reserves; ``--ep`` is the reference
    split's, tp, since a sweep names no engine)."""
    from dataclasses import replace

    from csa_plan.planner.sweep.spec import Reserved

    if deployment is None:
        return spec
    d = deployment
    if d.ep is not None and d.tp is not None and d.ep != d.tp:
        raise BadInput("options", "--ep", "a sweep's budget splits experts as the reference code does (ep = tp)")
    changes: dict[str, Any] = {k: getattr(d, k) for k in ("tp", "pp", "dp") if getattr(d, k) is not None}
    for k, v in changes.items():
        if v < 1:
            raise BadInput("options", f"--{k}", f"must be at least 1, got {v}")
    if d.weights_bytes is None and d.reserved_bytes is not None:  # the model's weights, these start-up reserves
        changes["reserved"] = Reserved(f"weights counted + reserved {d.reserved_bytes} per device", budget=True,
                                       runtime_bytes=d.reserved_bytes)
    elif d.weights_bytes is not None:
        fixed = d.weights_bytes + (d.reserved_bytes or 0)
        changes["reserved"] = Reserved(f"weights {d.weights_bytes} + reserved {d.reserved_bytes or 0} per device",
                                       fixed)
    if not changes:
        return spec
    points, seen = [], set()
    for p in spec.points:
        q = replace(p, **changes)
        if q.key not in seen:
            seen.add(q.key)
            points.append(q)
    return replace(spec, points=tuple(points))
