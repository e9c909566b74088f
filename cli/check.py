"""``csa-plan check``: gate, lay out and total a model, optionally against device memory."""

from __future__ import annotations


import click

from csa_plan.planner.descriptor import CACHE_FORMAT_NAMES
from csa_plan.planner.engines import PROFILES
from csa_plan.cli.exit_codes import EXIT_CODES_HELP
from csa_plan.cli.options import CACHE_FORMAT, COUNT, SIZE, bad_input_exits, deployment_options, engine_options, enum_choice
from csa_plan.planner.loaders.model_files import DEFAULT_LINT_LENGTH
from csa_plan.planner.gate import Gate


@click.command(epilog=EXIT_CODES_HELP)
@click.argument("model")
@click.option("--gate", type=enum_choice(Gate), default=None,
              help="op: ratios 4 and 128; c1: the C1 runtime slice (HCA only) "
                   "[default: the spec's own 'gate:', else op].")
@click.option("--layout", default="exact", show_default=True, metavar="NAME",
              help=f"Layout profile: {', '.join(PROFILES)} (docs/compare.md); engines: --engine.")
@click.option("--max-seq-len", "--max-model-len", "max_seq_len", type=COUNT, default=None, help="Tokens reserved per request: 128k = 128,000, 128K = 131,072 (as vLLM reads them), 1e6, 1,000,000 [default: max_position_embeddings].")
@click.option("--batch", type=COUNT, default=None, help="Sequences per state group [default: 1].")
@click.option("--kv-format", "kv_format", type=CACHE_FORMAT, default=None,
              help=f"Cache format override: {', '.join(CACHE_FORMAT_NAMES)}.")
@click.option("--window", type=COUNT, default=None, help="Sliding-window override [default: the model's].")
@click.option("--query-len", type=COUNT, default=1, show_default=True, help="Tokens per step for scratch workspaces.")
@click.option("--device-memory", type=SIZE, default=None, help="Per-device memory: bytes, 141GB, 80GiB, or h200/h100/a100-80gb/...")
@click.option("--concurrency", type=COUNT, default=1, show_default=True,
              help="Concurrent requests for the longest-context answer.")
@click.option("--at-length", type=COUNT, default=DEFAULT_LINT_LENGTH, show_default=True,
              help="ONNX lint: total length at which record-axis conflicts are named.")
@click.option("--per-layer", is_flag=True, help="List every layer instead of grouping identical ones.")
@click.option("--brief", is_flag=True, help="Print only the head: verdict, requests that fit, longest context, "
              "the engine's log line, the state pool, every refusal.")
@click.option("--json", "as_json", is_flag=True, help="Print the csa-plan/check/v2 JSON document (docs/answers.md).")
@bad_input_exits
@engine_options
@deployment_options
def check(model: str, gate: str | None, layout: str, max_seq_len: int | None, batch: int | None, kv_format: str | None,
          window: int | None, query_len: int, device_memory: int | None,
          concurrency: int, at_length: int, per_layer: bool, brief: bool, as_json: bool, engine: str | None,
          kv_memory: int | None, engine_settings, deployment, budget_plot: str | None) -> int:
    """Check MODEL: a preset (deepseek-v4-flash, deepseek-v4-pro), a config.json, a model
    directory, a YAML model spec or an ONNX graph."""
    from csa_plan.cli.console import make_consoles
    from csa_plan.cli.emit import emit
    from csa_plan.planner.commands.check import CheckRequest, run_check
    from csa_plan.planner.plan import PlanOptions


    options = PlanOptions(gate=Gate(gate or Gate.OP.value), layout=layout, max_seq_len=max_seq_len, batch=batch, cache_format=kv_format,
                          window=window, query_len=query_len, tp=1 if deployment.tp is None else deployment.tp)
    outcome = run_check(CheckRequest(model, options, device_memory, deployment.reserved_bytes or 0, concurrency,
                                     at_length, engine=engine, engine_settings=engine_settings,
                                     kv_memory_bytes=kv_memory, deployment=deployment,
                                     gate_from_spec=gate is None))

    def render(out, report):  # rich and the renderers are imported for tables only
        from csa_plan.cli.render_budget import render_budget
        from csa_plan.cli.render_check import render_check, render_head
        from csa_plan.cli.render_engine import render_engine

        render_head(out, report)  # the answer first; the detail follows
        if brief:
            return
        out.print()
        if report.get("engine"):
            render_engine(out, report["model"], report["engine"])
        else:
            render_check(out, report, per_layer=per_layer)
        if report.get("budget") is not None:
            render_budget(out, report["budget"], head_shown=True)

    consoles = make_consoles()
    emit(consoles, outcome.report, as_json, render)
    if budget_plot is not None:
        from csa_plan.cli.plots import write_budget_plot

        write_budget_plot(consoles, outcome.report.get("budget"), budget_plot, as_json)
    return int(outcome.exit_code)
