"""Render a sweep: one report dict for --json and for the terminal, and the Pareto plot."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from csa_plan.cli.console import esc
from csa_plan.cli.exit_codes import EXIT_OK
from csa_plan.cli.format import fmt_bytes, fmt_rate, plural
from csa_plan.cli.tables import KEY, TEXT, Col, print_table
from csa_plan.planner.sweep.results import NOT_LIMITED


def render_sweep(out: Console, report: dict[str, Any], top: int = 10, plot_note: str | None = None) -> None:
    """Render an *escaped* report (``cli.console.escaped``, applied by ``cli.emit``)."""
    spec, grid, wl = report["spec"], report["grid"], report["workload"]
    by_key = {r["key"]: r for r in report["results"]}
    out.print(f"[bold]sweep {spec['name']}[/bold]: {wl['source']} ({wl['requests']:,} requests, "
              f"{wl['base_rate_per_s']:.3g} req/s at rate scale 1)")
    cons = spec["constraints"]
    wanted = ["zero refusals" if cons["zero_refusals"] else None,
              f"wait p99 <= {cons['wait_p99_max_s']:g} s" if cons["wait_p99_max_s"] is not None else None,
              f"mean utilization >= {cons['min_mean_utilization']:.0%}" if cons["min_mean_utilization"] else None,
              f"TTFT p99 <= {cons['ttft_p99_max_s']:g} s" if cons.get("ttft_p99_max_s") is not None else None,
              f"TPOT p99 <= {cons['tpot_p99_max_ms']:g} ms" if cons.get("tpot_p99_max_ms") is not None else None]
    out.print(f"  objective: {spec['objective'].replace('_', ' ')}; constraints: "
              + (", ".join(w for w in wanted if w) or "none"))
    labels = sorted({r["runtime"]["step_time"] for r in report["results"] if r.get("runtime")})
    for label in labels[:4]:  # the engine points' clock (the ledger points keep the fixed constants)
        out.print(f"  step time: {label}", highlight=False)
    if len(labels) > 4:
        out.print(f"  step time: {len(labels) - 4} more sources (--json: each point's runtime.step_time)")
    out.print(f"  grid: {grid['points']:,} points; skipped {grid['skipped']:,} before running, "
              f"resumed {grid['resumed']:,}, ran {grid['ran']:,} ({report['executor']}, {report['elapsed_s']:.1f} s"
              + (f", {report['points_per_s']:.2f} points/s" if report["points_per_s"] else "") + ")")
    for reason, count in report["skipped"]["counts"].items():
        first = next(s for s in report["skipped"]["points"] if s["reason"] == reason)
        out.print(f"    skipped {reason}: {count:,} (e.g. {first['label']}: {first['detail']})")
    ranked = report["ranked"]
    unbounded = set(report.get("not_limited_by_memory", []))
    out.print(f"  feasible: {grid['feasible']:,} of {len(report['results']):,} simulated points")
    if any(r.get("runtime") for r in report["results"]) and spec.get("rate_rule"):
        out.print(f"  sustainable means {esc(spec['rate_rule'])}", highlight=False)
    if ranked:
        latency = any(by_key[k].get("runtime") for k in ranked[:top])
        cols = [Col("#", KEY), Col("point", TEXT), Col("devices"), Col("limit per device"), Col("req/s"),
                Col("req/s per device"), Col("wait p99 (s)")] \
            + ([Col("TTFT p99 (s)"), Col("TPOT p99 (ms)")] if latency else []) + [Col("mean util")]
        rows = []
        for i, key in enumerate(ranked[:top], 1):
            r = by_key[key]
            wait = "-" if r["wait_p99_ns"] is None else f"{r['wait_p99_ns'] / 1e9:,.3f}"
            rate, per_dev = _rates(r)
            rt = r.get("runtime") or {}
            ttft = "-" if rt.get("ttft_p99_s") is None else f"{rt['ttft_p99_s']:,.3f}"
            tpot = "-" if rt.get("tpot_p99_s") is None else f"{rt['tpot_p99_s'] * 1000:,.1f}"
            rows.append([str(i), r["label"], f"{r['devices']:,}", f"{r['point']['limit_bytes'] / 2**30:,.1f} GiB",
                         rate, per_dev, wait] + ([ttft, tpot] if latency else []) + [f"{r['mean_utilization']:.1%}"])
        print_table(out, f"ranked ({min(top, len(ranked)):,} of {len(ranked):,})", cols, rows)
        if any(k in unbounded for k in ranked[:top]):
            out.print(f"  {UNBOUNDED_CELL} = {NOT_LIMITED}: every request fits even at the search ceiling "
                      f"(rate scale x{spec['search']['max_scale']:,.0f}), so the trace cannot measure this rate; "
                      "such points are ordered by devices, never by the ceiling")
        replayed = [by_key[k] for k in ranked[:top] if by_key[k].get("runtime") is not None]
        if replayed:
            out.print("  replayed step by step (the engine's own scheduler; docs/sweep.md):", highlight=False)
            for r in replayed:
                rt = r["runtime"]
                ttft = "-" if rt["ttft_p99_s"] is None else f"{rt['ttft_p99_s']:,.3f} s"
                out.print(f"    {esc(r['label'])}: {esc(rt['engine'])} served {rt['served']:,}, "
                          f"{rt['preemptions']:,} preemptions of {rt['preempted_requests']:,} requests "
                          f"({rt['tokens_recomputed']:,} tokens recomputed), TTFT p99 {ttft}, "
                          f"peak {rt['peak_units']:,} of {rt['usable_units']:,} {esc(rt['unit'])}s", highlight=False)
                d = r.get("disaggregation")
                if d:
                    t = d["transfer"]
                    sec = " / ".join("-" if v is None else f"{v * 1000:,.1f}" for v in (t["seconds_p50"],
                                                                                     t["seconds_p99"]))
                    out.print(f"      {esc(d['layout'])}: KV transfer over {esc(d['link'])} (line rate) {sec} ms, "
                              f"{t['bytes']['p50'] or 0:,} / {t['bytes']['p99'] or 0:,} B a request (p50 / p99); "
                              f"prefill peak with the held blocks {t['prefill_peak_units_with_transfer_hold']:,} of "
                              f"{d['prefill']['usable_units']:,}", highlight=False)
                if r.get("steady"):
                    out.print(f"      at the sustainable rate: {esc(r['steady'])}", highlight=False)
    infeasible = [r for r in report["results"] if not r["feasible"]]
    if infeasible:
        out.print(f"  not feasible: {len(infeasible):,} (e.g. {infeasible[0]['label']}: "
                  f"{'; '.join(infeasible[0]['violations'])})")
    render_front_text(out, report)
    if plot_note:
        out.print(f"  plot: {esc(plot_note)}")
    if report["exit_code"] != EXIT_OK and report["answer"] is not None:  # pragma: no cover - they agree
        out.print("[red]inconsistent exit code[/red]")


def render_sweep_head(out: Console, report: dict[str, Any]) -> None:
    """The answer first (the head, ``SweepHead``): the answer point, its devices and sustainable rate,
    its capacity answer, and how many points were feasible."""
    h = report["head"]
    if h["answer_label"] is not None:
        if h["rate_limited_by_memory"] is False:
            how = f"sustainable rate {NOT_LIMITED}"
        else:
            how = (f"sustainable {fmt_rate(h['sustainable_rate_per_s'])} req/s "
                   f"(rate scale {h['sustainable_rate_scale']:,.4g})")
        out.print(f"[bold]answer:[/bold] {h['answer_label']} — {plural(h['devices'], 'device')}, {how} "
                  f"(exit {h['exit_code']})", highlight=False)
        launch = h.get("launch")
        if launch and "text" in launch:
            out.print(f"  launch: {launch['text']}", highlight=False, soft_wrap=True)
        elif launch:  # a disaggregated answer: each role's command
            for role in ("prefill", "decode"):
                out.print(f"  launch {role}: {launch[role]['text']}", highlight=False, soft_wrap=True)
        fit = h["fit"]
        if fit is not None:
            from csa_plan.cli.format import fit_line

            pool = f"state pool ({fmt_bytes(h['limit_bytes'])} per device)"
            out.print(f"  {fit_line(fit, pool, 'its')}", highlight=False)
    else:
        out.print(f"[bold red]no point meets the constraints[/bold red] (exit {h['exit_code']})")
    out.print(f"  feasible: {h['feasible']:,} of {h['simulated']:,} simulated points ({h['points']:,} in the grid, "
              f"{h['skipped']:,} skipped before running); objective {h['objective'].replace('_', ' ')}",
              highlight=False)


UNBOUNDED_CELL = "not limited"


def _rates(r: dict[str, Any]) -> tuple[str, str]:
    """The req/s and req/s/device cells: measured rates, or 'not limited' (never the ceiling)."""
    if r["sustainable_rate_per_s"] is None:
        return "-", "-"
    if not r.get("rate_limited_by_memory", not r["at_least"]):
        return UNBOUNDED_CELL, "-"
    return fmt_rate(r["sustainable_rate_per_s"]), fmt_rate(r["rate_per_device_per_s"])


def render_front_text(out: Console, report: dict[str, Any]) -> None:
    """The Pareto front as text: one line per point, a bar for its sustainable rate."""
    by_key = {r["key"]: r for r in report["results"]}
    front = [by_key[k] for k in report["pareto_front"]]
    unbounded = [by_key[k] for k in report.get("not_limited_by_memory", [])]
    if front:
        out.print("  Pareto front (devices vs measured sustainable rate; more devices only when they buy more rate):")
        top = max(r["sustainable_rate_per_s"] for r in front) or 1.0
        width = max(len(plural(r["devices"], "device")) for r in front)
        for r in front:
            bar = "█" * max(1, round(30 * r["sustainable_rate_per_s"] / top))
            out.print(f"    {plural(r['devices'], 'device'):>{width}}  {fmt_rate(r['sustainable_rate_per_s']):>10} "
                      f"req/s  {bar}  {r['label']}")
    if unbounded:
        first = unbounded[0]
        out.print(f"  {NOT_LIMITED}: {plural(len(unbounded), 'point')} (not on the front: no measured rate); "
                  f"the fewest devices: {first['label']} ({plural(first['devices'], 'device')})")
