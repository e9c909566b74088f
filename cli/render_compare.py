"""Render a compare report (the ``--json`` document) as one rich table, a row per profile.

Cells show binary units to fit a terminal; ``--json`` carries every exact integer.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console

from csa_plan.cli.format import fmt_bytes_short as short_size, plural
from csa_plan.cli.tables import KEY, Col, print_table
from csa_plan.planner.reports.text import id_runs


def render_compare(console: Console, report: dict[str, Any]) -> None:
    """Render an *escaped* report (``cli.console.escaped``, applied by ``cli.emit``)."""
    o = report["options"]
    seq = o["max_seq_len"]
    seq = f"{seq:,}" if isinstance(seq, int) else ", ".join(f"{v:,}" for v in seq)
    console.print(f"[bold]{report['model']['name']}[/]  ({report['model']['source']})  "
                  f"max_seq_len={seq}  tp={o['tp']}  query_len={o['query_len']:,}")
    rows = report["profiles"]
    fits = report["limit_bytes"] is not None
    cols = [Col("profile", KEY)] + [Col(h) for h in ("per request", "B/token", "fixed", "padding", "vs exact")]
    if fits:
        cols.append(Col("fit"))
    cells_by_row = []
    for r in rows:
        over = r["over_exact_bytes"]
        cells = [r["profile"], short_size(r["per_request_bytes"]), f"{r['bytes_per_token']['value']:,.1f}",
                 short_size(r["fixed_request_bytes"]), short_size(r["padding_bytes"]),
                 ("+" if over > 0 else "") + short_size(over)]
        if fits:
            fit = r["requests_that_fit"]
            cells.append(f"{fit:,}" if fit is not None else ("any" if r.get("requests_unbounded") else "refused"))
        cells_by_row.append(cells)
    print_table(console, "State per request per device, by layout profile and engine (engines: a decoding "
                "request)", cols, cells_by_row, box=box.SIMPLE_HEAD)
    if report["limit_bytes"] is not None:
        console.print(f"device limit: {report['limit_bytes']:,} B")
        for r in rows:
            if r["requests_that_fit"] != 0:
                continue
            limit = r["limit_bytes"] if r.get("limit_bytes") is not None else report["limit_bytes"]
            if r.get("pool_refused"):
                console.print(f"[red]does not fit: a pool of {limit:,} B is refused at start-up: "
                              f"{r['pool_refused']}[/]", soft_wrap=True)
            else:
                console.print(f"[red]does not fit: {r['profile']} needs {r['per_request_bytes']:,} B per request "
                              f"and admits none in {limit:,} B; lower --max-seq-len or add memory[/]", soft_wrap=True)
    for r in report.get("engine_refusals", []):
        console.print(f"[red]{r['engine']} refuses this model: {r['message']}[/]", soft_wrap=True)
    if report["refused_layers"]:
        refused = report["refused_layers"]
        console.print(f"[red]refused: {plural(len(refused), 'layer')} ({id_runs(refused)}) left out of every "
                      "profile column, the B/token slope included; no 'fit' answer for a refused model[/] "
                      "(run check for the reasons)")
    console.print("B/token = asymptotic bytes per token; fixed = carry + index carry + dense ring; padding = "
                  "profile bytes minus the same content unpadded (engines: also every block priced at the pool's block "
                  "size); fit = concurrent requests in the limit (engines: admitted with the limit as KV memory); "
                  "exact integers: --json; sources: docs/compare.md, docs/engines.md")
