"""Render a simulation: one report dict for --json and for the terminal."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from csa_plan.cli.console import esc
from csa_plan.cli.tables import KEY, Col, print_table

from csa_plan.cli.exit_codes import EXIT_OK
from csa_plan.cli.format import fmt_bytes, plural
from csa_plan.planner.reports.text import id_runs



MAX_DEVICE_ROWS = 64
"""Rows of the per-device table, residency lines and request-class lines on the terminal: the text
stays bounded at any deployment or mix size (44,032 devices printed 12.5 MB in 80 s); --json
carries every device and class."""


def _more(out: Console, count: int, what: str, each: str = "device") -> None:
    if count > MAX_DEVICE_ROWS:
        out.print(f"  ... {count - MAX_DEVICE_ROWS:,} more {what} (MAX_DEVICE_ROWS = {MAX_DEVICE_ROWS}; --json has "
                  f"every {each})")


def render_simulate(out: Console, report: dict[str, Any], series=None, plot_note: str | None = None) -> None:
    """Render an *escaped* report (``cli.console.escaped``, applied by ``cli.emit``)."""
    dep, mem = report["deployment"], report["memory"]
    limit = mem["limit_bytes"]
    out.print(f"[bold]{report['model']['name']}[/bold] on {report['workload']['source']} "
              f"({plural(report['workload']['requests'], 'request')})")
    for note in report["workload"]["notes"]:
        out.print(f"  note: {note}")
    split = f", stages {dep['stage_split']}" if "stage_split" in dep else ""
    out.print(f"  deployment: tp {dep['tp']} x pp {dep['pp']} x dp {dep['dp']} = {plural(dep['devices'], 'device')}"
              f" ({dep['router']}){split}")
    engine = report.get("engine")
    engine_named = (report.get("fit") or {}).get("authority", "").startswith("engine:")
    replayed = engine.get("replayed") if engine else engine_named  # None: the engine refused, nothing ran
    reserve = "" if replayed else (  # an engine's own scheduler reserves and queues: csa-plan's model is not it
        f"; reserve {report['reserve']['mode']}"
        + (f" (bucket {report['reserve']['bucket']:,})" if report['reserve']['mode'] == "fit" else "")
        + f"; policy {report['policy']}")
    out.print(f"  limit per device: {'unlimited' if not limit else fmt_bytes(limit)}{reserve}; "
              f"time x{report['time']['rate_scale']:g}")
    if engine:
        pool = engine["pool"]
        unit = f"{pool['unit']}s of {pool['unit_bytes']:,} B" if pool else f"units of {engine['unit_bytes']:,} B"
        held = f"{pool['usable_units']:,} {unit} usable" if pool else unit
        cap = f", at most {engine['max_running']:,} running per replica" if engine.get("max_running") else ""
        out.print(f"  engine: {engine['name']} ({engine['engine']} {engine['version']}): charges what the engine "
                  f"charges, {held}{cap}", highlight=False)
    refused = report.get("engine_refusal")
    if refused:
        out.print(f"[red]REFUSED (exit 3): {refused['engine']} refuses this configuration; nothing was "
                  "simulated:[/red]")
        out.print(f"  {refused['setting']}: {refused['message']}", highlight=False)
        return
    if report["plan_refusals"]:
        out.print("[red]the model plan is refused; no request can run:[/red]")
        for r in report["plan_refusals"]:
            out.print(f"  {r['message']}")
        return
    cap = report.get("capacity")
    if cap is not None:
        if cap["rate_scale"] is None and cap.get("too_short"):
            out.print(f"[red]capacity: {cap['too_short']}[/red]", highlight=False)
        elif cap["rate_scale"] is None:
            out.print(f"[red]capacity: no rate scale down to {cap['floor_rate_scale']:.4g} meets the criterion "
                      f"(the floor: {cap['floor']})[/red]")
        else:
            if cap["at_least"]:
                out.print(f"[bold]capacity:[/bold] not limited by memory within this trace: the search reached its "
                          f"ceiling, rate scale {cap['rate_scale']:,.4g}, with {cap['criterion']} "
                          f"({plural(len(cap['probes']), 'probe')}); the report below is at that scale")
            else:
                out.print(f"[bold]capacity:[/bold] rate scale {cap['rate_scale']:,.4g}{_per_s(cap)} ({cap['criterion']}; "
                          f"{plural(len(cap['probes']), 'probe')}); the report below is at that scale")
            _steady_lines(out, cap)
    if "requests" not in report:
        return
    req = report["requests"]
    out.print(f"  requests: {req['admitted']:,} admitted, {req['refused']:,} refused, {req['queued']:,} waited")
    for reason, count in req["refusals"].items():
        out.print(f"    refused {reason}: {count:,}")
    if len(req["by_class"]) > 1:
        for c in req["by_class"][:MAX_DEVICE_ROWS]:
            out.print(f"    class {c['class']}: {c['admitted']:,} admitted, {c['refused']:,} refused")
        _more(out, len(req["by_class"]), "request classes", "class")
    w = report["wait_s"]
    if w["p50"] is not None:
        out.print(f"  wait: p50 {w['p50']:,.3f} s, p99 {w['p99']:,.3f} s, max {w['max']:,.3f} s")
    pk = report["peak"]
    out.print(f"  peak, all devices: {fmt_bytes(pk['bytes'])} at {pk['at_s']:,.3f} s; "
              f"{plural(pk['in_flight'], 'request')} in flight at most")
    print_table(out, "per class (all devices)", [Col("class", KEY), Col("at the total peak"), Col("own maximum")],
                [[name, f"{value:,}", f"{pk['class_max'][name]:,}"] for name, value in pk["by_class"].items()])
    rows = []
    groups: dict[tuple, list[int]] = {}
    for d in report["devices"]:
        key = (d["replica"], d["stage"], d["peak_bytes"], d["peak_at_ns"], d["mean_utilization"], d["final_bytes"])
        groups.setdefault(key, []).append(d["device"])
    by_device = {d["device"]: d for d in report["devices"]}
    shown = list(groups.values())
    for ids in shown[:MAX_DEVICE_ROWS]:
        d = by_device[ids[0]]
        pct = (lambda v: "-" if v is None else f"{v:.1%}")
        rows.append([id_runs(ids), str(d["stage"]), fmt_bytes(d["peak_bytes"]),
                     "-" if d["peak_at_s"] is None else f"{d['peak_at_s']:,.3f}",
                     pct(d["mean_utilization"]), pct(d["peak_utilization"]), f"{d['final_bytes']:,}"])
    print_table(out, "per device", [Col("devices", KEY), Col("stage"), Col("peak bytes"), Col("at s"),
                                    Col("mean util"), Col("peak util"), Col("final")], rows)
    _more(out, len(shown), "rows of the per-device table")
    if series is not None:
        from csa_plan.planner.reserve.series import sparkline

        for devices, values in series.groups[:MAX_DEVICE_ROWS]:
            top = series.limit_bytes or int(values.max())
            out.print(f"  {id_runs(list(devices)):>9} {sparkline(values, top)}")
        _more(out, len(series.groups), "residency lines")
        top = int(series.in_flight.max()) if len(series.in_flight) else 0
        out.print(f"  {'in flight':>9} {sparkline(series.in_flight, top)}")
    if plot_note:
        out.print(f"  plot: {esc(plot_note)}")
    baseline = "every device back at baseline (0 bytes)" if report["baseline_ok"] else "[red]NOT back at baseline[/red]"
    out.print(f"  teardown: {baseline}")
    if report["verified_against_ledger_replay"] is not None:
        ok = report["verified_against_ledger_replay"]
        out.print("  verify: " + ("identical to the event-by-event ledger replay" if ok
                                  else "[red]DIFFERS from the ledger replay[/red]"))
    verdict = "every request admitted" if report["exit_code"] == EXIT_OK else "some requests refused"
    out.print(f"[bold]{verdict}[/bold] (exit {report['exit_code']})")


def _per_s(cap: dict[str, Any]) -> str:
    from csa_plan.cli.format import fmt_rate

    return f" = {fmt_rate(cap['rate_per_s'])} req/s" if cap.get("rate_per_s") else ""


def render_simulate_head(out: Console, report: dict[str, Any]) -> None:
    """The answer first: the verdict and exit code, the requests admitted and refused, the rate the
    search found, and the requests of max_seq_len that fit the state pool (with its authority)."""
    code = report["exit_code"]
    refused = report.get("engine_refusal")
    if refused or report["plan_refusals"]:
        why = f"{refused['engine']} refuses this configuration" if refused else "the model plan is refused"
        out.print(f"[red]REFUSED[/red] (exit {code}): {why}; nothing was simulated", highlight=False)
    elif "requests" in report:
        req = report["requests"]
        if req["refused"]:
            reasons = ", ".join(f"{k} {v:,}" for k, v in req["refusals"].items())
            out.print(f"[red]REFUSED[/red] (exit {code}): {req['refused']:,} of {req['total']:,} requests refused "
                      f"({reasons})", highlight=False)
        else:
            out.print(f"[green]ADMITTED[/green] (exit {code}): all {req['total']:,} requests admitted"
                      + (f", {req['queued']:,} after waiting" if req["queued"] else ""), highlight=False)
    elif report.get("capacity") is not None:
        out.print(f"[red]NO SUSTAINABLE RATE[/red] (exit {code}): no rate scale meets the criterion", highlight=False)
    else:
        out.print(f"[red]NO ANSWER[/red] (exit {code})", highlight=False)
    cap = report.get("capacity")
    if cap is not None:
        if cap["rate_scale"] is None:
            out.print(f"  sustainable rate scale: none down to {cap['floor_rate_scale']:.4g} ({cap['floor']})",
                      highlight=False)
        else:
            out.print(f"  sustainable rate scale: {'at least ' if cap['at_least'] else ''}{cap['rate_scale']:,.4g}"
                      f"{_per_s(cap)} ({cap['criterion']})", highlight=False)
    fit = report.get("fit")
    if fit is not None:
        from csa_plan.cli.format import fit_line

        out.print(f"  {fit_line(fit, 'state pool')}", highlight=False)


def _steady_lines(out: Console, cap: dict[str, Any]) -> None:
    """The steady-state window the capacity was judged on (planner/steady.py)."""
    st = cap.get("steady")
    if st:
        out.print(f"  steady: a window of {st['window_lifetimes']:.1f} request lifetimes of {st['lifetime_s']:.3g} s "
                  f"(arrivals {st['window_s'][0]:,.1f}–{st['window_s'][1]:,.1f} s); {st['arrived']:,} "
                  f"requests against their copies one trace earlier: {st['lifetime_growth_s']:+.3g} s (median)",
                  highlight=False)
    if cap.get("copies", 1) > 1:
        out.print(f"  the run below is {cap['copies']} copies of the trace: {cap['extension']}", highlight=False)
    if cap.get("undetermined_above") is not None:
        out.print(f"  at least: at x{cap['undetermined_above']:.4g} the trace, extended as far as it may be, is too "
                  "short to say", highlight=False)
