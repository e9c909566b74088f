"""Every chart the commands draw (matplotlib is the optional ``[plot]`` extra, imported lazily)."""

from __future__ import annotations

import importlib.util
from typing import Any

from csa_plan.cli.format import fmt_rate, marker
from csa_plan.planner.reports.text import id_runs
from csa_plan.planner.units import GiB


PLOT_HINT = "pip install 'csa-plan[plot]'"


def plotting_available() -> bool:
    """Whether matplotlib can be imported (without importing it)."""
    return importlib.util.find_spec("matplotlib") is not None


def require_plotting(option: str = "--plot") -> None:
    """The one behaviour for every chart option when matplotlib is missing: bad input (exit 2)
    before any work, with the install hint, instead of a silent fallback."""
    if not plotting_available():
        from csa_plan.planner.errors import BadInput

        raise BadInput("options", option, f"needs matplotlib, which is not installed: {PLOT_HINT}")


def say_written(consoles: Any, what: str, path: str, as_json: bool) -> None:
    """Where the chart went: on stdout with the tables, on stderr beside --json (stdout stays JSON)."""
    from csa_plan.cli.console import esc

    (consoles.err if as_json else consoles.out).print(f"{what} written to {esc(path)}", highlight=False, soft_wrap=True)


def write_budget_plot(consoles: Any, budget: dict[str, Any] | None, path: str | None, as_json: bool) -> None:
    """Draw the waterfall to ``path`` when asked; a missing device or matplotlib is said, not fatal."""
    if path is None:
        return
    from csa_plan.cli.console import esc

    if budget is None:
        note = "--budget-plot needs a device (--device-memory): no budget was computed"
    else:
        note = plot_budget(budget, path)
    target = consoles.err if as_json else consoles.out
    target.print(esc(note) if note else f"budget chart written to {esc(path)}")


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, every text drawn literally: a ``$`` in a trace
    path or a spec name is no mathtext formula (which could fail to parse), and no TeX runs."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False
    matplotlib.rcParams["text.usetex"] = False
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str, **kwargs: Any) -> None:
    """A temporary file in the target's folder renamed into place (``planner/files.write_atomically``):
    a reader never sees half a file and concurrent writers leave one whole one. The path was
    checked (``check_output_path``) before any work, so its extension names the format. The
    figure is closed whether or not the write succeeds."""
    import matplotlib.pyplot as plt

    from csa_plan.planner.files import write_atomically

    from pathlib import Path

    fmt = Path(path).suffix[1:].lower()
    try:
        write_atomically(path, "--plot", lambda tmp: fig.savefig(tmp, format=fmt, **kwargs))
    finally:
        plt.close(fig)


def log_scale(ax: Any, which: str, base: int = 10) -> None:
    """A log ``which`` ("x" or "y") axis whose tick labels are plain numbers (1, 4, 1,024, 0.5):
    matplotlib's default log labels are mathtext, which ``_pyplot`` turns off so that no input text
    is read as a formula."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    getattr(ax, f"set_{which}scale")("log", base=base)
    axis = getattr(ax, f"{which}axis")
    if base == 10:  # 1, 2, 5 per decade: a range within one decade still gets several labelled ticks
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def legend_outside(ax, handles=None, labels=None, **kwargs: Any):
    """The legend to the right of the axes, outside the data, so no series runs behind it."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    return ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
                     fontsize=8, **kwargs)


def simulate_figure(series, title: str):
    """Residency per device group against its limit (top) and requests in flight (bottom), on their own
    axes: two series can never hide one another however their scales happen to line up."""
    from matplotlib.ticker import MaxNLocator

    plt = _pyplot()

    seconds = series.edges_ns / 1e9
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(11, 6), sharex=True, height_ratios=(3, 1))
    for devices, values in series.groups:
        ax.step(seconds, values / GiB, where="post", linewidth=1.5, zorder=2,
                label=f"resident, devices {id_runs(list(devices))}")
    if series.limit_bytes:  # dashed and above: a resident line at the limit shows through its gaps
        ax.axhline(series.limit_bytes / GiB, color="red", linestyle=(0, (5, 4)), linewidth=1.2, zorder=3,
                   label="limit per device")
    ax.set_ylabel("resident per device\n(GiB, max per bucket)")
    ax.set_ylim(bottom=0)  # bytes start at 0: a cropped axis would exaggerate every change
    ax.set_title(title)
    legend_outside(ax)
    ax2.step(seconds, series.in_flight, where="post", color="tab:gray", linewidth=1.5,
             label="requests in flight (all devices)")
    ax2.set_xlabel("time (s)")
    ax2.set_ylabel("in flight")
    ax2.set_ylim(bottom=0)
    ax2.yaxis.set_major_locator(MaxNLocator(integer=True))  # requests are whole
    legend_outside(ax2)
    fig.tight_layout()
    return fig


