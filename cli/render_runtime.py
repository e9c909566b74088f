"""Render the runtime replay (``simulate --engine vllm-0.33``): the ``runtime`` section of the document."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from csa_plan.cli.format import plural
from csa_plan.cli.tables import KEY, Col, print_table


def _q(q: dict[str, Any], scale: float = 1.0, unit: str = "s") -> list[str]:
    f = lambda v: "-" if v is None else f"{v * scale:,.3f}"
    return [unit, f(q["p50_s"]), f(q.get("p90_s")), f(q["p99_s"]), f(q["max_s"])]


def _step_time(t: dict[str, Any]) -> str:
    """The step-time source line: its label and stated error band."""
    from csa_plan.planner.steptime.model import step_time_label

    return step_time_label(t.get("step_time") or {}, t["step_model"])


def render_runtime(out: Console, report: dict[str, Any], plot_note: str | None = None, brief: bool = False) -> None:
    """Render an *escaped* report (``cli.console.escaped``, applied by ``cli.emit``)."""
    dep, engine = report["deployment"], report.get("engine")
    out.print(f"[bold]{report['model']['name']}[/bold] on {report['workload']['source']} "
              f"({plural(report['workload']['requests'], 'request')})")
    rt = report["runtime"]
    out.print(f"[bold]{rt['headline']}[/bold]", highlight=False)
    if brief:
        p99 = lambda q, scale=1.0: "-" if q["p99_s"] is None else format(q["p99_s"] * scale, ",.3f")  # noqa: E731
        out.print(f"  served {rt['served']:,} of {rt['requests']:,}; p99: queue wait {p99(rt['queue_wait'])} s, "
                  f"TTFT {p99(rt['ttft'])} s, TPOT {p99(rt['tpot'], 1000.0)} ms", highlight=False)
        if report.get("capacity"):
            out.print(f"  {capacity_line(report['capacity'], probes=False)}", highlight=False)
        return
    for note in report["workload"]["notes"]:
        out.print(f"  note: {note}")
    pool = engine["pool"]
    out.print(f"  engine: {engine['name']} ({engine['engine']} {engine['version']}), its scheduler and KV cache "
              f"manager replayed step by step: {pool['usable_units']:,} {pool['unit']}s of {pool['unit_bytes']:,} B "
              f"usable, tp {dep['tp']}", highlight=False)
    settings = ", ".join(f"{s['option']} {s['value']}" for s in engine["settings"]
                         if s["option"] in ("--max-num-batched-tokens", "--max-num-seqs", "--async-scheduling",
                                            "--num-speculative-tokens", "--chunked-prefill-size",
                                            "--max-running-requests"))
    pc = rt["prefix_cache"]
    out.print(f"  settings: {settings}; prefix caching {'on' if pc['enabled'] else 'off'}", highlight=False)
    t = report["time"]
    out.print(f"  step time: {_step_time(t)}", highlight=False)
    client = (f"closed loop, at most {t['max_concurrency']:,} in flight" if t.get("max_concurrency")
              else f"arrivals x{t['rate_scale']:g}")
    out.print(f"  {client}; {plural(rt['steps'], 'step')} over {rt['makespan_s']:,.1f} s", highlight=False)
    if rt.get("dp_balancer"):
        out.print(f"  requests over the DP ranks: {rt['dp_balancer']['label']}", highlight=False)
    out.print(f"  served {rt['served']:,} of {rt['requests']:,}"
              + "".join(f"; refused {n:,}: {r}" for r, n in ((x['reason'], x['requests']) for x in rt["refused"])),
              highlight=False)
    if pc["enabled"]:
        out.print(f"  prefix cache: {pc['hit_tokens']:,} of {pc['queried_tokens']:,} prompt tokens looked up were "
                  f"hits ({pc['hit_rate']:.1%})")
    occ = rt["occupancy"]
    out.print(f"  {occ['unit']}s in use: peak {occ['peak_units']:,} of {occ['usable_units']:,}, mean "
              f"{occ['mean_units']:,.0f} over steps; running peak {occ['peak_running']:,} (mean "
              f"{occ['mean_running']:,.1f}); waiting peak {occ['peak_waiting']:,} (mean {occ['mean_waiting']:,.1f})")
    for p in occ["pools"]:
        size = "" if p.get("usable") is None else f" of {p['usable']:,}"
        out.print(f"    {p['name']}: {p['at_peak']:,} at the peak (its own peak {p['peak']:,}{size})", highlight=False)
    pipe = rt.get("pipeline")
    if pipe:
        out.print(f"  pipeline: {pipe['num_stages']} stages, binding stage {pipe['binding_stage']}; "
                  f"{pipe['in_flight']} batch(es) in flight ({pipe['in_flight_rule']}); each stage's clock: the step "
                  f"time's per-layer terms x {pipe['stage_share']:.3f}; boundary link {pipe['link']} "
                  f"({pipe['activation_bytes_per_token']:,} B per token per GPU)", highlight=False)
        for st in pipe["peaks"]:
            first, last = st["layers"]
            out.print(f"    stage {st['stage']} (layers {first}-{last}): peak {st['peak_units']:,} of "
                      f"{st['usable_units']:,} {occ['unit']}s = {st['peak_bytes']:,} of {st['usable_bytes']:,} B",
                      highlight=False)
    print_table(out, "per request", [Col("", KEY), Col("", KEY), Col("p50", "right"), Col("p90", "right"),
                                     Col("p99", "right"), Col("max", "right")],
                [["queue wait", *_q(rt["queue_wait"])], ["time to first token", *_q(rt["ttft"])],
                 ["time per output token", *_q(rt["tpot"], 1000.0, "ms")], ["end to end", *_q(rt["e2e"])]])
    if rt.get("output_tok_s_per_gpu") is not None:
        out.print(f"  output: {rt['output_tokens']:,} tokens, {rt['output_tok_s_per_gpu']:,.1f} tokens/s per GPU")
    for note in rt["modelled"]:
        out.print(f"  modelled: {note}", highlight=False)
    for note in (pipe or {}).get("not_modelled", ()):
        out.print(f"  not modelled (pipeline stages): {note}", highlight=False)
    cap = report.get("capacity")
    if cap:
        out.print(f"  {capacity_line(cap)}", highlight=False)
        if cap.get("steady"):
            st = cap["steady"]
            out.print(f"    steady: a window of {st['window_lifetimes']:.1f} request lifetimes of {st['lifetime_s']:.3g} s "
                      f"(arrivals {st['window_s'][0]:,.1f}–{st['window_s'][1]:,.1f} s); {st['arrived']:,} "
                      f"requests against their copies one trace earlier: {st['lifetime_growth_s']:+.3g} s (median)",
                      highlight=False)
            if cap.get("copies", 1) > 1:
                out.print(f"    the replay above is {cap['copies']} copies of the trace: {cap['extension']}",
                          highlight=False)
        if cap.get("undetermined_above") is not None:
            out.print(f"    at least: at x{cap['undetermined_above']:.4g} the trace, extended as far as it may be, is "
                      "too short to say", highlight=False)
    if plot_note:
        out.print(f"  plot: {plot_note}")


def capacity_line(cap: dict[str, Any], probes: bool = True) -> str:
    """The rate a replayed engine's --find-capacity found: the scale, the requests per second it is, the
    bounds it keeps, and (``probes``) every probe, as docs/simulate.md says it reports."""
    from csa_plan.cli.format import fmt_rate

    rate = f" = {fmt_rate(cap['rate_per_s'])} req/s" if cap.get("rate_per_s") else ""
    tried = cap["probes"]
    listed = (": " + ", ".join(f"x{p['rate_scale']:.4g} {'ok' if p['ok'] else 'no'}" for p in tried)) if probes else ""
    return (f"capacity: {'at least ' if cap['at_least'] else ''}x{cap['rate_scale']:.4g} arrival rate{rate} keeps "
            f"{cap['criterion']} ({plural(len(tried), 'probe')}{listed})")


def render_side_by_side(out: Console, report: dict[str, Any]) -> None:
    """Several engines' runtime replays of one trace: one column per engine (``simulate --engine A --engine B``)."""
    docs = report["side_by_side"]
    out.print(f"[bold]{report['model']['name']}[/bold] on {report['workload']['source']} "
              f"({plural(report['workload']['requests'], 'request')}), tp {report['deployment']['tp']}: "
              f"{len(docs)} engines side by side")
    runs = [d for d in docs if d.get("runtime") is not None]
    for d in docs:
        if d.get("runtime") is None:
            why = "refused: " + (d.get("engine_refusal") or {}).get("message", "nothing replayed (the weights do not fit)")
            out.print(f"  {(d.get('engine') or {}).get('name', '?')}: {why}", highlight=False)
    for d in runs:
        out.print(f"  {d['runtime']['headline']}", highlight=False)
    if not runs:
        return
    for d in runs:
        out.print(f"  step time [{d['engine']['name']}]: {_step_time(d['time'])}; arrivals x{d['time']['rate_scale']:g}",
                  highlight=False)
    rows: list[list[str]] = []

    def row(label, f):
        rows.append([label] + [f(d["runtime"], d) for d in runs])

    f1 = lambda v: "-" if v is None else f"{v:,.1f}"
    row("KV memory / device (GiB)", lambda r, d: f"{d['engine']['pool']['kv_memory_bytes'] / 2**30:,.2f}")
    row("served / refused", lambda r, d: f"{r['served']:,} / {r['requests'] - r['served']:,}")
    row("steps; makespan (s)", lambda r, d: f"{r['steps']:,}; {r['makespan_s']:,.1f}")
    row("running: peak / mean", lambda r, d: f"{r['occupancy']['peak_running']:,} / {r['occupancy']['mean_running']:,.1f}")
    row("waiting: peak / mean", lambda r, d: f"{r['occupancy']['peak_waiting']:,} / {r['occupancy']['mean_waiting']:,.1f}")
    row("preempted / retracted", lambda r, d: f"{r['preemptions']['count']:,}")
    row("  requests; most for one", lambda r, d: f"{r['preemptions']['requests']:,}; "
                                                 f"{r['preemptions']['most_for_one_request']:,}")
    row("  tokens recomputed", lambda r, d: f"{r['preemptions']['tokens_recomputed']:,}")
    row("prefix-cache hits", lambda r, d: f"{r['prefix_cache']['hit_tokens']:,} "
                                                       f"({r['prefix_cache']['hit_rate']:.1%})")
    for key, label in (("queue_wait", "queue wait"), ("ttft", "first token"), ("e2e", "end to end")):
        row(f"{label} p50/p99/max s", lambda r, d, k=key: "/".join(f1(r[k][q]) for q in ("p50_s", "p99_s", "max_s")))
    row("per output token p50/p99/max ms", lambda r, d: "/".join(
        f1(None if r["tpot"][q] is None else r["tpot"][q] * 1000) for q in ("p50_s", "p99_s", "max_s")))
    row("units in use: peak", lambda r, d: f"{r['occupancy']['peak_units']:,} {r['occupancy']['unit']}s")
    row("units usable", lambda r, d: f"{r['occupancy']['usable_units']:,}")
    print_table(out, "side by side", [Col("", KEY)] + [Col(d["engine"]["name"]) for d in runs], rows)
    for d in runs:
        for note in d["runtime"]["modelled"]:
            out.print(f"  {d['engine']['name']}: {note}", highlight=False)


