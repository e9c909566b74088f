"""``csa-plan compare``: the same model under every layout profile, one table."""

from __future__ import annotations

import json

import click

from csa_plan.cli.exit_codes import EXIT_CODES_HELP, EXIT_BAD_INPUT, EXIT_OK, EXIT_REFUSED
from csa_plan.cli.options import COUNT, SIZE, bad_input_exits


@click.command(epilog=EXIT_CODES_HELP)
@click.argument("model")
@click.option("--max-seq-len", type=COUNT, default=None,
              help="Tokens reserved per request [default: max_position_embeddings].")
@click.option("--device-memory", type=SIZE, default=None,
              help="Per-device memory for the 'requests that fit' row: bytes, 141GB, 80GiB or a GPU name.")
@click.option("--reserved", type=SIZE, default=0, help="Weights and runtime memory to subtract per device.")
@click.option("--layout", "layouts", multiple=True, metavar="NAME",
              help="Only these profiles (repeatable) [default: every registered profile].")
@click.option("--batch", type=COUNT, default=None, help="Sequences per state group [default: 1].")
@click.option("--tp", type=COUNT, default=1, show_default=True, help="Tensor-parallel ranks (heads split, latent state copied).")
@click.option("--query-len", type=COUNT, default=1, show_default=True, help="Tokens per step (scratch, in-flight window slots).")
@click.option("--json", "as_json", is_flag=True, help="Print the csa-plan/compare/v1 JSON document.")
@click.option("--plot", "plot_file", default=None, metavar="FILE.png",
              help="Also draw bytes per request against context length, one line per profile (needs the [plot] extra).")
@bad_input_exits
def compare(model: str, max_seq_len: int | None, device_memory: int | None, reserved: int,
            layouts: tuple[str, ...], batch: int | None, tp: int, query_len: int, as_json: bool,
            plot_file: str | None) -> int:
    """Compare MODEL (a preset, config.json, model directory, YAML spec or ONNX graph) under
    every layout profile: bytes per request, asymptotic bytes per token, fixed cost per
    request, padding waste, difference to exact, and requests that fit.

    Exit 3 when a layer is refused (it is left out of every column) or when not even
    one request fits the given memory under some profile."""
    from csa_plan.planner.engines.compare import compare as run_compare
    from csa_plan.planner.reports.compare import comparison_report
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.memory import device_budget
    from csa_plan.planner.plan import PlanOptions
    from csa_plan.planner.engines import get_profile
    from csa_plan.cli.console import make_consoles
    from csa_plan.cli.render_compare import render_compare

    for name in layouts:
        get_profile(name, "options", "--layout")
    if plot_file is not None:
        try:
            import matplotlib  # noqa: F401  (optional extra, imported only when asked)
        except ImportError:
            click.echo("csa-plan: error: --plot needs matplotlib: pip install 'csa-plan[plot]'", err=True)
            return EXIT_BAD_INPUT
    budget = device_budget(device_memory, reserved)
    spec = load_model(model, max_seq_len=max_seq_len)
    options = PlanOptions(max_seq_len=max_seq_len, batch=batch, query_len=query_len, tp=tp)
    result = run_compare(spec, options, budget.limit_bytes if budget else None, layouts or None)
    fits = all(r.requests_that_fit != 0 for r in result.rows)
    code = EXIT_OK if result.admitted and fits else EXIT_REFUSED
    report = comparison_report(result)
    report["exit_code"] = code
    consoles = make_consoles()
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        render_compare(consoles.out, report)
    if plot_file is not None:
        _plot(spec, options, layouts or None, plot_file)
        if not as_json:
            consoles.out.print(f"chart written to {plot_file}")
    return code


def _plot(spec, options, layouts, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from csa_plan.planner.engines.compare import context_lengths, curves
    from csa_plan.planner.plan import apply_options

    descriptors = apply_options(spec, options)
    high = max(d.max_seq_len for d in descriptors)
    low = min(high, max(d.window for d in descriptors))
    lengths = context_lengths(low, high)
    series = curves(spec, options, lengths, layouts)
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, values in series.items():
        ax.plot(lengths, [v / (1 << 20) for v in values], label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("state per request per device (MiB, log)")
    ax.set_title(f"{spec.name}: state per request by layout profile")
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
