"""``csa-plan plan``: the procurement question in one command (issue 45): a rate, request lengths and
latency bounds in; the fewest GPUs per card, the shape and its launch command out."""

from __future__ import annotations

from typing import Any

from csa_plan.cli.error_doc import bad_input_exits
from csa_plan.cli.exit_codes import EXIT_CODES_HELP
from csa_plan.cli.params import Arg, CommandSpec, Kind, Opt

PLAN_EXIT_HELP = EXIT_CODES_HELP + """\b
For plan: 0 some card and shape serve the rate within the bounds, 3 none in the grid does.
"""

PARAMS = (
    Arg("model", metavar="MODEL"),
    Opt(("--rate",), "rate", Kind.NUMBER, high=1e6, help="Requests per second to sustain (a Poisson stream)."),
    Opt(("--isl",), "isl", Kind.COUNT, help="Prompt tokens per request (8192, 8K)."),
    Opt(("--osl",), "osl", Kind.COUNT, help="Output tokens per request (1024, 1K)."),
    Opt(("--ttft-p99",), "ttft_p99", metavar="DURATION", help="Time to first token p99 at most this (2s, 500ms)."),
    Opt(("--tpot-p99",), "tpot_p99", metavar="DURATION", help="Time per output token p99 at most this (50ms)."),
    Opt(("--max-wait",), "max_wait", metavar="DURATION", help="Queue-wait p99 at most this (optional)."),
    Opt(("--device",), "devices", multiple=True, metavar="GPU",
        help="Cards to plan on (repeatable) [default: h200 and b200]."),
    Opt(("--engine",), "engines", multiple=True, metavar="ENGINE", help="Engines (repeatable) [default: vllm-0.33]."),
    Opt(("--tp",), "tps", Kind.COUNTS, help="Tensor-parallel sizes to try [default: 1,2,4,8]."),
    Opt(("--setting",), "settings", multiple=True, metavar="NAME=VALUE",
        help="An engine option every shape runs with, by its name (repeatable): max_num_seqs=256, "
             "num_speculative_tokens=1 (vLLM MTP), max_running_requests=128 (SGLang)."),
    Opt(("--search",), "search", multiple=True, metavar="NAME=V1,V2,...",
        help="An engine option searched over these values (repeatable): max_num_seqs=64,128,256, "
             "num_speculative_tokens=0,1,2 (MTP off and on), expert_parallel=false,true (EP over every GPU), replicas=1,2 (independent servers behind a router); "
             "each shape runs with each combination."),
    Opt(("--disaggregated",), "disaggregated", Kind.FLAG, default=False,
        help="Also search prefill/decode disaggregated layouts (xPyD: every prefill tp x decode tp from --tp, "
             "each role 1, 2, 3 ... up to --max-dp workers, or one worker of dp 2, 4 ... up to --max-dp; the "
             "aggregated dp then takes every count up to "
             "--max-dp too), GPUs counted over both roles; the answer carries each role's launch command "
             "(docs/disaggregation.md)."),
    Opt(("--max-dp",), "max_dp", Kind.COUNT, default=8, show_default=True,
        help="Data-parallel replicas up to this (1, 2, 4, ...; every count with --disaggregated, and each "
             "role's workers up to it)."),
    Opt(("--max-seq-len",), "max_seq_len", Kind.COUNT, help="The engines' context length [default: isl + osl]."),
    Opt(("--requests",), "requests", Kind.COUNT, help="Requests drawn [default: about 300 s of arrivals]."),
    Opt(("--step-time",), "step_time", Kind.CHOICE, choices=("physics", "measured", "fixed"), default="physics",
        show_default=True, help="How long an engine step lasts (docs/steptime.md)."),
    Opt(("--json",), "as_json", Kind.FLAG, default=False, help="Print the csa-plan/plan/v1 JSON document."),
)


