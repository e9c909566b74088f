"""``csa-plan simulate``: replay a request mix or trace through the ledger."""

from __future__ import annotations


from csa_plan.cli.error_doc import bad_input_exits
from csa_plan.cli.option_groups import DEPLOYMENT_PARAMS, ROLE_PARAMS, ENGINE_SPELLING_PARAMS, engine_params, with_deployment, with_engine_settings
from csa_plan.cli.params import Arg, CommandSpec, Kind, Opt
from csa_plan.planner.limits import MAX_PREFILL_TOK_S, MAX_RATE_SCALE, MAX_TPOT_MS, MAX_WAIT_S
from csa_plan.planner.placement import Router
from csa_plan.planner.reserve.scenario import DEFAULT_BUCKET, Policy, Reserve, TimeModel
from csa_plan.planner.workloads.formats import FORMAT_NAMES, TimeUnit


def _layouts() -> list[str]:
    from csa_plan.planner.profiles import PROFILES

    return list(PROFILES)


def _values(enum: type) -> tuple[str, ...]:
    return tuple(member.value for member in enum)


PARAMS = (
    Arg("workload"),
    Opt(("--model",), "model", help="Preset, config.json, model directory or YAML spec [default: the mix's model]."),
    Opt(("--layout",), "layout", metavar="NAME",
        help=f"Layout profile: {', '.join(_layouts())} [default: exact]; engines: --engine."),
    Opt(("--max-seq-len", "--max-model-len"), "max_seq_len", Kind.COUNT,
        help="Tokens per request at most [default: max_position_embeddings]."),
    Opt(("--router",), "router", Kind.NAME, choices=_values(Router),
        help="How a request picks its replica [default: round-robin]."),
    Opt(("--device-memory",), "device_memory", Kind.SIZE,
        help="Per-device memory: bytes, 141GB, 80GiB or h200/h100/... "
             "[default: unlimited, everything accounted, nothing refused]."),
    Opt(("--reserve",), "reserve", Kind.NAME, choices=_values(Reserve),
        help="max: every group reserved for max_seq_len; fit: prompt + output rounded up to --bucket [default: max]."),
    Opt(("--bucket",), "bucket", Kind.COUNT, help=f"Token bucket for --reserve fit [default: {DEFAULT_BUCKET}]."),
    Opt(("--policy",), "policy", Kind.NAME, choices=_values(Policy),
        help="refuse: fail closed; queue: FIFO wait [default: refuse]."),
    Opt(("--prefill-tok-s",), "prefill_tok_s", Kind.NUMBER, high=MAX_PREFILL_TOK_S,
        help=f"Prefill throughput, tokens/s [default: {TimeModel.prefill_tok_s:g}]."),
    Opt(("--tpot-ms",), "tpot_ms", Kind.NUMBER, high=MAX_TPOT_MS,
        help=f"Decode time per output token, ms [default: {TimeModel.tpot_ms:g}]."),
    Opt(("--step-time",), "step_time", Kind.CHOICE, choices=("physics", "measured", "fixed"),
        help="How long an engine replay's step lasts: physics (roofline on the card, fitted on published "
             "measurements), measured (aiconfigurator-core's kernel data: csa-plan[perf]) or fixed (--tpot-ms, "
             "--prefill-tok-s) [default: physics; fixed when --tpot-ms or --prefill-tok-s is given]."),
    Opt(("--max-concurrency",), "max_concurrency", Kind.COUNTS, metavar="C[,C,...]",
        help="A closed-loop client, as vllm bench serve spells it: at most this many requests in flight, the next "
             "sent when one ends (trace times ignored; engine replays). Several (1,4,16,64,256): one replay each, "
             "output tok/s per GPU against tok/s per user, the throughput-interactivity frontier (--plot draws it)."),
    Opt(("--spec-acceptance",), "spec_acceptance", Kind.NUMBER, high=1.0,
        help="Replays that draft (vLLM --num-speculative-tokens, SGLang --speculative-num-steps): each draft "
             "token's acceptance rate, given the ones before it were accepted "
             f"[default: {TimeModel.spec_acceptance:g}, the middle of the published MTP 0.57-0.70]."),
    Opt(("--rate-scale",), "rate_scale", Kind.NUMBER, high=MAX_RATE_SCALE,
        help=f"Arrival-rate multiplier: 2 = twice as fast [default: {TimeModel.rate_scale:g}]."),
    Opt(("--sort",), "sort_rows", Kind.FLAG, default=False,
        help="Accept a trace whose timestamps are out of order (sorted stably)."),
    Opt(("--format",), "trace_format", Kind.CHOICE, choices=tuple(FORMAT_NAMES),
        help="Trace layout [default: recognised from the header or first record]."),
    Opt(("--columns",), "columns", metavar="arrival=NAME,prompt=NAME,output=NAME",
        help="Which columns (or JSON keys) hold the arrival time and the token counts."),
    Opt(("--time-unit",), "time_unit", Kind.CHOICE, choices=_values(TimeUnit),
        help="Unit of numeric arrival times [default: the format's: s, or ms for Mooncake]."),
    Opt(("--where",), "where", multiple=True, metavar="COLUMN=VALUE",
        help="Keep only rows whose COLUMN equals VALUE (case-insensitive; repeatable), e.g. model=ChatGPT."),
    Opt(("--keep-failures",), "keep_failures", Kind.FLAG, default=False,
        help="Keep BurstGPT's failed requests (0 response tokens); by default they are left out and counted."),
    Opt(("--find-capacity",), "find_capacity", Kind.FLAG, default=False,
        help="Bisect the largest --rate-scale sustained in steady state (the trace repeated with fresh ids "
             "until a window of many request lifetimes, no queue growing; docs/sweep.md) with zero memory "
             "refusals (or, under --policy queue or an --engine replay, wait p99 under --max-wait)."),
    Opt(("--max-wait",), "max_wait", Kind.NUMBER, high=MAX_WAIT_S,
        help="Seconds: the wait p99 bound for --find-capacity under queue (and with a replayed engine)."),
    Opt(("--max-ttft",), "max_ttft", Kind.NUMBER, high=MAX_WAIT_S,
        help="Seconds: the TTFT p99 bound for --find-capacity with a replayed engine."),
    Opt(("--max-tpot",), "max_tpot", Kind.NUMBER, high=MAX_WAIT_S * 1000,
        help="Milliseconds: the TPOT p99 bound for --find-capacity with a replayed engine."),
    *ROLE_PARAMS,
    Opt(("--transfer-link",), "transfer_link", Kind.NAME, choices=("nvlink", "ib-ndr", "ib-xdr", "roce-400g"),
        help="The link KV moves over from prefill to decode [default: nvlink when both roles fit one NVLink "
             "domain, else ib-ndr]."),
    Opt(("--disaggregation-decode-enable-radix-cache",), "decode_radix_cache", Kind.FLAG, default=False,
        help="SGLang's decode-side radix cache in PD mode: not modelled, refused (the decode side replays "
             "without it, SGLang's default; vLLM's decode side follows --enable-prefix-caching)."),
    Opt(("--kv-offloading-size",), "kv_offloading_size", Kind.NUMBER, high=1e6,
        help="vLLM's host KV tier, as vLLM spells it: GiB of host memory over the TP ranks (its native "
             "offloading connector); prefix hits beyond HBM reload over PCIe / C2C (docs/disaggregation.md)."),
    Opt(("--enable-hierarchical-cache",), "enable_hierarchical_cache", Kind.FLAG, default=False,
        help="SGLang's host KV tier (HiCache), as SGLang spells it [default: off]."),
    Opt(("--hicache-size",), "hicache_size", Kind.NUMBER, high=1e6,
        help="SGLang HiCache: GB of host memory per rank (overrides --hicache-ratio)."),
    Opt(("--hicache-ratio",), "hicache_ratio", Kind.NUMBER, high=1e3,
        help="SGLang HiCache: host pool tokens over the device pool's [default: 2.0]."),
    Opt(("--verify",), "verify", Kind.FLAG, default=False,
        help="Also replay event by event through the ledger and require identical results."),
    Opt(("--brief",), "brief", Kind.FLAG, default=False,
        help="Print only the head: the verdict, requests admitted and refused, "
             "the sustainable rate, requests of max_seq_len that fit."),
    Opt(("--disable-radix-cache",), "disable_radix_cache", Kind.FLAG, default=False,
        help="SGLang's --disable-radix-cache: no prefix sharing in its runtime replay [default: radix cache on]."),
    Opt(("--enable-prefix-caching",), "prefix_caching", Kind.SWITCH, off=("--no-enable-prefix-caching",),
        help="vLLM's prefix caching, as vLLM spells it (runtime-replayed engines) [default: the engine's: on]."),
    Opt(("--json",), "as_json", Kind.FLAG, default=False, help="Print the csa-plan/simulate/v1 JSON document."),
    Opt(("--plot",), "plot_path", metavar="FILE.png",
        help="Draw residency over time per device against its limit (needs matplotlib: csa-plan[plot])."),
    *engine_params(multiple=True),
    *DEPLOYMENT_PARAMS,
    *ENGINE_SPELLING_PARAMS,
)


