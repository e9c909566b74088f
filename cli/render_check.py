"""Render a check report (the ``--json`` document) as rich tables."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from csa_plan.cli.format import fmt_bytes
from csa_plan.planner.reports.text import id_runs

CLASSES = ("compressed", "carry", "index", "index_carry", "dense_ring", "scratch")
HEADERS = ("compressed", "carry", "index", "idx carry", "ring", "scratch")


def render_check(console: Console, report: dict[str, Any], *, per_layer: bool = False) -> None:
    m, o = report["model"], report["options"]
    console.print(
        f"[bold]{m['name']}[/]  ({m['source']})  gate={o['gate']}  max_seq_len={o['max_seq_len']}  "
        f"batch={o['batch']}  format={o['cache_format']}  window={o['window']}  tp={o['tp']}  query_len={o['query_len']}"
    )
    for note in m["notes"]:
        console.print(f"  note: {note}")
    console.print(_layer_table(report, per_layer))
    classes = None if per_layer else _class_table(report)
    if classes is not None:
        console.print(classes)
    if report["refusals"]:
        _render_refusals(console, report["refusals"])
    console.print(_totals_table(report))
    if report["memory"]:
        _render_memory(console, report["memory"])
    console.print(_verdict_line(report))


def _layer_table(report: dict[str, Any], per_layer: bool) -> Table:
    c = report["counts"]
    title = f"State groups per request per device: {c['csa']} CSA, {c['hca']} HCA, {c['swa']} SWA-only"
    if c["unsupported"]:
        title += f", {c['unsupported']} unsupported"
    table = Table(title=title, title_justify="left")
    if per_layer:
        table.add_column("layer", justify="right")
        table.add_column("kind")
        for h in HEADERS:
            table.add_column(h, justify="right")
        table.add_column("total", justify="right")
        for row in report["layers"]:
            b = row["bytes"]
            cells = [str(row["layer_id"]), _kind(row)]
            if b is None:
                cells += [f"[red]refused: {', '.join(row['refusal_types'])}[/]"] + [""] * len(HEADERS)
            else:
                cells += [f"{b[k]:,}" for k in CLASSES] + [f"{b['total']:,}"]
            table.add_row(*cells)
        return table
    for col, justify in (("layers", "left"), ("kind", "left"), ("count", "right"),
                         ("bytes per group", "right"), ("bytes all groups", "right")):
        table.add_column(col, justify=justify, overflow="fold")
    for row in report["groups"]:
        b = row["bytes_per_group"]
        if b is None:
            sizes = [f"[red]refused: {', '.join(row['refusal_types'])}[/]", ""]
        else:
            sizes = [f"{b['total']:,}", f"{row['bytes_all']['total']:,}"]
        table.add_row(id_runs(row["layer_ids"]), _kind(row), str(row["count"]), *sizes)
    return table


def _class_table(report: dict[str, Any]) -> Table | None:
    sized = [g for g in report["groups"] if g["bytes_per_group"] is not None]
    if not sized:
        return None
    table = Table(title="Bytes of one state group by class", title_justify="left")
    table.add_column("class")
    for g in sized:
        table.add_column(f"{_kind(g)} x{g['count']}", justify="right")
    for k in CLASSES + ("total",):
        table.add_row(k, *[f"{g['bytes_per_group'][k]:,}" for g in sized])
    return table


def _kind(row: dict[str, Any]) -> str:
    return row["kind"] + (" (MTP)" if row["is_mtp"] else "")


def _render_refusals(console: Console, refusals: list[dict[str, Any]]) -> None:
    """One entry per distinct refusal, naming every layer it applies to (JSON keeps each
    (layer, type) record)."""
    rows: dict[tuple[str, ...], list[int | None]] = {}
    for r in refusals:
        detail = r["message"].split(": ", 2)[-1]
        rows.setdefault((r["type"], r["field"], detail, r["expected"], r["actual"]), []).append(r["layer"])
    console.print(f"[bold red]Refusals ({len(refusals)})[/]")
    for (type_, field, detail, expected, actual), layers in rows.items():
        ids = [l for l in layers if l is not None]
        where = ("layer " if len(ids) == 1 else "layers ") + id_runs(ids) if ids else "model"
        console.print(f"  [red]{type_}[/] on {where}  [dim]({field})[/]")
        console.print(f"      {detail}", highlight=False)
        console.print(f"      [dim]expected:[/] {expected}  [dim]found:[/] {actual}", highlight=False)


def _totals_table(report: dict[str, Any]) -> Table:
    t = report["totals"]
    per = t["per_request_per_device"]
    table = Table(title="Whole-model total (refused layers excluded)", title_justify="left")
    table.add_column("class")
    table.add_column("bytes per request per device", justify="right")
    for k in CLASSES:
        table.add_row(k, fmt_bytes(per[k]))
    table.add_row("[bold]total[/]", f"[bold]{fmt_bytes(per['total'])}[/]")
    if t["devices"] > 1:
        table.add_row(f"all {t['devices']} devices", fmt_bytes(t["per_request_all_devices_bytes"]))
    return table


def _render_memory(console: Console, mem: dict[str, Any]) -> None:
    console.print(
        f"Device memory {fmt_bytes(mem['device_memory_bytes'])} - reserved {fmt_bytes(mem['reserved_bytes'])} "
        f"= limit {fmt_bytes(mem['limit_bytes'])} per device"
    )
    if "requests_that_fit" not in mem:
        return
    console.print(f"  concurrent requests of this size that fit: [bold]{mem['requests_that_fit']}[/]")
    n = mem["concurrency"]
    longest = mem["longest_context"]
    if longest is None:
        console.print(f"  no context length lets {n} request(s) fit")
    else:
        console.print(f"  longest max_seq_len for {n} concurrent request(s): [bold]{longest:,}[/] tokens")
    if not mem["fits"]:
        console.print(
            f"  [red]does not fit[/]: {n} request(s) need {fmt_bytes(mem['needed_bytes'])}, "
            f"limit is {fmt_bytes(mem['limit_bytes'])}; device memory needed "
            f"{fmt_bytes(mem['needed_bytes'] + mem['reserved_bytes'])}"
            + (f"; or use --max-seq-len {longest}" if longest else "")
        )


def _verdict_line(report: dict[str, Any]) -> str:
    v = report["verdict"]
    style = {"admitted": "green", "refused": "red", "does_not_fit": "red"}[v]
    return f"[bold {style}]{v.upper().replace('_', ' ')}[/] (exit {report['exit_code']})"
