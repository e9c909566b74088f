"""Render a check report (the ``--json`` document) as rich tables."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from csa_plan.cli.format import fmt_bytes, fmt_bytes_short, plural
from csa_plan.planner.reports.text import id_runs
from csa_plan.cli.tables import KEY, TEXT, Col, print_table

CLASSES = ("compressed", "carry", "index", "index_carry", "dense_ring", "scratch")
HEADERS = ("compressed", "carry", "index", "idx carry", "ring", "scratch")
MAX_GROUP_ROWS = 64  # groups shown in the text report (8,192 distinct layers took 9 s to render); --json has all
MAX_CLASS_COLUMNS = 8  # groups shown side by side in the class table


def render_check(console: Console, report: dict[str, Any], *, per_layer: bool = False) -> None:
    """Render an *escaped* report (``cli.console.escaped``): every string in it is markup-safe."""
    m, o = report["model"], report["options"]
    console.print(
        f"[bold]{m['name']}[/]  ({m['source']})  gate={o['gate']}  max_seq_len={_n(o['max_seq_len'])}  "
        f"batch={_n(o['batch'])}  format={o['cache_format']}  window={_n(o['window'])}  tp={o['tp']}  "
        f"query_len={_n(o['query_len'])}"
    )
    for note in m["notes"]:
        console.print(f"  note: {note}")
    _layer_table(console, report, per_layer)
    if not per_layer:
        _class_table(console, report)
    if report["refusals"]:
        _render_refusals(console, report["refusals"])
    _totals_table(console, report)


def _n(value: Any) -> str:
    """An option value: a number with separators, or a list of them."""
    if isinstance(value, bool) or not isinstance(value, (int, list)):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_n(v) for v in value) + "]"
    return f"{value:,}"


def _layer_table(console: Console, report: dict[str, Any], per_layer: bool) -> None:
    c = report["counts"]
    title = f"State groups per request per device: {c['csa']} CSA, {c['hca']} HCA, {c['swa']} SWA-only"
    if c["unsupported"]:
        title += f", {c['unsupported']} unsupported"
    if c.get("owner") or c.get("reader"):  # shared compressed state: owners charged once, every layer a window
        title = (f"State groups per request per device: {c.get('owner', 0)} owners (kv sources), "
                 f"{c.get('reader', 0)} readers, {c['swa']} window-only; a window on each of "
                 f"{len(report['layers'])} layers")
    if per_layer:
        cols = [Col("layer", KEY, "right"), Col("kind", KEY)] + [Col(h) for h in HEADERS] + [Col("total")]
        rows = []
        for row in report["layers"]:
            b = row["bytes"]
            cells = [str(row["layer_id"]), _kind(row)]
            if b is None:
                cells += [f"[red]refused: {', '.join(row['refusal_types'])}[/]"] + [""] * len(HEADERS)
            else:
                cells += [f"{b[k]:,}" for k in CLASSES] + [f"{b['total']:,}"]
            rows.append(cells)
        if any(r["bytes"] is None for r in report["layers"]):
            cols[2] = Col(HEADERS[0], TEXT, "right")
        print_table(console, title, cols, rows)
        return
    cols = [Col("layers", KEY), Col("kind", KEY), Col("count"), Col("bytes per group"), Col("bytes all groups")]
    rows = []
    for row in report["groups"][:MAX_GROUP_ROWS]:
        b = row["bytes_per_group"]
        if b is None:
            sizes = [f"[red]refused: {', '.join(row['refusal_types'])}[/]", ""]
        else:
            sizes = [f"{b['total']:,}", f"{row['bytes_all']['total']:,}"]
        rows.append([id_runs(row["layer_ids"]), _kind(row), f"{row['count']:,}", *sizes])
    if any(r["bytes_per_group"] is None for r in report["groups"][:MAX_GROUP_ROWS]):
        cols[3] = Col("bytes per group", TEXT, "right")
    print_table(console, title, cols, rows)
    _more(console, len(report["groups"]), MAX_GROUP_ROWS)


def _more(console: Console, count: int, shown: int) -> None:
    if count > shown:
        console.print(f"  ... {count - shown:,} more groups (at most {shown} shown; --json has every one)")


def _class_table(console: Console, report: dict[str, Any]) -> None:
    sized = [g for g in report["groups"] if g["bytes_per_group"] is not None]
    if not sized:
        return
    shown = sized[:MAX_CLASS_COLUMNS]
    cols = [Col("class", KEY)] + [Col(f"{_kind(g)} x{g['count']:,}") for g in shown]
    rows = [[k, *[f"{g['bytes_per_group'][k]:,}" for g in shown]] for k in CLASSES + ("total",)]
    print_table(console, "Bytes of one state group by class", cols, rows)
    _more(console, len(sized), MAX_CLASS_COLUMNS)


def _kind(row: dict[str, Any]) -> str:
    ratio = f" r{row['compression_ratio']}" if "compression_ratio" in row and row["kind"] in ("owner", "reader") else ""
    return row["kind"] + ratio + (" (MTP)" if row["is_mtp"] else "")


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


def _totals_table(console: Console, report: dict[str, Any]) -> None:
    t = report["totals"]
    per = t["per_request_per_device"]
    rows = [[k, fmt_bytes(per[k])] for k in CLASSES]
    rows.append(["[bold]total[/]", f"[bold]{fmt_bytes(per['total'])}[/]"])
    if t["devices"] > 1:
        rows.append([f"all {plural(t['devices'], 'device')}", fmt_bytes(t["per_request_all_devices_bytes"])])
    print_table(console, "Whole-model total (refused layers excluded)",
                [Col("class", KEY), Col("bytes per request per device")], rows)


def _render_memory(console: Console, mem: dict[str, Any]) -> None:
    console.print(
        f"Device memory {fmt_bytes(mem['device_memory_bytes'])} - reserved {fmt_bytes(mem['reserved_bytes'])} "
        f"= limit {fmt_bytes(mem['limit_bytes'])} per device"
    )
    if "requests_that_fit" not in mem:
        return
    if mem.get("no_answer"):
        console.print(f"  no capacity answer: {mem['no_answer']}")
        return
    n = mem["concurrency"]
    fit = mem["requests_that_fit"]
    if fit is None:
        console.print("  concurrent requests of this size that fit: [bold]any number[/] (0 bytes per request)")
    else:
        console.print(f"  concurrent requests of this size that fit: [bold]{fit:,}[/]")
    longest = mem["longest_context"]
    if longest is None:
        console.print(f"  no context length lets {plural(n, 'request')} fit")
    else:
        console.print(f"  longest max_seq_len for {plural(n, 'concurrent request')}: [bold]{longest:,}[/] tokens")
    if not mem["fits"]:
        console.print(
            f"  [red]does not fit[/]: {plural(n, 'request')} need{'s' if n == 1 else ''} "
            f"{fmt_bytes(mem['needed_bytes'])}, limit is {fmt_bytes(mem['limit_bytes'])}; device memory needed "
            f"{fmt_bytes(mem['needed_bytes'] + mem['reserved_bytes'])}"
            + (f"; or use --max-seq-len {longest}" if longest else "")
        )


def _verdict_line(report: dict[str, Any]) -> str:
    v = report["verdict"]
    style = {"admitted": "green", "refused": "red", "does_not_fit": "red"}[v]
    return f"[bold {style}]{v.upper().replace('_', ' ')}[/] (exit {report['exit_code']})"


def render_head(console: Console, doc: dict[str, Any]) -> None:
    """The answer first (an *escaped* document): verdict, the count and the longest context with
    their authority, the engine's log line, the state pool, every refusal, warnings. ``--brief``
    prints only this."""
    from csa_plan.cli.format import fmt_size

    v, cap, head = doc["verdict"], doc["fit"], doc["head"]
    style = {"admitted": "green", "refused": "red", "does_not_fit": "red"}[v]
    word = {"admitted": "ADMITTED", "refused": "REFUSED", "does_not_fit": "DOES NOT FIT"}[v]
    who = head["engine"] or f"layout {doc['options'].get('layout', 'exact')} (no engine named)"
    console.print(f"[bold {style}]{word}[/] (exit {doc['exit_code']}) — {head['model']}, {who}", highlight=False)
    authority = f"[dim]\\[{cap['authority']}][/]"
    length, n = cap["max_seq_len"], cap["concurrency"]
    if not cap["answered"]:
        console.print(f"Requests of {length:,} tokens that fit: no answer — {cap['no_answer']}", highlight=False)
    elif cap["unbounded"]:
        console.print(f"Requests of {length:,} tokens that fit: any number (0 bytes per request) {authority}")
    else:
        steady = cap.get("steady_decode")
        if steady:  # vLLM: its admission charge is not what a decoding request holds; both are said
            count = (f"Requests of {length:,} tokens admitted at once into an empty cache: "
                     f"[bold]{cap['requests_that_fit']:,}[/] (the engine's 'Maximum concurrency') {authority}\n"
                     f"  decoding (each holds {fmt_bytes_short(steady['per_request_bytes'])}): "
                     f"[bold]{steady['count']:,}[/] at once, admitted one by one" + (
                         f" (the running cap; memory: {steady['by_memory']:,})"
                         if steady["limited_by"] != "memory" else ""))
        else:
            count = f"Requests of {length:,} tokens that fit: [bold]{cap['requests_that_fit']:,}[/] {authority}"
        longest = cap["longest_context"]
        if longest is None and doc.get("pipeline"):
            longest_line = (f"Longest max_seq_len for {plural(n, 'concurrent request')}: not searched with pipeline "
                            f"stages (each stage's pool is sized at this length) {authority}")
        elif longest is None:
            longest_line = f"Longest max_seq_len for {plural(n, 'concurrent request')}: none fits {authority}"
        else:
            longest_line = (f"Longest max_seq_len for {plural(n, 'concurrent request')}: [bold]{longest:,}[/] tokens "
                            f"{authority}")
        asked_length = head.get("question") == "length"  # --concurrency N without --max-seq-len: the answer first
        for line in (longest_line, count) if asked_length else (count, longest_line):
            console.print(line, highlight=False)
        if asked_length:
            console.print(f"  (the question is the length: without --max-seq-len the count is at the model's "
                          f"{length:,} tokens)", highlight=False)
    for line in head["log_lines"]:
        console.print(f"Engine log: {line}", markup=False, highlight=False)
    _pipeline_lines(doc.get("pipeline"), console)
    if cap["kv_memory_bytes"] is not None and cap["kv_memory_bytes"] > 0:
        per = cap["per_request_bytes"]
        console.print(f"State pool per GPU: {fmt_size(cap['kv_memory_bytes'])}"
                      + (f"; {'charged per request at admission' if cap.get('steady_decode') else 'per request'}: "
                         f"{fmt_size(per)}" if per is not None else ""), highlight=False)
    if head["deployment"]:
        console.print(f"Deployment: {head['deployment']}", highlight=False)
    for r in doc["all_refusals"]:
        where = f" on layers {id_runs(r['layers'])}" if r["layers"] else ""
        console.print(f"[red]{r['kind']} refusal[/] {r['type']} ({r['setting']}){where}: {r['message']}",
                      highlight=False)
    if head["smallest_fitting"]:
        for f in head["smallest_fitting"]:
            console.print(f"  smallest that passes every check: --tp {f['tp']} --ep {f['ep']}"
                          + (f" --pp {f['pp']}" if f["pp"] > 1 else "") + (f" --dp {f['dp']}" if f["dp"] > 1 else "")
                          + f" ({f['gpus']} GPUs; {fmt_size(f['kv_memory_bytes'])} state pool per GPU)",
                          highlight=False)
    elif head["smallest_fitting_searched"]:
        console.print(f"  no --tp up to {head['searched_max_tp']} (the model's attention heads) passes every check: "
                      "every rank keeps each request's whole latent state, so a wider tp frees only weight memory",
                      highlight=False)
        rep = head["replicas"]
        if rep:
            console.print(f"  data-parallel replicas instead: --tp {rep['tp']}" + (f" --pp {rep['pp']}" if rep["pp"] > 1
                          else "") + f" --dp {rep['dp']} ({rep['gpus']} GPUs) admit {rep['per_replica']:,} per "
                          f"replica, {rep['in_all']:,} in all", highlight=False)
    for w in doc["warnings"]:
        console.print(f"[yellow]warning:[/] {w}", highlight=False)


def _pipeline_lines(pipe: dict | None, console) -> None:
    """``--engine E --pp N``: each stage's pool from its own layers, and the binding stage."""
    if not pipe:
        return
    from csa_plan.cli.format import fmt_size

    unit = pipe["unit"]
    for st in pipe["stages"]:
        first, last = st["layers"]
        console.print(f"Stage {st['stage']} (layers {first}-{last}): KV memory {fmt_size(st['kv_memory_bytes'])} -> "
                      f"{st['total_units']:,} {unit}s of {st['unit_bytes']:,} B", highlight=False)
        for line in st["log_lines"]:
            console.print(f"  stage {st['stage']} engine log: {line}", markup=False, highlight=False)
    console.print(f"Binding stage: {pipe['binding_stage']}; the scheduler sees {pipe['scheduler_units']:,} {unit}s "
                  f"({pipe['rule']})", markup=False, highlight=False)