def render_frontier(out: Console, report: dict[str, Any], plot_note: str | None = None) -> None:
    """``simulate --max-concurrency C1,C2,...``: one row per client concurrency, the frontier's points marked."""
    fr, t = report["frontier"], report["time"]
    dep = report["deployment"]
    out.print(f"[bold]{report['model']['name']}[/bold] on {report['workload']['source']} "
              f"({plural(report['workload']['requests'], 'request')} a point), "
              f"{(report.get('engine') or {}).get('name', '?')} tp {dep['tp']} dp {dep['dp']} ({dep['devices']} GPUs): "
              f"the throughput-interactivity frontier over {len(fr['points'])} client concurrencies", highlight=False)
    out.print(f"  step time: {_step_time(t)}", highlight=False)
    f3 = lambda v, s=1.0: "-" if v is None else f"{v * s:,.3f}"
    f1 = lambda v: "-" if v is None else f"{v:,.1f}"
    rows = [[f"{p['concurrency']:,}", f"{p['served']:,}/{p['requests']:,}", f1(p["output_tok_s_per_gpu"]),
             f1(p["output_tok_s_per_user"]), f3(p["ttft_p50_s"]), f3(p["ttft_p99_s"]), f3(p["tpot_p50_s"], 1000),
             f3(p["tpot_p99_s"], 1000), f"{p['peak_running']:,}", f"{p['preemptions']:,}",
             "*" if p["on_frontier"] else ""] for p in fr["points"]]
    print_table(out, "frontier (one closed-loop replay per concurrency)",
                [Col("concurrency", KEY), Col("served"), Col("tok/s/GPU"), Col("tok/s/user"), Col("TTFT p50 s"),
                 Col("TTFT p99 s"), Col("TPOT p50 ms"), Col("TPOT p99 ms"), Col("running peak"), Col("preempted"),
                 Col("frontier")], rows)
    out.print(f"  tok/s/user: {fr['per_user']}; tok/s/GPU: {fr['per_gpu']}; * on the frontier (no other point is "
              "better on both)", highlight=False)
    for note in fr["modelled"]:
        out.print(f"  modelled: {note}", highlight=False)
    if plot_note:
        out.print(f"  plot: {plot_note}", highlight=False)


