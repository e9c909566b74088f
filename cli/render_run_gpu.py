"""Render a run-gpu report (the ``--json`` document) as a pass/fail table."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

STYLE = {"pass": "green", "fail": "bold red", "n/a": "dim"}


def render_run_gpu(console: Console, report: dict[str, Any]) -> None:
    o = report["options"]
    console.print(f"[bold]{report['model']}[/]  backend={report['backend']}  device={report['device']}")
    console.print(f"  layers {o['layers']}  requests={o['requests']}  max_seq_len={o['max_seq_len']}  "
                  f"prefill={report['prefill_len']}  steps={o['steps']}  limit="
                  f"{'unlimited' if not o['limit_bytes'] else format(o['limit_bytes'], ',') + ' B'}"
                  f"{'  (tiny geometry)' if o['tiny'] else ''}")
    table = Table(title="Checks", title_justify="left")
    for col in ("check", "layer", "result", "detail"):
        table.add_column(col, overflow="fold")
    for c in report["checks"]:
        table.add_row(c["name"], "" if c["layer"] is None else str(c["layer"]),
                      f"[{STYLE[c['status']]}]{c['status'].upper()}[/]", c["detail"])
    console.print(table)
    if report["timings"]:
        t = Table(title="Kernel times (median of 3 decode queries)", title_justify="left")
        for col in ("layer", "kernel", "ms", "bytes", "GB/s"):
            t.add_column(col, justify="right")
        for r in report["timings"]:
            t.add_row(str(r["layer"]), r["kernel"], f"{r['ms']:.4f}", "" if r["bytes"] is None else f"{r['bytes']:,}",
                      "" if r["gb_per_s"] is None else f"{r['gb_per_s']:.1f}")
        console.print(t)
    failed = report["failed"]
    verdict = "[bold green]ALL CHECKS PASSED[/]" if not failed else f"[bold red]{failed} CHECK(S) FAILED[/]"
    console.print(f"{verdict} (exit {report['exit_code']})")
