"""Render an engine runtime replay (``csa-plan/simulate-runtime/v1``): one engine, or several side by side."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from csa_plan.cli.format import plural
from csa_plan.cli.tables import KEY, TEXT, Col, print_table


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:,.3f}"


def _headline(run: dict[str, Any]) -> str:
    pre = run["preemptions"]
    verb = run["engine"].get("preemption_word", "preempt")  # the engine's own word
    return (f"{run['engine']['label']} would {verb} {plural(pre['count'], 'time')}; "
            f"{plural(pre['requests'], 'request')} recomputed ({pre['tokens_recomputed']:,} tokens); "
            f"{run['prefix_cache']['hit_tokens']:,} prompt tokens from the prefix cache")


def render_runtime(out: Console, report: dict[str, Any], plot_note: str | None = None) -> None:
    """Render an *escaped* report (``cli.emit`` escapes it)."""
    wl, dep = report["workload"], report["deployment"]
    out.print(f"[bold]{report['model']['name']}[/bold] on {wl['source']} ({plural(wl['requests'], 'request')}); "
              f"tp {dep['tp']}, one replica", highlight=False)
    for note in wl["notes"]:
        out.print(f"  note: {note}", highlight=False)
    runs = [r for r in report["runs"] if "pools" in r]
    for r in report["runs"]:
        if "pools" not in r:
            out.print(f"  {r['engine']['label']}: the weights do not fit the device; nothing replayed", highlight=False)
    for r in runs:
        out.print(f"  {_headline(r)}", highlight=False)
    if not runs:
        return
    t = runs[0]["time"]
    out.print(f"  time model: a step lasts max(--tpot-ms {t['tpot_ms']:g} ms, its prefill tokens / --prefill-tok-s "
              f"{t['prefill_tok_s']:g}); arrivals x{t['rate_scale']:g}", highlight=False)
    cols = [Col("", KEY)] + [Col(r["engine"]["label"]) for r in runs]
    rows: list[list[str]] = []

    def row(label: str, f) -> None:
        rows.append([label] + [f(r) for r in runs])

    row("KV memory per device (B)", lambda r: f"{r['engine']['kv_memory_bytes']:,}")
    row("requests finished", lambda r: f"{r['finished']:,}")
    row("refused", lambda r: f"{r['refused']:,}")
    row("steps", lambda r: f"{r['steps']:,}")
    row("makespan (s)", lambda r: _s(r["makespan_s"]))
    row("running: max / mean", lambda r: f"{r['running']['max']:,} / {r['running']['mean']:,.1f}")
    row("waiting: max / mean", lambda r: f"{r['waiting']['max']:,} / {r['waiting']['mean']:,.1f}")
    row("requests that waited", lambda r: f"{r['waited']:,}")
    row("preemptions / retractions", lambda r: f"{r['preemptions']['count']:,}")
    row("requests preempted", lambda r: f"{r['preemptions']['requests']:,}")
    row("most for one request", lambda r: f"{r['preemptions']['max_for_one_request']:,}")
    row("tokens recomputed", lambda r: f"{r['preemptions']['tokens_recomputed']:,}")
    row("prefix-cache hit tokens", lambda r: f"{r['prefix_cache']['hit_tokens']:,}")
    row("prefix-cache hit rate", lambda r: f"{100 * r['prefix_cache']['hit_rate']:.1f}%")
    for key, label in (("queue_wait", "queue wait"), ("ttft", "time to first token"), ("e2e", "end to end")):
        row(f"{label} p50 / p99 / max (s)", lambda r, k=key: " / ".join(_s(r[k][q]) for q in ("p50_s", "p99_s", "max_s")))
    width = max(len(r["pools"]) for r in runs)
    for k in range(width):
        row(f"pool {k + 1}: peak / usable units",
            lambda r, k=k: (f"{r['pools'][k]['peak_units']:,} / {r['pools'][k]['usable_units']:,}"
                            if k < len(r["pools"]) and r["pools"][k]["usable_units"] is not None else "-"))
    print_table(out, "side by side" if len(runs) > 1 else None, cols, rows)
    pcols = [Col("engine", KEY), Col("pool", TEXT), Col("usable"), Col("peak"), Col("mean"), Col("at total peak")]
    prow = []
    for r in runs:
        for p in r["pools"]:
            prow.append([r["engine"]["label"], p["pool"], "-" if p["usable_units"] is None else f"{p['usable_units']:,}",
                         f"{p['peak_units']:,}", f"{p['mean_units']:,.1f}", f"{p['at_total_peak_units']:,}"])
    print_table(out, "units in use per pool (pages / blocks)", pcols, prow)
    for r in runs:
        for why, count in r["refused_reasons"].items():
            out.print(f"  {r['engine']['label']}: refused {count:,}: {why}", highlight=False)
        for note in r["notes"]:
            out.print(f"  {note}", highlight=False)
    if plot_note:
        out.print(f"  plot: {plot_note}", highlight=False)
