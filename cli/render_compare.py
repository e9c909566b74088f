"""Render a compare report (the ``--json`` document) as one rich table, a row per profile.

Cells show binary units to fit a terminal; ``--json`` carries every exact integer.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from csa_plan.cli.format import fmt_bytes_short as short_size


def render_compare(console: Console, report: dict[str, Any]) -> None:
    o = report["options"]
    console.print(f"[bold]{report['model']['name']}[/]  ({report['model']['source']})  "
                  f"max_seq_len={o['max_seq_len']}  tp={o['tp']}  query_len={o['query_len']}")
    rows = report["profiles"]
    fits = report["limit_bytes"] is not None
    table = Table(title="State per request per device, by layout profile and engine (engines: a decoding "
                        "request)", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("profile", no_wrap=True)
    for header in ("per request", "B/token", "fixed", "padding", "vs exact") + (("fit",) if fits else ()):
        table.add_column(header, justify="right", no_wrap=True)
    for r in rows:
        over = r["over_exact_bytes"]
        cells = [r["profile"], short_size(r["per_request_bytes"]), f"{r['bytes_per_token']['value']:,.1f}",
                 short_size(r["fixed_request_bytes"]), short_size(r["padding_bytes"]),
                 ("+" if over > 0 else "") + short_size(over)]
        if fits:
            cells.append(f"{r['requests_that_fit']:,}")
        table.add_row(*cells)
    console.print(table)
    if report["limit_bytes"] is not None:
        console.print(f"device limit: {report['limit_bytes']:,} B")
        for r in rows:
            if r["requests_that_fit"] == 0:
                console.print(f"[red]does not fit: {r['profile']} needs {r['per_request_bytes']:,} B per request, "
                              f"limit {report['limit_bytes']:,} B; lower --max-seq-len or add memory[/]", soft_wrap=True)
    for r in report.get("engine_refusals", []):
        console.print(f"[red]{escape(r['engine'])} refuses this model: {escape(r['message'])}[/]", soft_wrap=True)
    if report["refused_layers"]:
        console.print(f"[red]refused layers left out of every column: {report['refused_layers']}[/] "
                      "(run check for the reasons)")
    console.print("B/token = asymptotic bytes per token; fixed = carry + index carry + dense ring; padding = "
                  "profile bytes minus the same content unpadded (engines: also every block priced at the pool's block "
                  "size); fit = concurrent requests in the limit (engines: admitted with the limit as KV memory); "
                  "exact integers: --json; sources: README, 'Layout profiles' and 'Engine models'")
