"""Render a run-gpu report (the ``--json`` document) as a pass/fail table."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from csa_plan.cli.format import plural
from csa_plan.cli.tables import KEY, TEXT, Col, print_table

STYLE = {"pass": "green", "fail": "bold red", "n/a": "dim"}


def render_run_gpu(console: Console, report: dict[str, Any]) -> None:
    """Render an *escaped* report (``cli.console.escaped``, applied by ``cli.emit``)."""
    o = report["options"]
    console.print(f"[bold]{report['model']}[/]  backend={report['backend']}  device={report['device']}")
    limit = "unlimited" if not o["limit_bytes"] else f"{o['limit_bytes']:,} B"
    console.print(f"  layers {', '.join(str(l) for l in o['layers'])}  requests={o['requests']:,}  "
                  f"max_seq_len={o['max_seq_len']:,}  prefill={report['prefill_len']:,}  steps={o['steps']:,}  "
                  f"limit={limit}{'  (tiny geometry)' if o['tiny'] else ''}")
    rows = [[c["name"], "" if c["layer"] is None else str(c["layer"]),
             f"[{STYLE[c['status']]}]{c['status'].upper()}[/]", c["detail"]] for c in report["checks"]]
    print_table(console, "Checks", [Col("check", TEXT), Col("layer"), Col("result", KEY), Col("detail", TEXT)], rows)
    if report["timings"]:
        rows = [[str(r["layer"]), r["kernel"], f"{r['ms']:,.4f}", "" if r["bytes"] is None else f"{r['bytes']:,}",
                 "" if r["gb_per_s"] is None else f"{r['gb_per_s']:,.1f}"] for r in report["timings"]]
        print_table(console, "Kernel times (median of 3 decode queries)",
                    [Col("layer", KEY, "right"), Col("kernel", KEY, "right"), Col("ms"), Col("bytes"), Col("GB/s")],
                    rows)
    failed = report["failed"]
    verdict = ("[bold green]ALL CHECKS PASSED[/]" if not failed else
               f"[bold red]{plural(failed, 'CHECK')} FAILED[/]")
    console.print(f"{verdict} (exit {report['exit_code']})")