def plot_simulate(series, path: str, title: str) -> str | None:
    """Draw ``simulate_figure`` to ``path``; None on success, else why not."""
    try:
        _pyplot()
    except ImportError:
        return "matplotlib is not installed (pip install 'csa-plan[plot]'); showing the terminal sparkline instead"
    _save(simulate_figure(series, title), path, bbox_inches="tight")
    return None


def plot_sweep(report: dict[str, Any], path: str) -> str | None:
    """Devices vs sustainable rate for every feasible point, the front drawn as a step; None on success."""
    try:
        plt = _pyplot()
    except ImportError:
        return "matplotlib is not installed (pip install 'csa-plan[plot]'); the front is shown as text instead"
    by_key = {r["key"]: r for r in report["results"]}

    def measured(r: dict[str, Any]) -> bool:  # a search ceiling is no rate: never plotted as one
        return r["sustainable_rate_per_s"] is not None and r.get("rate_limited_by_memory", not r["at_least"])

    feasible = [r for r in report["results"] if r["feasible"] and measured(r)]
    others = [r for r in report["results"] if not r["feasible"] and measured(r)]
    unbounded = [by_key[k] for k in report.get("not_limited_by_memory", [])]
    front = [by_key[k] for k in report["pareto_front"]]
    fig, ax = plt.subplots(figsize=(9, 5.5 + 0.15 * len(front)))
    if unbounded:  # along the top edge, in axes coordinates: their rate is off the chart, not a value
        ax.scatter([r["devices"] for r in unbounded], [0.97] * len(unbounded), marker="^", color="tab:green",
                   transform=ax.get_xaxis_transform(), clip_on=False, zorder=3,
                   label="not limited by memory within this trace (no measured rate)")
    if others:
        ax.scatter([r["devices"] for r in others], [r["sustainable_rate_per_s"] for r in others], marker="x",
                   color="lightgrey", label="not feasible at the target rate")
    cards = sorted({r["point"]["device"] for r in feasible})
    for i, card in enumerate(cards):  # a marker per card, set side by side: equal points never hide each other
        mine = [r for r in feasible if r["point"]["device"] == card]
        shift = 1.06 ** (i - (len(cards) - 1) / 2)
        ax.scatter([r["devices"] * shift for r in mine], [r["sustainable_rate_per_s"] for r in mine],
                   color="tab:blue", alpha=0.6, marker="osD^v<>"[i % 7],
                   label="feasible" if len(cards) == 1 else f"feasible, {card}")
    if front:
        xs = [r["devices"] for r in front]
        ys = [r["sustainable_rate_per_s"] for r in front]
        ax.step(xs, ys, where="post", color="tab:red", label="Pareto front")
        ax.scatter(xs, ys, color="tab:red", zorder=3)
        for i, r in enumerate(front, 1):
            ax.annotate(str(i), (r["devices"], r["sustainable_rate_per_s"]), fontsize=8, color="tab:red",
                        textcoords="offset points", xytext=(-4, 6), ha="right")
    log_scale(ax, "x", base=2)
    devices = [r["devices"] for r in report["results"]]
    if devices:  # set, not autoscaled: points drawn in axes coordinates alone leave no data limits
        ax.set_xlim(min(devices) / 1.4, max(devices) * 1.4)
    if any((r["sustainable_rate_per_s"] or 0) > 0 for r in feasible + others):
        log_scale(ax, "y")  # rates span orders of magnitude across deployments
    ax.set_xlabel("devices (tp x pp x dp)")
    ax.set_ylabel("sustainable rate (requests/s, no refusals; log)")
    ax.set_title(f"csa-plan sweep {report['spec']['name']}: {report['grid']['ran'] + report['grid']['resumed']} "
                 f"points simulated, {report['grid']['skipped']} skipped")
    legend_outside(ax)
    ax.grid(True, alpha=0.3)
    caption = "\n".join(f"{i}: {r['label']} ({fmt_rate(r['sustainable_rate_per_s'])} req/s)"
                        for i, r in enumerate(front, 1))
    fig.tight_layout(rect=(0, 0.015 + 0.022 * len(front), 1, 1))
    if caption:
        fig.text(0.01, 0.01, caption, fontsize=7.5, va="bottom", family="monospace")
    _save(fig, path, dpi=110, bbox_inches="tight")
    return None


