"""``csa-plan simulate``: replay a request mix or trace through the ledger."""

from __future__ import annotations

import json

import click

from csa_plan.cli.exit_codes import EXIT_CODES_HELP, EXIT_OK, EXIT_REFUSED
from csa_plan.cli.options import COUNT, SIZE, bad_input_exits

LONG_RUN_REQUESTS = 200_000


def _layouts() -> list[str]:
    from csa_plan.planner.engines import PROFILES

    return list(PROFILES)


@click.command(epilog=EXIT_CODES_HELP)
@click.argument("workload")
@click.option("--model", default=None, help="Preset, config.json, model directory or YAML spec [default: the mix's model].")
@click.option("--layout", type=click.Choice(_layouts()), default=None, help="Layout profile [default: exact].")
@click.option("--max-seq-len", type=COUNT, default=None, help="Tokens per request at most [default: max_position_embeddings].")
@click.option("--tp", type=COUNT, default=None, help="Tensor-parallel ranks per stage [default: 1].")
@click.option("--pp", type=COUNT, default=None, help="Pipeline stages (contiguous layer split) [default: 1].")
@click.option("--dp", type=COUNT, default=None, help="Data-parallel replicas [default: 1].")
@click.option("--router", type=click.Choice(["round-robin", "least-loaded"]), default=None,
              help="How a request picks its replica [default: round-robin].")
@click.option("--device-memory", type=SIZE, default=None, help="Per-device memory: bytes, 141GB, 80GiB or h200/h100/... "
              "[default: unlimited, everything accounted, nothing refused].")
@click.option("--reserved", type=SIZE, default=None, help="Weights and runtime memory to subtract per device.")
@click.option("--reserve", type=click.Choice(["max", "fit"]), default=None,
              help="max: every group reserved for max_seq_len; fit: prompt + output rounded up to --bucket [default: max].")
@click.option("--bucket", type=COUNT, default=None, help="Token bucket for --reserve fit [default: 4096].")
@click.option("--policy", type=click.Choice(["refuse", "queue"]), default=None,
              help="refuse: fail closed; queue: FIFO wait [default: refuse].")
@click.option("--prefill-tok-s", type=float, default=None, help="Prefill throughput, tokens/s [default: 10000].")
@click.option("--tpot-ms", type=float, default=None, help="Decode time per output token, ms [default: 20].")
@click.option("--rate-scale", type=float, default=None, help="Arrival-rate multiplier: 2 = twice as fast [default: 1].")
@click.option("--sort", "sort_rows", is_flag=True, help="Accept a trace whose timestamps are out of order (sorted stably).")
@click.option("--find-capacity", is_flag=True, help="Bisect the largest --rate-scale with zero memory refusals "
              "(or, under --policy queue, wait p99 under --max-wait).")
@click.option("--max-wait", type=float, default=None, help="Seconds: the wait p99 bound for --find-capacity under queue.")
@click.option("--verify", is_flag=True, help="Also replay event by event through the ledger and require identical results.")
@click.option("--json", "as_json", is_flag=True, help="Print the csa-plan/simulate/v1 JSON document.")
@click.option("--plot", "plot_path", default=None, metavar="FILE.png",
              help="Draw residency over time per device against its limit (needs matplotlib: csa-plan[plot]).")
