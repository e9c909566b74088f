"""``csa-plan sweep``: search deployments for the cheapest one that serves a workload."""

from __future__ import annotations


from csa_plan.cli.error_doc import bad_input_exits
from csa_plan.cli.exit_codes import EXIT_CODES_HELP
from csa_plan.cli.option_groups import DEPLOYMENT_PARAMS, with_deployment
from csa_plan.cli.params import Arg, CommandSpec, Kind, Opt

SWEEP_EXIT_HELP = EXIT_CODES_HELP + """\b
For sweep: 0 some point meets every constraint (the answer is the first ranked),
3 no point does, 130 interrupted: Ctrl-C, SIGTERM or SIGHUP (finished points are kept
in --resume FILE; the worker processes end with the sweep).
"""

PARAMS = (
    Arg("spec_path", metavar="SPEC"),
    Opt(("--jobs", "-j"), "jobs", Kind.COUNT, default=0, show_default=True,
        help="Local worker processes; 0 = every core, 1 = run in this process."),
    Opt(("--ray",), "ray_address", metavar="ADDRESS",
        help="Run the points on a Ray cluster (auto, HOST:PORT or ray://HOST:PORT); needs csa-plan[ray]."),
    Opt(("--resume",), "resume_path", metavar="FILE",
        help="Append each finished point to FILE (JSON lines) and skip points already in it. FILE is "
             "created by csa-plan with a header naming the spec and workload; any other file is refused "
             "unchanged (docs/output-and-resume.md)."),
    Opt(("--top",), "top", Kind.COUNT, default=10, show_default=True, help="Ranked rows to show (all in --json)."),
    Opt(("--brief",), "brief", Kind.FLAG, default=False,
        help="Print only the head: the answer point, its devices, rate and capacity."),
    Opt(("--step-time",), "step_time", Kind.CHOICE, choices=("physics", "measured", "fixed"),
        help="Engine points' step-time source, overriding the spec's time.step_time [default: physics; fixed when "
             "the spec gives time.tpot_ms or time.prefill_tok_s]."),
    Opt(("--json",), "as_json", Kind.FLAG, default=False, help="Print the csa-plan/sweep/v2 JSON document."),
    Opt(("--plot",), "plot_path", metavar="FILE.png",
        help="Draw the Pareto front, devices vs sustainable rate (needs matplotlib: csa-plan[plot])."),
    *DEPLOYMENT_PARAMS,
)


MIN_JOBS_BOUND = 8  # -j may always name this many workers, whatever the cores


def jobs_bound() -> int:
    """The most local workers -j may name: the cores this process may run on, at least MIN_JOBS_BOUND
    (each worker is a process importing csa-plan: -j 100000 started one per point)."""
    import os

    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(cores, MIN_JOBS_BOUND)


def check_jobs(jobs: int, ray_address: str | None) -> None:
    from csa_plan.planner.errors import BadInput

    if ray_address is not None and jobs not in (0, None):
        raise BadInput("options", "--jobs", "local workers do not apply with --ray (the cluster runs the points): "
                       "drop -j or --ray")
    bound = jobs_bound()
    if jobs is not None and jobs > bound:
        raise BadInput("options", "--jobs", f"{jobs:,} local workers: this machine runs at most {bound} at once "
                       f"(its cores, at least {MIN_JOBS_BOUND}); give 0 for every core")


@bad_input_exits
@with_deployment
def sweep(spec_path: str, jobs: int, ray_address: str | None, resume_path: str | None, top: int, brief: bool,
          step_time: str | None, as_json: bool,
          plot_path: str | None, deployment, budget_plot: str | None) -> int:
    """Expand the grid of SPEC (YAML), skip the points that cannot work, simulate the rest,
    and rank those that meet the constraints; also print the Pareto front.

    \b
    SPEC keys: name, workload (a trace or mix, relative to SPEC), sort, seed, time
    (step_time, prefill_tok_s, tpot_ms), grid (each axis a
    value or a list: model, device, reserved, tp, pp, dp, router, reserve, policy,
    layout, engine, rate_scale, max_seq_len, step_time, settings: engine options by
    name, e.g. [null, {max_num_seqs: 256}, {num_speculative_tokens: 1}]), objective (fewest_devices or
    rate_per_device), constraints (zero_refusals, wait_p99_max_s, ttft_p99_max_s,
    tpot_p99_max_ms, min_mean_utilization; an engine point needs one latency
    bound, and SLO bounds alone will do), search (rel_tol, min_scale, max_scale).
    Example: examples/sweeps/small.yaml; docs/sweep.md.

    An engine point's sustainable rate is a steady state: arrivals at that rate
    over a window of many request lifetimes (a short trace repeated with fresh
    ids), the queue not growing, the bounds held on the window; "trace too short
    to say" where it cannot be judged.

    A point whose rate search reaches its ceiling is "not limited by memory within
    this trace": listed apart, never ranked or plotted by that ceiling.
    """
    from csa_plan.cli.console import make_consoles
    from csa_plan.cli.emit import emit
    from csa_plan.cli.plots import plot_sweep, require_plotting, say_written
    from csa_plan.cli.progress import progress_bar
    from csa_plan.planner.commands.sweep import SweepRequest, run_sweep

    from csa_plan.planner.files import check_distinct_outputs, check_output_path
    from csa_plan.cli.stream import echo
    from csa_plan.planner.text import printable

    if plot_path is not None:  # before any work: a bad path must not cost a whole sweep
        check_output_path(plot_path, "--plot")
        check_distinct_outputs(("--resume", resume_path), ("--plot", plot_path))
        require_plotting("--plot")
    consoles = make_consoles()
    show = not as_json and consoles.err.is_terminal
    if budget_plot is not None:
        from csa_plan.planner.errors import BadInput

        raise BadInput("options", "--budget-plot", "a sweep has one budget per point: use check --budget-plot")
    check_jobs(jobs, ray_address)
    outcome = run_sweep(SweepRequest(spec_path, jobs, ray_address, resume_path, deployment, step_time),
                        lambda label, total: progress_bar(consoles.err if show else None, show, label, total))
    if outcome.report is None:
        where = f"; they are kept in {resume_path} (run again with --resume {resume_path})" if resume_path else \
            " (pass --resume FILE to keep finished points)"
        echo(printable(f"csa-plan: interrupted after {outcome.finished} of {outcome.to_run} points{where}"), err=True)
        return int(outcome.exit_code)
    report = outcome.report
    plot_note = None
    if plot_path is not None:
        plot_note = plot_sweep(report, plot_path)
        report["plot"] = {"path": plot_path if plot_note is None else None, "note": plot_note}
    def render(out, r):  # rich and the renderer are imported for tables only
        from csa_plan.cli.render_sweep import render_sweep, render_sweep_head

        from csa_plan.cli.console import whole_lines_when_piped

        with whole_lines_when_piped(out):
            render_sweep_head(out, r)  # the answer first; the detail follows
        if brief:
            return
        out.print()
        render_sweep(out, r, top=top, plot_note=plot_note)

    emit(consoles, report, as_json, render)
    if plot_path is not None and plot_note is None:
        say_written(consoles, "plot", plot_path, as_json)
    return int(outcome.exit_code)


COMMAND = CommandSpec("sweep", PARAMS, sweep, epilog=SWEEP_EXIT_HELP)