@bad_input_exits
def plan(model: str, rate: float | None, isl: int | None, osl: int | None, ttft_p99: str | None,
         tpot_p99: str | None, max_wait: str | None, devices: tuple[str, ...], engines: tuple[str, ...],
         tps: tuple[int, ...] | None, settings: tuple[str, ...], search: tuple[str, ...], disaggregated: bool, max_dp: int, max_seq_len: int | None, requests: int | None, step_time: str,
         as_json: bool) -> int:
    """The fewest GPUs, per card, that serve REQUESTS/s of ISL-in, OSL-out traffic within the TTFT and
    TPOT p99 bounds, in steady state: each card x engine x tp x dp shape is replayed through the engine's
    own scheduler at the rate (the sweep's machinery and its one steady-state rule), fewest GPUs first,
    and a card's search stops at its first count that serves. Prints the answer per card with its
    launch command, and the shapes that lose with why.

    Example: csa-plan plan deepseek-v4-flash --rate 20 --isl 8192 --osl 1024 --ttft-p99 2s --tpot-p99 50ms
    """
    from csa_plan.cli.console import make_consoles
    from csa_plan.cli.emit import emit
    from csa_plan.cli.progress import progress_bar
    from csa_plan.planner.commands.plan import (DEFAULT_DEVICES, DEFAULT_TPS, PlanRequest, parse_duration_s,
                                                parse_search, parse_setting, run_plan)
    from csa_plan.planner.errors import BadInput

    for name, value in (("--rate", rate), ("--isl", isl), ("--osl", osl)):
        if value is None:
            raise BadInput("options", name, "required")
    consoles = make_consoles()
    show = not as_json and consoles.err.is_terminal
    req = PlanRequest(model, float(rate), int(isl), int(osl),
                      None if ttft_p99 is None else parse_duration_s(ttft_p99, "--ttft-p99"),
                      None if tpot_p99 is None else parse_duration_s(tpot_p99, "--tpot-p99"),
                      None if max_wait is None else parse_duration_s(max_wait, "--max-wait"),
                      tuple(devices) or DEFAULT_DEVICES, tuple(engines) or ("vllm-0.33",),
                      tuple(tps) if tps else DEFAULT_TPS, max_dp, max_seq_len, requests, step_time,
                      settings=tuple(parse_setting(t) for t in settings),
                      search=tuple(parse_search(t) for t in search), disaggregated=disaggregated)
    outcome = run_plan(req, lambda label, total: progress_bar(consoles.err if show else None, show, label, total))
    emit(consoles, outcome.report, as_json, render_plan)
    return int(outcome.exit_code)


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1000:,.1f} ms"


def _settings(shape: dict[str, Any]) -> str:
    ep = ", expert parallel" if shape.get("expert_parallel") else ""
    ep += f", x{shape['replicas']} servers behind a router" if (shape.get("replicas") or 1) > 1 else ""
    return ep + "".join(f", {k}={v}" for k, v in (shape.get("settings") or {}).items())


def _shape(s: dict[str, Any]) -> str:
    """``tp 8, dp 2`` for an aggregated shape, ``1P tp8 + 2D tp8`` for a disaggregated one."""
    return f"tp {s['tp']}, dp {s['dp']}" if s.get("layout", "aggregated") == "aggregated" else s["layout"]


def _transfer(s: dict[str, Any]) -> str:
    """A disaggregated shape's transfers in brief (its link, seconds and bytes per request, p50 / p99)."""
    d = s.get("disaggregation")
    if d is None:
        return ""
    t = d["transfer"]
    sec = " / ".join("-" if v is None else f"{v * 1000:,.1f}" for v in (t["seconds_p50"], t["seconds_p99"]))
    byt = " / ".join("-" if v is None else f"{v:,}" for v in (t["bytes"]["p50"], t["bytes"]["p99"]))
    return f"KV transfer over {d['link']} (line rate): {sec} ms, {byt} B a request (p50 / p99)"


