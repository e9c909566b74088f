"""The device budget as a waterfall table (and, with --budget-plot, a chart), each step with its source."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from csa_plan.cli.format import fmt_bytes, fmt_bytes_short, marker


def render_budget(console: Console, budget: dict[str, Any], *, memory: dict[str, Any] | None = None,
                  engine: dict[str, Any] | None = None, head_shown: bool = False) -> None:
    """Render an *escaped* report part (``cli.console.escaped``, applied by ``cli.emit``).
    ``head_shown``: the command's head already gave the verdict, the fit and the state pool."""
    d = budget["deployment"]
    binding = budget["stages"][budget["binding_stage"]]
    if not budget["weights_fit"] and not head_shown:
        what = "WEIGHTS DO NOT FIT" if binding["weights_bytes"] > binding["usable_bytes"] else \
            "WEIGHTS AND START-UP RESERVES DO NOT FIT"
        console.print(f"[bold]{what}[/bold] ({escape(budget['engine'])}): "
                      f"{fmt_bytes(binding['weights_bytes'])} of weights and "
                      f"{fmt_bytes(binding['reserve_bytes'])} of start-up reserves per GPU against "
                      f"{fmt_bytes(binding['usable_bytes'])} usable; no state pool is left "
                      f"(short by {fmt_bytes(-binding['kv_memory_bytes'])}).")
        for f in budget["smallest_fitting"]:
            console.print(f"  smallest that fits: --tp {f['tp']} --ep {f['ep']}"
                          + (f" --pp {f['pp']}" if f["pp"] > 1 else "") + (f" --dp {f['dp']}" if f["dp"] > 1 else "")
                          + f" ({f['gpus']} GPUs; {fmt_bytes_short(f['weights_bytes'])} of weights, "
                            f"{fmt_bytes_short(f['kv_memory_bytes'])} left for state per GPU)")
        if not budget["smallest_fitting"]:
            console.print("  no --tp up to 256 fits at this --pp and --dp" if budget["smallest_fitting_searched"]
                          else "  (--weights or --kv-memory given: no other deployment searched)")
    where = f" (stage {binding['stage']} of {d['pp']}, the tightest)" if d["pp"] > 1 else ""
    console.print(f"Device budget per GPU: {budget['engine']}, tp {d['tp']} pp {d['pp']} dp {d['dp']} "
                  f"ep {d['ep']} ({d['gpus']} GPUs){where}")
    w = budget["model_weights"]
    if w is not None:
        elements = f", {w['elements']:,} elements" if w["elements"] is not None else ""
        console.print(f"Model weights: {fmt_bytes(w['total_bytes'])} in {w['tensors']:,} tensors{elements}; "
                      f"{w['note']}")
    table = Table(title="Waterfall (est. = csa-plan's estimate, not an engine rule; ± its error band)", title_justify="left")
    table.add_column("step / source", overflow="fold")
    table.add_column("bytes", justify="right", no_wrap=True)
    table.add_column("left", justify="right", no_wrap=True)
    left = 0
    for step in binding["steps"]:
        kind, n = step["kind"], step["bytes"]
        if kind in ("card", "usable"):
            left = n
            shown = fmt_bytes_short(n)
        elif kind == "kv":
            left = n
            shown = "= " + fmt_bytes_short(n)
        else:
            left -= n
            shown = "- " + fmt_bytes_short(n)
        label = step["label"] + marker(step)
        table.add_row(f"{label}\n[dim]  {step['source']}[/dim]", shown, fmt_bytes_short(left))
    console.print(table)
    render_engram(console, budget)
    cal = budget.get("calibration")
    if cal:
        t = Table(title=f"--from-log {escape(cal['source'])}: what the log implies, what csa-plan predicts "
                        "(at the log's flags)", title_justify="left")
        for col in ("term", "implied", "predicted", "implied - predicted"):
            t.add_column(col, justify="left" if col == "term" else "right", overflow="fold")
        for term in cal["terms"]:
            i, p = term["implied_bytes"], term["predicted_bytes"]
            t.add_row(escape(term["term"]), "not in the log" if i is None else fmt_bytes_short(i),
                      fmt_bytes_short(p), "" if i is None else f"{i - p:+,} B")
        console.print(t)
    if not budget["weights_fit"] or head_shown:
        return
    console.print(f"State pool (KV memory) per GPU: {fmt_bytes(budget['kv_memory_bytes'])}")
    fit = budget.get("requests_that_fit")
    if fit is not None:
        if fit.get("no_answer"):
            console.print(f"Requests of max_seq_len that fit: no answer — {fit['no_answer']}")
        elif fit["count"] is None:
            console.print(f"Requests of max_seq_len that fit: any number (0 bytes per request) — {fit['source']}")
        else:
            console.print(f"Requests of max_seq_len that fit: {fit['count']:,} — {fit['source']}")


def engram_lines(budget: dict[str, Any]) -> list[str]:
    """The Engram placement and the host-memory line (planner/weights/engram.py), as plain text."""
    e, h = budget.get("engram"), budget.get("host")
    if e is None:
        return []
    where = "device memory" if e["where"] == "gpu" else "host memory"
    out = [f"Engram tables ({e['engine']}): {where}; {e['gpu_bytes_per_rank']:,} B per GPU"
           + (f" + {e['staging_bytes_per_rank']:,} B staging" if e["staging_bytes_per_rank"] else "")
           + f", {e['host_bytes_per_node']:,} B ({e['host_bytes_per_node'] / (1 << 30):.2f} GiB) host per node "
           f"x {e['nodes']} node{'s' if e['nodes'] != 1 else ''} — {e['source']}"]
    if h is not None:
        cap = h["capacity_bytes"]
        out.append(f"Host memory per node: {h['host_bytes_per_node']:,} B needed of "
                   + (f"{cap:,} B ({cap / (1 << 30):.2f} GiB; {h['capacity_source']})" if cap is not None
                      else f"unknown capacity ({h['capacity_source']})"))
    return out


def render_engram(console: Console, budget: dict[str, Any]) -> None:
    for line in engram_lines(budget):
        console.print(line)


def budget_arithmetic(budget: dict) -> str:
    """How the state pool per GPU was reached: the option that gave it, or the sum that adds up."""
    if budget.get("kv_memory_given"):
        return f"--kv-memory {budget['kv_memory_bytes']:,} B (replaces usable - weights - reserves)"
    return (f"usable {budget['usable_bytes']:,} - weights {budget['weights_bytes']:,} - reserves "
            f"{budget['reserve_bytes']:,} = {budget['kv_memory_bytes']:,} B")
