"""``csa-plan check``: gate, lay out and total a model, optionally against device memory."""

from __future__ import annotations


from csa_plan.cli.error_doc import bad_input_exits
from csa_plan.cli.option_groups import DEPLOYMENT_PARAMS, ROLE_PARAMS, ENGINE_SPELLING_PARAMS, engine_params, with_deployment, with_engine_settings
from csa_plan.cli.params import Arg, CommandSpec, Kind, Opt
from csa_plan.planner.descriptor import CACHE_FORMAT_NAMES, INDEX_KEY_FORMAT_NAMES, RECORD_FORMAT_NAMES
from csa_plan.planner.profiles import PROFILES
from csa_plan.planner.gate import Gate
from csa_plan.planner.loaders.model_files import DEFAULT_LINT_LENGTH

PARAMS = (
    Arg("model"),
    Opt(("--gate",), "gate", Kind.NAME, choices=tuple(g.value for g in Gate),
        help="op: ratios 4 and 128; c1: the C1 runtime slice (HCA only) "
             "[default: the spec's own 'gate:', else op]."),
    Opt(("--layout",), "layout", default="exact", show_default=True, metavar="NAME",
        help=f"Layout profile: {', '.join(PROFILES)} (docs/compare.md); engines: --engine."),
    Opt(("--max-seq-len", "--max-model-len"), "max_seq_len", Kind.COUNT,
        help="Tokens reserved per request: 128k = 128,000, 128K = 131,072 (as vLLM reads them), 1e6, 1,000,000 "
             "[default: max_position_embeddings]."),
    Opt(("--batch",), "batch", Kind.COUNT, help="Sequences per state group [default: 1]."),
    Opt(("--kv-format",), "kv_format", Kind.CACHE_FORMAT,
        help=f"Cache format override: {', '.join(CACHE_FORMAT_NAMES)}; shared-state (V4.1) records: "
             f"{', '.join(RECORD_FORMAT_NAMES)}."),
    Opt(("--index-key-format",), "index_key_format", Kind.NAME, choices=INDEX_KEY_FORMAT_NAMES,
        help="Index-key format of a shared-state (V4.1) model: mxfp4 (68 B) or fp8 (132 B) [default: mxfp4]."),
    Opt(("--window",), "window", Kind.COUNT, help="Sliding-window override [default: the model's]."),
    Opt(("--query-len",), "query_len", Kind.COUNT, default=1, show_default=True,
        help="Tokens per step for scratch workspaces."),
    Opt(("--device-memory",), "device_memory", Kind.SIZE,
        help="Per-device memory: bytes, 141GB, 80GiB, or h200/h100/a100-80gb/..."),
    Opt(("--concurrency",), "concurrency", Kind.COUNT, default=1, show_default=True,
        help="Concurrent requests for the longest-context answer."),
    Opt(("--at-length",), "at_length", Kind.COUNT, default=DEFAULT_LINT_LENGTH, show_default=True,
        help="ONNX lint: total length at which record-axis conflicts are named."),
    Opt(("--per-layer",), "per_layer", Kind.FLAG, default=False,
        help="List every layer instead of grouping identical ones."),
    Opt(("--brief",), "brief", Kind.FLAG, default=False,
        help="Print only the head: verdict, requests that fit, longest context, "
             "the engine's log line, the state pool, every refusal."),
    Opt(("--json",), "as_json", Kind.FLAG, default=False,
        help="Print the csa-plan/check/v2 JSON document (docs/answers.md)."),
    *engine_params(),
    *DEPLOYMENT_PARAMS,
    *ENGINE_SPELLING_PARAMS,
    Opt(("--host-memory",), "host_memory", Kind.SIZE,
        help="Host memory of one node (Engram tables an engine keeps on the host) [default: the card's node, "
             "2 TB for DGX H100/H200/B200; else none]."),
    Opt(("--engram-config",), "engram_config", metavar="JSON",
        help="vLLM's --engram-config: '{\"cpu_offload\": false}' moves the Engram tables to the GPUs "
             "[default: cpu_offload true]."),
    Opt(("--enable-dsv41-engram-host-table",), "engram_host_table", Kind.FLAG, default=None,
        help="SGLang run with SGLANG_ENABLE_DSV41_ENGRAM_HOST_TABLE=1: the Engram tables in host memory "
             "[default: off, on the GPUs]."),
    *ROLE_PARAMS,
    Opt(("--kv-offloading-size",), "kv_offloading_size", Kind.NUMBER, high=1e6,
        help="vLLM's host KV tier (GiB over the TP ranks): its capacity in tokens of reusable prefix."),
    Opt(("--enable-hierarchical-cache",), "enable_hierarchical_cache", Kind.FLAG, default=False,
        help="SGLang's host KV tier (HiCache): its capacity in tokens of reusable prefix."),
    Opt(("--hicache-size",), "hicache_size", Kind.NUMBER, high=1e6, help="SGLang HiCache: GB of host memory per rank."),
    Opt(("--hicache-ratio",), "hicache_ratio", Kind.NUMBER, high=1e3,
        help="SGLang HiCache: host pool tokens over the device pool's [default: 2.0]."),
    Opt(("--from-log",), "from_log", metavar="FILE",
        help="A vLLM or SGLang start-up log of this model, release, GPU and TP: calibrate the start-up terms "
             "on it and show what it implies beside the prediction (docs/device-budget.md)."),
)