def plot_compare(spec, options, layouts, path: str) -> None:
    """Bytes per request against context length, one line per layout profile or engine model."""
    plt = _pyplot()

    from csa_plan.planner.budget.comparison import context_lengths, curves
    from csa_plan.planner.plan import apply_options

    descriptors = apply_options(spec, options)
    high = max(d.max_seq_len for d in descriptors)
    low = min(high, max(d.window for d in descriptors))
    lengths = context_lengths(low, high)
    series = curves(spec, options, lengths, layouts)
    fig, ax = plt.subplots(figsize=(8, 5))
    styles = ("-", "--", "-.", ":")
    markers = ("o", "s", "^", "v", "D", "x")
    for i, (name, values) in enumerate(series.items()):  # two profiles with equal bytes stay told apart
        ax.plot(lengths, [v / (1 << 20) for v in values], label=name, linestyle=styles[i % len(styles)],
                marker=markers[i % len(markers)], markersize=4, markevery=max(1, len(lengths) // 8))
    log_scale(ax, "x", base=2)
    log_scale(ax, "y")
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("state per request per device (MiB, log)")
    ax.set_title(f"{spec.name}: state per request by layout profile and engine")
    legend_outside(ax)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    _save(fig, path, bbox_inches="tight")


def _short(source: str, width: int = 70) -> str:
    """A step's source on one line of the chart (the table and --json carry it whole)."""
    return source if len(source) <= width else source[:width - 1] + "…"


def plot_budget(budget: dict[str, Any], path: str) -> str | None:
    """The tightest stage's budget as a waterfall: each step a bar from the level before it; None on success."""
    try:
        plt = _pyplot()
    except ImportError:
        return "matplotlib is not installed (pip install 'csa-plan[plot]'); the waterfall is shown as a table"
    steps = budget["stages"][budget["binding_stage"]]["steps"]
    labels, bottoms, heights, colors = [], [], [], []
    level = 0
    for s in steps:
        n = s["bytes"] / GiB
        if s["kind"] in ("card", "usable", "kv"):
            labels.append(s["label"])
            bottoms.append(0)
            heights.append(n)
            colors.append("tab:green" if s["kind"] == "kv" else "tab:blue")
            level = n
        else:
            labels.append(s["label"] + marker(s) + f"\n{_short(s['source'])}")
            bottoms.append(level - n)
            heights.append(n)
            colors.append("tab:orange" if s["kind"] == "weights" else ("tab:gray" if s["estimate"] else "tab:red"))
            level -= n
    fig, ax = plt.subplots(figsize=(12, 0.65 * len(steps) + 1.5))  # two-line labels: the step and its source
    y = list(range(len(steps)))[::-1]
    ax.barh(y, heights, left=bottoms, color=colors)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel("GiB per GPU")
    d = budget["deployment"]
    ax.set_title(f"{budget['engine']}: tp {d['tp']} pp {d['pp']} dp {d['dp']} ep {d['ep']} — state pool "
                 f"{budget['kv_memory_bytes'] / GiB:.2f} GiB")
    fig.tight_layout()
    _save(fig, path)
    return None


def plot_runtime(report: dict[str, Any], path: str, title: str) -> str | None:
    """Blocks in use against the pool, with running and waiting; None on success."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'csa-plan[plot]')"
    rt = report["runtime"]
    s, occ = rt["series"], rt["occupancy"]
    fig, ax = plt.subplots(figsize=(10, 5))
    ax.step(s["t_s"], s["units"], where="post", label=f"{occ['unit']}s in use (max per point)")
    ax.axhline(occ["usable_units"], color="red", linestyle="--", label="pool (usable)")
    ax.set_xlabel("time (s)")
    ax.set_ylabel(f"{occ['unit']}s")
    ax.set_ylim(bottom=0)
    ax2 = ax.twinx()
    ax2.step(s["t_s"], s["running"], where="post", color="grey", alpha=0.6, label="running")
    ax2.step(s["t_s"], s["waiting"], where="post", color="orange", alpha=0.6, label="waiting")
    ax2.set_ylabel("requests")
    ax2.set_ylim(bottom=0)
    h, l = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h + h2, l + l2, loc="upper left", fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    _save(fig, path)
    return None


def plot_frontier(report: dict[str, Any], path: str, title: str) -> str | None:
    """Output tok/s per GPU against tok/s per user, one point per client concurrency, labelled; None on success."""
    try:
        plt = _pyplot()
    except ImportError:
        return f"matplotlib is not installed ({PLOT_HINT})"
    pts = [p for p in report["frontier"]["points"]
           if p["output_tok_s_per_gpu"] is not None and p["output_tok_s_per_user"] is not None]
    fig, ax = plt.subplots(figsize=(8, 5))
    xs = [p["output_tok_s_per_user"] for p in pts]
    ys = [p["output_tok_s_per_gpu"] for p in pts]
    ax.plot(xs, ys, "-", color="grey", alpha=0.5)
    ax.scatter(xs, ys, c=["tab:blue" if p["on_frontier"] else "tab:red" for p in pts], zorder=3)
    for p, x, y in zip(pts, xs, ys):
        ax.annotate(f"c={p['concurrency']:,}", (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_xlabel("output tok/s per user (1 / TPOT p50)")
    ax.set_ylabel("output tok/s per GPU")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    dep = report["deployment"]
    ax.set_title(f"{title}\n{(report.get('engine') or {}).get('name', '')} tp {dep['tp']} dp {dep['dp']}, "
                 f"{dep['devices']} GPUs", fontsize=9)
    fig.tight_layout()
    _save(fig, path)
    return None