@bad_input_exits
@with_engine_settings(multiple=True)
@with_deployment
def simulate(workload: str, model: str | None, layout: str | None, max_seq_len: int | None,
             router: str | None, device_memory: int | None,
             reserve: str | None, bucket: int | None, policy: str | None, prefill_tok_s: float | None,
             tpot_ms: float | None, step_time: str | None, max_concurrency: tuple[int, ...] | None,
             spec_acceptance: float | None, rate_scale: float | None,
             sort_rows: bool, trace_format: str | None,
             columns: str | None, time_unit: str | None, where: tuple[str, ...], keep_failures: bool, find_capacity: bool,
             max_wait: float | None, max_ttft: float | None, max_tpot: float | None, disable_radix_cache: bool, verify: bool, prefix_caching: bool | None,
             prefill_workers: int | None, prefill_tp: int | None, decode_workers: int | None,
             decode_tp: int | None, transfer_link: str | None, decode_radix_cache: bool,
             kv_offloading_size: float | None,
             prefill_dp: int | None, prefill_ep: int | None, decode_dp: int | None, decode_ep: int | None,
             enable_hierarchical_cache: bool, hicache_size: float | None, hicache_ratio: float | None,
             brief: bool, as_json: bool, plot_path: str | None, engine: str | None, engines: tuple[str, ...],
             kv_memory: int | None, engine_settings, deployment, budget_plot: str | None) -> int:
    """Replay WORKLOAD (a YAML request mix, or a CSV / JSONL trace: Azure 2023/2024, BurstGPT, Mooncake, ours)
    through per-device ledgers and report peaks, refusals and waits.

    \b
    A JSONL line: {"arrival_s": 0.25, "prompt_tokens": 1200, "output_tokens": 300}
    A CSV trace: TIMESTAMP, ContextTokens, GeneratedTokens (Azure), or --columns.
    A YAML mix: model, requests or duration_s, seed, classes (each with rate,
    prompt and output distributions), and any option below under its own name
    (docs/simulate.md).

    Token counts everywhere: 128k = 128,000 and 128K = 131,072 (vLLM's
    convention), 1e6 and 1,000,000 work too.
    """
    from csa_plan.cli.console import make_consoles
    from csa_plan.cli.emit import emit
    from csa_plan.cli.progress import progress_bar
    from csa_plan.cli.plots import plot_simulate, require_plotting, say_written, write_budget_plot
    from csa_plan.planner.commands.simulate import SimulateRequest, run_simulate
    from csa_plan.planner.workloads import MixSettings, TraceOptions, parse_columns, parse_where

    from csa_plan.planner.files import check_distinct_outputs, check_output_path

    if plot_path is not None:  # before any work: a bad path must not cost a whole simulation
        check_output_path(plot_path, "--plot")
        check_distinct_outputs(("--plot", plot_path), ("--budget-plot", budget_plot))
        require_plotting("--plot")
    consoles = make_consoles()
    d = deployment
    levels = tuple(max_concurrency or ())
    max_concurrency = levels[0] if len(levels) == 1 else None
    given = MixSettings(model=model, layout=layout, max_seq_len=max_seq_len, tp=d.tp, pp=d.pp, dp=d.dp, router=router,
                        device_memory_bytes=device_memory, reserved_bytes=d.reserved_bytes, reserve=reserve,
                        bucket=bucket, policy=policy, prefill_tok_s=prefill_tok_s, tpot_ms=tpot_ms,
                        rate_scale=rate_scale, ep=d.ep, weights_bytes=d.weights_bytes, step_time=step_time,
                        max_concurrency=max_concurrency, spec_acceptance=spec_acceptance)
    trace = TraceOptions(format=trace_format, columns=parse_columns(columns), time_unit=time_unit,
                         where=parse_where(where), keep_failures=keep_failures)
    from csa_plan.planner.serving.disaggregation import disaggregation_from

    disaggregation = disaggregation_from(prefill_workers, prefill_tp, decode_workers, decode_tp, transfer_link,
                                         prefill_dp=prefill_dp, decode_dp=decode_dp, prefill_ep=prefill_ep,
                                         decode_ep=decode_ep, decode_radix_cache=decode_radix_cache)
    from csa_plan.planner.engines.host_tier import HostTierFlags

    host_tier = HostTierFlags(kv_offloading_size, enable_hierarchical_cache, hicache_size, hicache_ratio)
    request = SimulateRequest(workload, given, sort_rows=sort_rows, find_capacity=find_capacity,
                              max_wait_s=max_wait, max_ttft_s=max_ttft, max_tpot_ms=max_tpot, verify=verify, trace=trace, engine=engine,
                              engine_settings=engine_settings, kv_memory_bytes=kv_memory,
                              enable_prefix_caching=False if disable_radix_cache else prefix_caching,
                              engines=engines if len(engines) > 1 else (), disaggregation=disaggregation,
                              host_tier=host_tier if host_tier.given else None,
                              concurrencies=levels if len(levels) > 1 else ())
    show = not as_json and consoles.err.is_terminal
    outcome = run_simulate(request, lambda label, total, long_run: progress_bar(
        consoles.err if show else None, show and long_run, label, total))
    report = outcome.report
    if report.get("frontier") is not None:
        return _frontier_output(consoles, outcome, as_json, plot_path, budget_plot)
    if report.get("side_by_side") is not None:
        return _side_by_side_output(consoles, outcome, as_json, budget_plot)
    plot_note = None
    if plot_path is not None and outcome.series is not None:
        plot_note = plot_simulate(outcome.series, plot_path, title=outcome.title)
        report["plot"] = {"path": plot_path if plot_note is None else None, "note": plot_note}
    elif plot_path is not None and report.get("runtime") is not None:
        from csa_plan.cli.plots import plot_runtime

        plot_note = plot_runtime(report, plot_path, title=outcome.title)
        report["plot"] = {"path": plot_path if plot_note is None else None, "note": plot_note}
    def render(out, r):  # rich and the renderers are imported for tables only
        from csa_plan.cli.render_budget import render_budget
        from csa_plan.cli.render_simulate import render_simulate, render_simulate_head

        budget = r.get("budget")
        runtime = r.get("runtime") is not None
        if budget is not None and not budget["weights_fit"]:
            render_budget(out, budget)  # the answer first: no state pool, nothing was simulated
            if brief:
                return
        elif runtime:
            from csa_plan.cli.render_runtime import render_runtime

            render_runtime(out, r, plot_note=plot_note, brief=brief)  # the engine's own scheduler, replayed
            if r["runtime"].get("host_tier") is not None:
                from csa_plan.cli.render_runtime import render_host_tier

                render_host_tier(out, r["runtime"]["host_tier"])
            if r["runtime"].get("disaggregation") is not None:
                from csa_plan.cli.render_runtime import render_disaggregation

                render_disaggregation(out, r["runtime"]["disaggregation"])
            if brief:
                return
        else:
            from csa_plan.cli.console import whole_lines_when_piped

            with whole_lines_when_piped(out):
                render_simulate_head(out, r)  # the answer first; the detail follows
            if brief:
                return
            out.print()
        if not runtime:
            render_simulate(out, r, series=outcome.series, plot_note=plot_note)
        if budget is not None and budget["weights_fit"]:
            from csa_plan.cli.render_budget import budget_arithmetic

            out.print(f"device limit = the state pool per GPU ({budget['engine']}): {budget_arithmetic(budget)}"
                      " (check shows each step)")

    emit(consoles, report, as_json, render)
    write_budget_plot(consoles, report.get("budget"), budget_plot, as_json)
    if plot_path is not None and plot_note is None and (outcome.series is not None or report.get("runtime")):
        say_written(consoles, "plot", plot_path, as_json)
    return int(outcome.exit_code)