def render_disaggregation(out: Console, d: dict[str, Any]) -> None:
    """Both pools, the link and where TTFT goes (``runtime.disaggregation``)."""
    def s(q: dict[str, Any], scale: float = 1.0) -> str:
        return "-" if q["p50_s"] is None else f"{q['p50_s'] * scale:.3f} / {q['p99_s'] * scale:.3f}"

    out.print("disaggregated (p50 / p99):")
    for role in ("prefill", "decode"):
        r = d[role]
        h = r.get("transfer_hold")
        extra = "" if h is None else (f", blocks held for their transfers included ({h['peak_units_without_hold']:,} "
                                      f"freed at the finish; {h['admitted_later']:,} admitted later for the hold, "
                                      f"{h['rounds']} round(s)" + ("" if h["converged"] else ", NOT converged") + ")")
        out.print(f"  {role}: {r['workers']} x {r['shape']} ({r['gpus']} GPUs), {r['engine']}: {r['unit']}s peak "
                  f"{r['peak_units']:,} of {r['usable_units']:,}{extra}; running peak {r['peak_running']:,}, "
                  f"waiting peak {r['peak_waiting']:,}")
    t, link = d["transfer"], d["link"]
    b = t["bytes_per_gpu"]
    out.print(f"  transfer over {link['name']} ({link['bytes_s_per_gpu'] / 1e9:g} GB/s per GPU, line rate): "
              f"{t['requests']:,} requests, {t['bytes_total']:,} B in all; per GPU p50 {b['p50'] or 0:,} B, "
              f"p99 {b['p99'] or 0:,} B; {s(t['seconds'], 1000)} ms (link wait {s(t['link_wait'], 1000)} ms)")
    c = t.get("decode_prefix_cache") or {}
    if c.get("enabled"):
        out.print(f"  decode-side prefix cache: {c['hit_tokens']:,} prompt tokens hit ({c['requests_hit']:,} "
                  f"requests), {c['bytes_saved']:,} B not transferred ({c['bytes_saved_per_gpu']:,} B per GPU); "
                  f"{c['rounds']} round(s)" + ("" if c["converged"] else ", NOT settled"), highlight=False)
    else:
        out.print("  decode-side prefix cache: none (every transfer carries its whole prompt)", highlight=False)
    p = d["ttft_parts"]
    out.print(f"  TTFT parts, s: prefill queue {s(p['prefill_queue'])}, prefill {s(p['prefill'])}, transfer "
              f"{s(p['transfer'])}, decode first token {s(p['decode_first_token'])}")


def render_host_tier(out: Console, h: dict[str, Any]) -> None:
    """The host KV tier: its capacity, and prefix hits from HBM and from the host apart (``runtime.host_tier``)."""
    q = h["queried_tokens"] or 1
    out.print(f"host KV tier ({h['flag']}): {h['capacity_tokens']:,} tokens of prefix, {h['host_bytes_per_gpu']:,} B "
              f"per GPU; prefix hits: HBM {h['hbm_hit_tokens']:,} tokens ({h['hbm_hit_tokens'] / q:.1%}), host "
              f"{h['host_hit_tokens']:,} ({h['host_hit_tokens'] / q:.1%}) of {h['queried_tokens']:,} looked up; "
              f"reloaded {h['reload_bytes']:,} B over {h['link']} ({h['link_bytes_s'] / 1e9:g} GB/s per GPU) in "
              f"{h['reload_s']:.3f} s of steps")
