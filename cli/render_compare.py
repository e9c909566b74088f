"""Render a compare report (the ``--json`` document) as one rich table, a row per profile.

Cells show binary units to fit a terminal; ``--json`` carries every exact integer.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console

from csa_plan.cli.format import fmt_bytes, fmt_bytes_short as short_size, plural
from csa_plan.cli.tables import KEY, Col, print_table
from csa_plan.planner.reports.text import id_runs


VERDICT_TEXT = {"admitted": "[green]ADMITTED[/] (exit 0): every layer; no device memory named, so no count",
                "fits": "[green]FITS[/] (exit 0)", "does_not_fit": "[red]DOES NOT FIT[/] (exit 3)",
                "refused": "[red]REFUSED[/] (exit 3)"}


def render_compare_head(console: Console, report: dict[str, Any]) -> None:
    """The answer first (the head, ``CompareHead``): the verdict, then each row's requests of
    max_seq_len that fit, with the authority that counted them."""
    h = report["head"]
    seq = h["max_seq_len"]
    seq = f"{seq:,}" if isinstance(seq, int) else ", ".join(f"{v:,}" for v in seq)
    console.print(f"[bold]{h['model']}[/] at max_seq_len {seq}: {VERDICT_TEXT[h['verdict']]}"
                  + (f"; {h['deployment']}" if h["deployment"] else ""))
    for r in h["rows"]:
        if r["requests_that_fit"] is not None:
            n = r["requests_that_fit"]
            what = f"{n:,} request{'' if n == 1 else 's'} fit"
        elif r["unbounded"]:
            what = "any number fit (0 bytes per request)"
        elif r["no_answer"].startswith("refuses"):  # the refusal itself is listed below
            what = f"no count: refuses a pool of {r['limit_bytes']:,} B at start-up (below)"
        else:
            what = f"no count: {r['no_answer']}"
        pool = f" in {fmt_bytes(r['limit_bytes'])}" if r["limit_bytes"] and r["requests_that_fit"] is not None else ""
        best = " (the most)" if r["profile"] in h["most"] and len(h["most"]) < len(h["rows"]) else ""
        console.print(f"  {r['profile']}: {what}{best}{pool}; {request_cost(r)} ({r['authority']})",
                      soft_wrap=True, highlight=False)
    for line in h["refusals"]:
        console.print(f"  [red]{line}[/]", soft_wrap=True)


def request_cost(row: dict[str, Any]) -> str:
    """A row's bytes per request under one meaning per label: "per request" is the table's column (for
    an engine, a decoding request); what the engine's admission charges one is said as that."""
    engine = row["authority"].startswith("engine:")
    text = f"{fmt_bytes(row['per_request_bytes'])} per {'decoding ' if engine else ''}request"
    if row["charge_bytes"] is not None and row["charge_bytes"] != row["per_request_bytes"]:
        text += f", {fmt_bytes(row['charge_bytes'])} charged per request at admission"
    return text


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
