"""Render a sweep: one report dict for --json and for the terminal, and the Pareto plot."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


from csa_plan.cli.exit_codes import EXIT_OK
from csa_plan.cli.format import fmt_rate


def render_sweep(out: Console, report: dict[str, Any], top: int = 10, plot_note: str | None = None) -> None:
    spec, grid, wl = report["spec"], report["grid"], report["workload"]
    by_key = {r["key"]: r for r in report["results"]}
    out.print(f"[bold]sweep {spec['name']}[/bold]: {wl['source']} ({wl['requests']:,} requests, "
              f"{wl['base_rate_per_s']:.3g} req/s at rate scale 1)")
    cons = spec["constraints"]
    wanted = ["zero refusals" if cons["zero_refusals"] else None,
              f"wait p99 <= {cons['wait_p99_max_s']:g} s" if cons["wait_p99_max_s"] is not None else None,
              f"mean utilization >= {cons['min_mean_utilization']:.0%}" if cons["min_mean_utilization"] else None]
    out.print(f"  objective: {spec['objective'].replace('_', ' ')}; constraints: "
              + (", ".join(w for w in wanted if w) or "none"))
    out.print(f"  grid: {grid['points']:,} points; skipped {grid['skipped']:,} before running, "
              f"resumed {grid['resumed']:,}, ran {grid['ran']:,} ({report['executor']}, {report['elapsed_s']:.1f} s"
              + (f", {report['points_per_s']:.2f} points/s" if report["points_per_s"] else "") + ")")
    for reason, count in report["skipped"]["counts"].items():
        first = next(s for s in report["skipped"]["points"] if s["reason"] == reason)
        out.print(f"    skipped {reason}: {count:,} (e.g. {first['label']}: {first['detail']})")
    ranked = report["ranked"]
    out.print(f"  feasible: {grid['feasible']:,} of {len(report['results']):,} simulated points")
    if ranked:
        table = Table(title=f"ranked ({min(top, len(ranked))} of {len(ranked)})", show_header=True)
        for col, just in (("#", "right"), ("point", "left"), ("devices", "right"), ("limit/dev", "right"),
                          ("req/s", "right"), ("req/s/dev", "right"), ("wait p99", "right"), ("mean util", "right")):
            table.add_column(col, justify=just)
        for i, key in enumerate(ranked[:top], 1):
            r = by_key[key]
            wait = "-" if r["wait_p99_ns"] is None else f"{r['wait_p99_ns'] / 1e9:.3f} s"
            table.add_row(str(i), r["label"], str(r["devices"]), f"{r['point']['limit_bytes'] / 2**30:.1f} GiB",
                          fmt_rate(r["sustainable_rate_per_s"], r["at_least"]),
                          fmt_rate(r["rate_per_device_per_s"], r["at_least"]), wait, f"{r['mean_utilization']:.1%}")
        out.print(table)
    infeasible = [r for r in report["results"] if not r["feasible"]]
    if infeasible:
        out.print(f"  not feasible: {len(infeasible):,} (e.g. {infeasible[0]['label']}: "
                  f"{'; '.join(infeasible[0]['violations'])})")
    render_front_text(out, report)
    if plot_note:
        out.print(f"  plot: {plot_note}")
    ans = report["answer"]
    if ans is not None:
        out.print(f"[bold]answer:[/bold] {ans['label']} — {ans['devices']} devices, sustainable "
                  f"{fmt_rate(ans['sustainable_rate_per_s'], ans['at_least'])} req/s "
                  f"(rate scale {ans['sustainable_rate_scale']:.4g}) (exit {report['exit_code']})")
    else:
        out.print(f"[bold red]no point meets the constraints[/bold red] (exit {report['exit_code']})")
    if report["exit_code"] != EXIT_OK and ans is not None:  # pragma: no cover - exit code and answer agree
        out.print("[red]inconsistent exit code[/red]")


def render_front_text(out: Console, report: dict[str, Any]) -> None:
    """The Pareto front as text: one line per point, a bar for its sustainable rate."""
    by_key = {r["key"]: r for r in report["results"]}
    front = [by_key[k] for k in report["pareto_front"]]
    if not front:
        return
    out.print("  Pareto front (devices vs sustainable rate; more devices only when they buy more rate):")
    top = max(r["sustainable_rate_per_s"] for r in front) or 1.0
    for r in front:
        bar = "█" * max(1, round(30 * r["sustainable_rate_per_s"] / top))
        out.print(f"    {r['devices']:>4} devices  {fmt_rate(r['sustainable_rate_per_s'], r['at_least']):>10} req/s  "
                  f"{bar}  {r['label']}")