def refuse_unused_check_options(model: str, at_length: int, per_layer: bool, brief: bool, as_json: bool) -> None:
    """Options that cannot change this check's answer are refused, not dropped (issue 47)."""
    from csa_plan.planner.errors import BadInput
    from csa_plan.planner.text import excerpt

    if at_length != DEFAULT_LINT_LENGTH and not str(model).lower().endswith(".onnx"):
        raise BadInput("options", "--at-length", "the length at which an ONNX graph's record axes are linted; "
                                                 f"{excerpt(str(model))} is no ONNX graph, so it would change nothing")
    if per_layer and (brief or as_json):
        raise BadInput("options", "--per-layer", "lists every layer in the text tables; "
                                                 f"{'--brief prints only the head' if brief else '--json has every layer already'}"
                                                 ", so it would change nothing")


@bad_input_exits
@with_engine_settings
@with_deployment
def check(model: str, gate: str | None, layout: str, max_seq_len: int | None, batch: int | None, kv_format: str | None,
          window: int | None, query_len: int, device_memory: int | None,
          concurrency: int, at_length: int, per_layer: bool, brief: bool, as_json: bool, engine: str | None,
          kv_memory: int | None, engine_settings, deployment, budget_plot: str | None,
          from_log: str | None = None, index_key_format: str | None = None, prefill_workers: int | None = None,
          prefill_tp: int | None = None, decode_workers: int | None = None, decode_tp: int | None = None,
          prefill_dp: int | None = None, prefill_ep: int | None = None, decode_dp: int | None = None,
          decode_ep: int | None = None,
          kv_offloading_size: float | None = None, enable_hierarchical_cache: bool = False,
          hicache_size: float | None = None, hicache_ratio: float | None = None, host_memory: int | None = None,
          engram_config: str | None = None, engram_host_table: bool | None = None) -> int:
    """Check MODEL: a preset (deepseek-v4-flash, deepseek-v4-pro), a config.json, a model
    directory, a YAML model spec or an ONNX graph."""
    from csa_plan.cli.console import make_consoles
    from csa_plan.cli.emit import emit
    from csa_plan.planner.commands.check import CheckRequest, run_check
    from csa_plan.planner.plan import PlanOptions


    refuse_unused_check_options(model, at_length, per_layer, brief, as_json)
    if engine_settings.load_balance_method is not None:  # a replay's dispatch: check sizes memory, it changes none
        from csa_plan.planner.errors import BadInput

        raise BadInput("options", "--load-balance-method", "spreads requests over data-parallel ranks in simulate's "
                                                           "replay; check sizes memory, which it does not change")
    if budget_plot is not None and device_memory is None:  # refused before any work, never a note after it
        from csa_plan.planner.errors import BadInput

        raise BadInput("options", "--budget-plot", "draws the device budget: name a device (--device-memory or --gpu)")
    if from_log is not None:
        if device_memory is None:
            from csa_plan.planner.errors import BadInput

            raise BadInput("options", "--from-log", "needs a device (--device-memory or --gpu) to budget")
        from dataclasses import replace

        deployment = replace(deployment, from_log=from_log)
    if (host_memory, engram_config, engram_host_table) != (None, None, None):
        from dataclasses import replace

        deployment = replace(deployment, host_memory_bytes=host_memory, engram_config=engram_config,
                             engram_host_table=engram_host_table)
    from csa_plan.planner.serving.disaggregation import disaggregation_from

    roles = disaggregation_from(prefill_workers, prefill_tp, decode_workers, decode_tp, None, prefill_dp=prefill_dp,
                                decode_dp=decode_dp, prefill_ep=prefill_ep, decode_ep=decode_ep)
    options = PlanOptions(gate=Gate(gate or Gate.OP.value), layout=layout, max_seq_len=max_seq_len, batch=batch, cache_format=kv_format,
                          index_key_format=index_key_format, window=window, query_len=query_len, tp=1 if deployment.tp is None else deployment.tp)
    request = CheckRequest(model, options, device_memory, deployment.reserved_bytes or 0, concurrency,
                           at_length, engine=engine, engine_settings=engine_settings,
                           kv_memory_bytes=kv_memory, deployment=deployment,
                           gate_from_spec=gate is None,
                           length_question=max_seq_len is None and concurrency > 1)
    from csa_plan.planner.engines.host_tier import HostTierFlags

    flags = HostTierFlags(kv_offloading_size, enable_hierarchical_cache, hicache_size, hicache_ratio)
    if roles is not None:
        if flags.given:
            from csa_plan.planner.errors import BadInput

            raise BadInput("options", "--kv-offloading-size" if kv_offloading_size is not None else
                           "--enable-hierarchical-cache", "check one role at a time for its host tier (--tp of it)")
        return _check_roles(request, roles, brief, as_json, budget_plot)
    outcome = run_check(request)
    if flags.given:
        from csa_plan.planner.commands.host_tier import host_tier_answer

        outcome.report["host_tier"] = host_tier_answer(request, outcome.report, flags)

    def render(out, report):  # rich and the renderers are imported for tables only
        from csa_plan.cli.render_budget import render_budget
        from csa_plan.cli.render_check import render_check, render_head
        from csa_plan.cli.render_engine import render_engine

        from csa_plan.cli.console import whole_lines_when_piped

        with whole_lines_when_piped(out):
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
        if report.get("host_tier") is not None:
            h = report["host_tier"]
            out.print(f"host KV tier ({h['flag']}): {h['capacity_tokens']:,} tokens of reusable prefix "
                      f"({h['host_bytes_per_gpu']:,} B per GPU at {h['bytes_per_token']:,.0f} B per token), "
                      f"reloaded over {h['link']} ({h['link_bytes_s'] / 1e9:g} GB/s per GPU); running requests "
                      "stay in HBM: the tier adds no concurrency")

    consoles = make_consoles()
    if from_log is not None:  # what the log's reading did not take word for word, whatever the output form
        from csa_plan.cli.stream import echo

        for note in ((outcome.report.get("budget") or {}).get("calibration") or {}).get("notes", ()):
            echo(f"note: --from-log: {note}", err=True)
    emit(consoles, outcome.report, as_json, render)
    if budget_plot is not None:
        from csa_plan.cli.plots import write_budget_plot

        write_budget_plot(consoles, outcome.report.get("budget"), budget_plot, as_json)
    return int(outcome.exit_code)


def _check_roles(request, roles, brief: bool, as_json: bool, budget_plot: str | None) -> int:
    """Each role's check from its own deployment (planner/commands/disaggregated.py), one after the other."""
    from csa_plan.cli.console import make_consoles
    from csa_plan.cli.emit import emit
    from csa_plan.planner.commands.disaggregated import run_check_roles

    report, code = run_check_roles(request, roles, budget_plot)

    def render(out, doc):
        from csa_plan.cli.render_budget import render_budget
        from csa_plan.cli.render_check import render_head
        from csa_plan.cli.render_engine import render_engine

        for name in ("prefill", "decode"):
            role = doc["disaggregation"][name]
            out.print(f"{name} role: {role['workers']} x {role['shape']} ({role['gpus']} GPUs)")
            r = role["check"]
            render_head(out, r)
            if brief:
                continue
            out.print()
            if r.get("engine"):
                render_engine(out, r["model"], r["engine"])
            if r.get("budget") is not None:
                render_budget(out, r["budget"], head_shown=True)
            out.print()

    emit(make_consoles(), report, as_json, render)
    return int(code)


COMMAND = CommandSpec("check", PARAMS, check)
