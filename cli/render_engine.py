"""Render the ``engine`` part of a check report: settings, structures, budget vs held, pool."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from csa_plan.cli.format import fmt_bytes


def render_engine(console: Console, model: dict[str, Any], e: dict[str, Any]) -> None:
    """Render an *escaped* report part (``cli.console.escaped``, applied by ``cli.emit``)."""
    console.print(f"[bold]{model['name']}[/]  ({model['source']})  engine={e['name']}  "
                  f"({e['engine']} {e['version']})", highlight=False)
    if e["settings"]:
        console.print(_settings_table(e))
    if e["structures"]:
        _render_structures(console, e)
        console.print(_budget_table(e))
        note = e["structures"].get("startup_note")
        if note:
            console.print(f"  {note}", highlight=False)
    if e["pool"]:
        _render_pool(console, e["pool"])
    if e["tp"]:
        placements = sorted({r["placement"] for r in e["tp"]})
        console.print(f"Tensor parallel: every state spec is {' / '.join(placements)} per rank "
                      f"({len(e['tp'])} spec kinds; --json 'tp' names each and its source)", highlight=False)
    if e["refusal"]:
        r = e["refusal"]
        console.print(f"[bold red]Refused by the engine[/]  [red]EngineRefused[/] [dim]({r['setting']})[/]")
        console.print(f"      {r['message']}", highlight=False)
        console.print(f"      [dim]expected:[/] {r['expected']}  [dim]found:[/] {r['actual']}",
                      highlight=False)
        console.print(f"      [dim]rule:[/] {r['rule']}", highlight=False)


def _settings_table(e: dict[str, Any]) -> Table:
    table = Table(title=f"{e['engine']} {e['version']} settings", title_justify="left")
    table.add_column("option")
    table.add_column("value", justify="right")
    table.add_column("from", overflow="fold")
    for s in e["settings"]:
        table.add_row(s["option"], str(s["value"]), s["source"])
    return table


def _render_structures(console: Console, e: dict[str, Any]) -> None:
    st = e["structures"]
    groups = st.get("groups")
    if groups:
        table = Table(title=f"KV cache groups (one shared pool; every block costs {st['bytes_per_block']:,} B)",
                      title_justify="left")
        for col in ("group", "kind", "layers", "block", "window", "page sum B"):
            table.add_column(col, justify="left" if col in ("group", "kind") else "right", overflow="fold")
        for g in groups:
            kind = {"CircularBufferSpec": "ring"}.get(g.get("spec"), "full" if g["sliding_window"] is None
                                                                     else "window")
            table.add_row(f"{g['index']}: {g['label']}", kind, str(g["layers"]), str(g["block_tokens"]),
                          "-" if g["sliding_window"] is None else str(g["sliding_window"]), f"{g['page_sum_bytes']:,}")
        console.print(table)
    pools = st.get("pools")
    if pools:
        table = Table(title="Pools", title_justify="left")
        for col in ("pool", "scope", "unit", "bytes per unit"):
            table.add_column(col, justify="right" if col == "bytes per unit" else "left", overflow="fold")
        for p in pools:
            table.add_row(p["name"], p["scope"], p["unit"], f"{p['unit_bytes']:,}")
        console.print(table)


def _budget_table(e: dict[str, Any]) -> Table:
    budget, decode, prefill = e["startup_budget"], e["decode"], e["prefill"]
    length = e["max_seq_len"]
    table = Table(title=f"One request of {length:,} tokens: budgeted at start-up vs held", title_justify="left")
    table.add_column("pool", overflow="fold")
    table.add_column(f"start-up budget\n({budget['in_flight_tokens']:,} in flight)", justify="right")
    table.add_column(f"decoding\n({decode['in_flight_tokens']:,} in flight)", justify="right")
    table.add_column(f"prefilling\n({prefill['in_flight_tokens']:,} in flight)", justify="right")
    for b, d, p in zip(budget["pools"], decode["pools"], prefill["pools"]):
        table.add_row(b["pool"], f"{b['units']:,}", f"{d['units']:,}", f"{p['units']:,}")
    table.add_row("[bold]units[/]", f"[bold]{budget['units']:,}[/]", f"[bold]{decode['units']:,}[/]",
                  f"[bold]{prefill['units']:,}[/]")
    table.add_row("[bold]bytes[/]", fmt_bytes(budget["bytes"]), fmt_bytes(decode["bytes"]), fmt_bytes(prefill["bytes"]))
    return table


def _render_pool(console: Console, p: dict[str, Any]) -> None:
    console.print(f"KV memory {fmt_bytes(p['kv_memory_bytes'])} per device -> {p['total_units']:,} {p['unit']}s of "
                  f"{p['unit_bytes']:,} B ({p['usable_units']:,} usable), {p['budget_units_per_request']:,} "
                  f"{p['unit']}s budgeted per request, at most {p['max_running']:,} running", highlight=False)
    for pool in p["pools"]:
        note = f"  [dim]{pool['note']}[/]" if pool["note"] else ""
        console.print(f"  {pool['name']}: {pool['units']:,} x {pool['unit_bytes']:,} B = "
                      f"{fmt_bytes(pool['bytes'])}{note}", highlight=False)
    if p["reserved_bytes"]:
        console.print(f"  reserved at start-up: {fmt_bytes(p['reserved_bytes'])}", highlight=False)
    console.print("The engine's start-up log:")
    for line in p["log_lines"]:
        console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
