"""``csa-plan compare``: the same model under every layout profile and engine model, one table."""

from __future__ import annotations


from csa_plan.cli.error_doc import bad_input_exits
from csa_plan.cli.option_groups import DEPLOYMENT_PARAMS, ENGINE_SPELLING_PARAMS, with_deployment
from csa_plan.cli.params import Arg, CommandSpec, Kind, Opt

PARAMS = (
    Arg("model"),
    Opt(("--max-seq-len", "--max-model-len"), "max_seq_len", Kind.COUNT,
        help="Tokens reserved per request: 128k = 128,000, 128K = 131,072 (as vLLM reads them), 1e6, 1,000,000 "
             "[default: max_position_embeddings]."),
    Opt(("--device-memory",), "device_memory", Kind.SIZE,
        help="Per-device memory for the 'requests that fit' row: bytes, 141GB, 80GiB or a GPU name."),
    Opt(("--layout",), "layouts", multiple=True, metavar="NAME",
        help="Only these layout profiles (repeatable) [default: every profile and engine]."),
    Opt(("--engine",), "engines", multiple=True, metavar="NAME",
        help="Only these engine models (repeatable), at their defaults [default: every profile and engine]."),
    Opt(("--batch",), "batch", Kind.COUNT, help="Sequences per state group [default: 1]."),
    Opt(("--query-len",), "query_len", Kind.COUNT, default=1, show_default=True,
        help="Tokens per step (scratch, in-flight window slots)."),
    Opt(("--brief",), "brief", Kind.FLAG, default=False,
        help="Print only the head: the verdict and each row's requests that fit."),
    Opt(("--json",), "as_json", Kind.FLAG, default=False, help="Print the csa-plan/compare/v1 JSON document."),
    Opt(("--plot",), "plot_file", metavar="FILE.png",
        help="Also draw bytes per request against context length, one line per profile (needs the [plot] extra)."),
    *DEPLOYMENT_PARAMS,
    *ENGINE_SPELLING_PARAMS,
)


@bad_input_exits
@with_deployment
def compare(model: str, max_seq_len: int | None, device_memory: int | None,
            layouts: tuple[str, ...], engines: tuple[str, ...], batch: int | None, query_len: int, brief: bool,
            as_json: bool,
            plot_file: str | None, deployment, budget_plot: str | None) -> int:
    """Compare MODEL (a preset, config.json, model directory, YAML spec or ONNX graph) under
    every layout profile: bytes per request, asymptotic bytes per token, fixed cost per
    request, padding waste, difference to exact, and requests that fit.

    \b
    Layouts: exact (the contract's bytes), onnx-genai-b6, bf16-reference; engines
    (--engine): vllm-0.33, sglang-0.5.23 and the others `check --engine` lists.
    docs/compare.md and docs/engines.md.

    Exit 3 when a layer is refused (it is left out of every column) or when not even
    one request fits the given memory under some profile."""
    from csa_plan.cli.console import make_consoles
    from csa_plan.cli.emit import emit
    from csa_plan.cli.plots import plot_compare, require_plotting, say_written, write_budget_plot
    from csa_plan.planner.commands.compare import CompareRequest, run_compare
    from csa_plan.planner.plan import PlanOptions

    if budget_plot is not None and device_memory is None:  # refused before any work, never a note after it
        from csa_plan.planner.errors import BadInput

        raise BadInput("options", "--budget-plot", "draws the device budget: name a device (--device-memory)")
    if plot_file is not None:
        from csa_plan.planner.files import check_distinct_outputs, check_output_path

        check_output_path(plot_file, "--plot")
        check_distinct_outputs(("--plot", plot_file), ("--budget-plot", budget_plot))
        require_plotting("--plot")

    options = PlanOptions(max_seq_len=max_seq_len, batch=batch, query_len=query_len,
                          tp=1 if deployment.tp is None else deployment.tp)
    outcome = run_compare(CompareRequest(model, options, layouts, device_memory, deployment.reserved_bytes or 0,
                                         engines, deployment=deployment))
    consoles = make_consoles()

    def render(out, report):  # rich and the renderers are imported for tables only
        from csa_plan.cli.render_budget import render_budget
        from csa_plan.cli.render_compare import render_compare, render_compare_head

        from csa_plan.cli.console import whole_lines_when_piped

        with whole_lines_when_piped(out):
            render_compare_head(out, report)  # the answer first; the detail follows
        if brief:
            return
        out.print()
        budgets = [("layout profiles", report["budget"]), *(report.get("engine_budgets") or {}).items()] \
            if report.get("budget") else []
        for _, b in budgets:  # a deployment whose weights do not fit says so first
            if not b["weights_fit"]:
                render_budget(out, b)
        render_compare(out, report)
        from csa_plan.cli.render_budget import budget_arithmetic

        for row, b in budgets:  # each row's pool, under the sharding rules it was sized by
            if b["weights_fit"]:
                out.print(f"state pool per GPU ({row}, {b['engine']} rules): {budget_arithmetic(b)} "
                          "(check --device-memory ... --engine NAME shows each step)")

    emit(consoles, outcome.report, as_json, render)
    write_budget_plot(consoles, outcome.report.get("budget"), budget_plot, as_json)
    if plot_file is not None:
        plot_compare(outcome.spec, options, (layouts + engines) or None, plot_file)
        say_written(consoles, "plot", plot_file, as_json)
    return int(outcome.exit_code)


COMMAND = CommandSpec("compare", PARAMS, compare)