def _launches(out: Any, s: dict[str, Any], indent: str) -> None:
    launch = s.get("launch")
    if not launch:
        return
    if "text" in launch:
        out.print(f"{indent}launch: {launch['text']}", highlight=False, soft_wrap=True)
        return
    for role in ("prefill", "decode"):
        out.print(f"{indent}launch {role}: {launch[role]['text']}", highlight=False, soft_wrap=True)


def render_plan(out: Any, r: dict[str, Any]) -> None:
    q = r["question"]
    bounds = [f"TTFT p99 <= {q['ttft_p99_max_s']:g} s" if q["ttft_p99_max_s"] is not None else None,
              f"TPOT p99 <= {q['tpot_p99_max_s'] * 1000:g} ms" if q["tpot_p99_max_s"] is not None else None,
              f"wait p99 <= {q['wait_p99_max_s']:g} s" if q["wait_p99_max_s"] is not None else None]
    out.print(f"plan {q['model']}: {q['rate_per_s']:g} req/s of {q['isl']:,} in / {q['osl']:,} out, "
              + ", ".join(b for b in bounds if b) + f" ({', '.join(q['engines'])}, step time {q['step_time']}"
              + "".join(f", {k}={v}" for k, v in (q.get("settings") or {}).items()) + ")",
              highlight=False)
    for axis in q.get("search") or []:
        out.print(f"  searched {axis['name']} over {', '.join(map(str, axis['values']))}: changes {axis['changes']}",
                  highlight=False)
    a = r["answer"]
    if a is None:
        out.print(f"[bold red]no card and shape in the grid serve it[/bold red] (exit {r['exit_code']})")
    else:
        out.print(f"[bold]answer:[/bold] {a['devices']} x {a['device']} — {_shape(a)}, {a['engine']}"
                  + _settings(a) + " "
                  f"(TTFT p99 {a['ttft_p99_s']:.3f} s, TPOT p99 {_ms(a['tpot_p99_s'])}) (exit {r['exit_code']})",
                  highlight=False)
        if a.get("disaggregation"):
            out.print(f"  {_transfer(a)}", highlight=False)
        _launches(out, a, "  ")
    for c in r["cards"]:
        b = c["answer"]
        if b is None:
            out.print(f"  {c['device']}: no shape tried serves it", highlight=False)
        else:
            out.print(f"  {c['device']}: {b['devices']} GPUs — {_shape(b)}{_settings(b)} (TTFT p99 "
                      f"{b['ttft_p99_s']:.3f} s, TPOT p99 {_ms(b['tpot_p99_s'])})", highlight=False)
            if b.get("disaggregation"):
                out.print(f"    {_transfer(b)}", highlight=False)
            _launches(out, b, "    ")
            if b.get("steady"):
                out.print(f"    {b['steady']}", highlight=False)
        for s in c["runners_up"]:
            why = "; ".join(s["violations"]) or ("serves it too, at the same count" if s["feasible"] else "")
            if s["steady"].startswith("trace too short"):  # say what was seen: lifetimes against the arrivals
                why = s["steady"]
            out.print(f"    {s['devices']:>3} GPUs, {_shape(s)}{_settings(s)}: {why}", highlight=False)
    skipped = r["skipped"]
    if skipped:
        out.print(f"  skipped before replaying: {len(skipped)} shapes (e.g. {skipped[0]['reason']}: "
                  f"{skipped[0]['detail'][:120]})", highlight=False)
    out.print(f"  {r['evaluated'] - r.get('bounded_out', 0)} of {r['grid_points']} shapes replayed"
              f" ({r.get('bounded_out', 0)} more proven short of the rate by the step clock's busy-time bound); {r['workload']['requests']:,} requests, "
              f"{r['workload']['arrivals']}; sustainable means {r['workload']['rate_rule']}", highlight=False)


COMMAND = CommandSpec("plan", PARAMS, plan, epilog=PLAN_EXIT_HELP)
