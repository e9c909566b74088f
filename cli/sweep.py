"""``csa-plan sweep``: search deployments for the cheapest one that serves a workload."""

from __future__ import annotations

import json

import click

from csa_plan.cli.exit_codes import EXIT_CODES_HELP, EXIT_OK, EXIT_REFUSED
from csa_plan.cli.options import COUNT, bad_input_exits

EXIT_INTERRUPTED = 130

SWEEP_EXIT_HELP = EXIT_CODES_HELP + """\b
For sweep: 0 some point meets every constraint (the answer is the first ranked),
3 no point does, 130 interrupted (finished points are kept in --resume FILE).
"""


@click.command(epilog=SWEEP_EXIT_HELP)
@click.argument("spec_path", metavar="SPEC")
@click.option("--jobs", "-j", type=COUNT, default=0, show_default=True,
              help="Local worker processes; 0 = every core, 1 = run in this process.")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
              help="Run the points on a Ray cluster (auto, ray://host:port); needs csa-plan[ray].")
@click.option("--resume", "resume_path", default=None, metavar="FILE",
              help="Append each finished point to FILE (JSON lines) and skip points already in it.")
@click.option("--top", type=COUNT, default=10, show_default=True, help="Ranked rows to show (all in --json).")
@click.option("--json", "as_json", is_flag=True, help="Print the csa-plan/sweep/v1 JSON document.")
@click.option("--plot", "plot_path", default=None, metavar="FILE.png",
              help="Draw the Pareto front, devices vs sustainable rate (needs matplotlib: csa-plan[plot]).")
@bad_input_exits
def sweep(spec_path: str, jobs: int, ray_address: str | None, resume_path: str | None, top: int, as_json: bool,
          plot_path: str | None) -> int:
    """Expand the grid of SPEC (YAML), skip the points that cannot work, simulate the rest,
    and rank those that meet the constraints; also print the Pareto front."""
    import time
    from pathlib import Path

    from csa_plan.planner.errors import BadInput
    from csa_plan.planner.files import path_kind, read_text
    from csa_plan.planner.sweep.evaluate import Task, answer, evaluate, read_resume, resume_line, triage
    from csa_plan.planner.sweep.spec import load_spec
    from csa_plan.planner.sweep.executors import make_executor
    from csa_plan.cli.console import make_consoles
    from csa_plan.cli.render_sweep import render_plot, render_sweep
    from csa_plan.planner.reports.sweep import sweep_report
    from csa_plan.cli.progress import progress_bar

    consoles = make_consoles()
    spec = load_spec(spec_path)
    digest = spec.digest
    done = {}
    if resume_path and path_kind(Path(resume_path)) is not None:
        text = read_text(Path(resume_path), 1 << 30)  # one JSON line per finished point
        done = read_resume(text, resume_path, digest, {p.key for p in spec.points})
    plan = triage(spec, done)
    executor = make_executor(jobs, ray_address)
    results = list(plan.resumed)
    sink = None
    if resume_path:
        try:
            sink = open(resume_path, "a", encoding="utf-8")
        except OSError as exc:
            raise BadInput("options", "--resume", f"cannot write {resume_path}: {exc.strerror or exc}") from None
    show = consoles.err.is_terminal and not as_json
    started = time.perf_counter()
    interrupted = False
    try:
        with progress_bar(consoles.err, show, "sweeping", len(plan.to_run)) as tick:
            tasks = [Task(spec.context, p) for p in plan.to_run]
            for k, result in enumerate(executor.map(evaluate, tasks), 1):
                results.append(result)
                if sink is not None:
                    sink.write(resume_line(digest, result) + "\n")
                    sink.flush()
                tick(k, len(tasks), f"sweeping: {k}/{len(tasks)} points")
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if sink is not None:
            sink.close()
    elapsed = time.perf_counter() - started
    if interrupted:
        where = f"; they are kept in {resume_path} (run again with --resume {resume_path})" if resume_path else \
            " (pass --resume FILE to keep finished points)"
        click.echo(f"csa-plan: interrupted after {len(results) - len(plan.resumed)} of {len(plan.to_run)} points{where}",
                   err=True)
        return EXIT_INTERRUPTED
    ans = answer(spec, results)
    code = EXIT_OK if ans.best is not None else EXIT_REFUSED
    report = sweep_report(spec, plan, ans, executor_name=executor.name, elapsed_s=elapsed, exit_code=code)
    plot_note = None
    if plot_path:
        plot_note = render_plot(report, plot_path)
        report["plot"] = {"path": plot_path if plot_note is None else None, "note": plot_note}
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        render_sweep(consoles.out, report, top=top, plot_note=plot_note)
    return code