def _frontier_output(consoles, outcome, as_json: bool, plot_path: str | None, budget_plot: str | None) -> int:
    from csa_plan.cli.emit import emit
    from csa_plan.cli.plots import plot_frontier, say_written, write_budget_plot

    report = outcome.report
    note = None
    if plot_path is not None:
        note = plot_frontier(report, plot_path, title=outcome.title)
        report["plot"] = {"path": plot_path if note is None else None, "note": note}

    def render(out, r):
        from csa_plan.cli.render_runtime import render_frontier

        render_frontier(out, r, plot_note=note)

    emit(consoles, report, as_json, render)
    write_budget_plot(consoles, report.get("budget"), budget_plot, as_json)
    if plot_path is not None and note is None:
        say_written(consoles, "frontier plot", plot_path, as_json)
    return int(outcome.exit_code)


def _side_by_side_output(consoles, outcome, as_json: bool, budget_plot: str | None) -> int:
    from csa_plan.cli.emit import emit
    from csa_plan.cli.plots import write_budget_plot

    def render(out, r):
        from csa_plan.cli.render_runtime import render_side_by_side

        render_side_by_side(out, r)

    emit(consoles, outcome.report, as_json, render)
    for doc in outcome.report["side_by_side"]:
        write_budget_plot(consoles, doc.get("budget"), budget_plot, as_json)
        break
    return int(outcome.exit_code)


COMMAND = CommandSpec("simulate", PARAMS, simulate)