@bad_input_exits
def simulate(workload: str, model: str | None, layout: str | None, max_seq_len: int | None, tp: int | None,
             pp: int | None, dp: int | None, router: str | None, device_memory: int | None, reserved: int | None,
             reserve: str | None, bucket: int | None, policy: str | None, prefill_tok_s: float | None,
             tpot_ms: float | None, rate_scale: float | None, sort_rows: bool, find_capacity: bool,
             max_wait: float | None, verify: bool, as_json: bool, plot_path: str | None) -> int:
    """Replay WORKLOAD (a YAML request mix, an Azure-format CSV trace or JSONL requests)
    through per-device ledgers and report peaks, refusals and waits."""
    import math

    from csa_plan.planner.errors import BadInput
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.plan import PlanOptions, plan_model
    from csa_plan.planner.simulate.capacity import find_capacity as search
    from csa_plan.planner.simulate.replay import replay
    from csa_plan.planner.simulate.settings import merge, sim_config
    from csa_plan.planner.simulate import Policy, prepare, simulate as run
    from csa_plan.planner.workloads import MixSettings, load_workload
    from csa_plan.cli.console import make_consoles
    from csa_plan.cli.progress import progress_bar
    from csa_plan.cli.render_simulate import render_plot, render_simulate, simulate_report

    consoles = make_consoles()
    wl = load_workload(workload, sort=sort_rows)
    given = MixSettings(model=model, layout=layout, max_seq_len=max_seq_len, tp=tp, pp=pp, dp=dp, router=router,
                        device_memory_bytes=device_memory, reserved_bytes=reserved, reserve=reserve, bucket=bucket,
                        policy=policy, prefill_tok_s=prefill_tok_s, tpot_ms=tpot_ms, rate_scale=rate_scale)
    settings = merge(given, wl.settings)
    if settings.model is None:
        raise BadInput("options", "--model", "no model: pass --model or name one in the mix spec")
    if max_wait is not None and (not math.isfinite(max_wait) or max_wait < 0):
        raise BadInput("options", "--max-wait", f"must be a non-negative number of seconds, got {max_wait}")
    config, _budget = sim_config(settings, wl.source)
    placement = config.placement
    if find_capacity:
        if not config.limit_bytes:
            raise BadInput("options", "--find-capacity", "needs --device-memory (unlimited memory never refuses)")
        if config.policy is Policy.QUEUE and max_wait is None:
            raise BadInput("options", "--max-wait", "--find-capacity under --policy queue needs --max-wait SECONDS")
    spec = load_model(settings.model, max_seq_len=config.max_seq_len)
    base_plan = plan_model(spec, PlanOptions(max_seq_len=config.max_seq_len, tp=placement.tp, layout=config.layout))
    if base_plan.refusals:
        report = simulate_report(wl, spec, config, None, None, plan_refusals=base_plan.refusals, exit_code=EXIT_REFUSED)
        if as_json:
            click.echo(json.dumps(report, indent=2))
        else:
            render_simulate(consoles.out, report)
        return EXIT_REFUSED
    scn = prepare(spec, wl, config)
    show_progress = consoles.err.is_terminal and not as_json and (len(wl) >= LONG_RUN_REQUESTS or find_capacity)

    capacity = None
    if find_capacity:
        max_wait_ns = None if max_wait is None else int(round(max_wait * 1e9))
        with progress_bar(consoles.err, show_progress, "finding capacity", None) as tick:
            capacity = search(scn, max_wait_ns, progress=lambda k, s: tick(k, None, f"probe {k}: x{s:.4g}"))
        result = capacity.result
        if result is not None:
            scn = scn.with_rate_scale(capacity.rate_scale)
    else:
        with progress_bar(consoles.err, show_progress, "simulating", len(scn.arrival_ns)) as tick:
            result = run(scn, progress=lambda done, total: tick(done, total, None))
    verified = None
    if verify and result is not None:
        reference, ledger = replay(scn)
        verified = reference == result and reference.decisions.same_as(result.decisions) and ledger.at_baseline
    series = None
    if result is not None:
        from csa_plan.planner.simulate.series import residency_series

        series = residency_series(scn, result.decisions, buckets=60)
    if result is None:
        code = EXIT_REFUSED
    else:
        code = EXIT_OK if result.refused == 0 else EXIT_REFUSED
    if verified is False:
        code = EXIT_REFUSED
    report = simulate_report(wl, spec, config if result is None else scn.config, scn, result, capacity=capacity,
                             verified=verified, exit_code=code, split=scn.split)
    plot_note = None
    if plot_path and series is not None:
        plot_note = render_plot(series, plot_path, title=f"{spec.name} — {wl.source}")
        report["plot"] = {"path": plot_path if plot_note is None else None, "note": plot_note}
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        render_simulate(consoles.out, report, series=series, plot_note=plot_note)
    return code

