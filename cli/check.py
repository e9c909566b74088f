"""``csa-plan check``: gate, lay out and total a model, optionally against device memory."""

from __future__ import annotations

import json

import click

from csa_plan.planner.descriptor import CACHE_FORMAT_NAMES
from csa_plan.planner.engines import PROFILES
from csa_plan.cli.exit_codes import EXIT_CODES_HELP, EXIT_OK, EXIT_REFUSED
from csa_plan.cli.options import COUNT, SIZE, bad_input_exits, enum_choice
from csa_plan.planner.gate import Gate


@click.command(epilog=EXIT_CODES_HELP)
@click.argument("model")
@click.option("--gate", type=enum_choice(Gate), default=Gate.OP.value, show_default=True,
              help="op: ratios 4 and 128; c1: the C1 runtime slice (HCA only).")
@click.option("--layout", type=click.Choice(list(PROFILES)), default="exact", show_default=True,
              help="Layout profile: exact (CONTRACT §2) or an engine's layout (README: 'Layout profiles').")
@click.option("--max-seq-len", type=COUNT, default=None, help="Tokens reserved per request [default: max_position_embeddings].")
@click.option("--batch", type=COUNT, default=None, help="Sequences per state group [default: 1].")
@click.option("--kv-format", "kv_format", default=None, metavar="FORMAT",
              help=f"Cache format override: {', '.join(CACHE_FORMAT_NAMES)}.")
@click.option("--window", type=COUNT, default=None, help="Sliding-window override [default: the model's].")
@click.option("--tp", type=COUNT, default=1, show_default=True, help="Tensor-parallel ranks (heads split, latent state copied).")
@click.option("--query-len", type=COUNT, default=1, show_default=True, help="Tokens per step for scratch workspaces.")
@click.option("--device-memory", type=SIZE, default=None, help="Per-device memory: bytes, 141GB, 80GiB, or h200/h100/a100-80gb/...")
@click.option("--reserved", type=SIZE, default=0, help="Weights and runtime memory to subtract per device.")
@click.option("--concurrency", type=COUNT, default=1, show_default=True,
              help="Concurrent requests for the longest-context answer.")
@click.option("--at-length", type=COUNT, default=8, show_default=True,
              help="ONNX lint: total length at which record-axis conflicts are named.")
@click.option("--per-layer", is_flag=True, help="List every layer instead of grouping identical ones.")
@click.option("--json", "as_json", is_flag=True, help="Print the csa-plan/check/v1 JSON document.")
@bad_input_exits
def check(model: str, gate: str, layout: str, max_seq_len: int | None, batch: int | None, kv_format: str | None,
          window: int | None, tp: int, query_len: int, device_memory: int | None, reserved: int,
          concurrency: int, at_length: int, per_layer: bool, as_json: bool) -> int:
    """Check MODEL: a preset (deepseek-v4-flash, deepseek-v4-pro), a config.json, a model
    directory, a YAML model spec or an ONNX graph."""
    from csa_plan.planner.capacity import capacity
    from csa_plan.planner.errors import BadInput
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.memory import device_budget
    from csa_plan.planner.plan import PlanOptions, plan_model
    from csa_plan.planner.reports.check import Verdict, check_report, verdict
    from csa_plan.cli.console import make_consoles
    from csa_plan.cli.render_check import render_check

    if concurrency < 1:
        raise BadInput("options", "--concurrency", "must be at least 1")
    budget = device_budget(device_memory, reserved)
    spec = load_model(model, max_seq_len=max_seq_len, window=window, at_length=at_length)
    options = PlanOptions(gate=Gate(gate), layout=layout, max_seq_len=max_seq_len, batch=batch, cache_format=kv_format,
                          window=window, query_len=query_len, tp=tp)
    plan = plan_model(spec, options)
    cap = capacity(spec, plan, budget.limit_bytes, concurrency) if budget and plan.per_request_per_device_bytes else None
    code = EXIT_OK if verdict(plan, cap) == Verdict.ADMITTED else EXIT_REFUSED
    report = check_report(plan, budget, cap, code)
    consoles = make_consoles()
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        render_check(consoles.out, report, per_layer=per_layer)
    return code
