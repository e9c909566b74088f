"""Fit the physics step time's coefficients on published serving rows, and report the error per row.

    python tools/fit_steptime.py [--csv benchmarks/published_serving.csv] [--write] [--max-requests 2048]

Each usable row (DeepSeek-V4, a card with figures in ``planner/runtime/hardware.py``, no
speculative decoding: the SGLang replay does not model drafts) is replayed once through
csa-plan's own engine runtime (sglang-0.5.23, the closest replayed release to the rows'
0.5.15; fixed lengths at the row's concurrency, a closed-loop client), every step lasting
1 ns, while each step's six basis terms (``physics.BASIS``) are recorded. In a closed loop the
schedule does not depend on how long steps take, so each request's TPOT and TTFT are linear
in the coefficients: mean TPOT = g . beta. The coefficients minimise the squared relative
TPOT error over the fit rows, non-negative (Lawson-Hanson). Rows are split: fitted on Hopper
V4-Flash rows; held out are V4-Pro (another model), Blackwell (another GPU family) and the
rows below concurrency 1024 (another regime). ``--write`` stores the fit in
``planner/runtime/steptime_fit.json`` with the rows, the errors and the band.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIT_PATH = ROOT / "planner" / "runtime" / "steptime_fit.json"


def usable(row: dict) -> str | None:
    """Why a row is not replayed, or None."""
    from csa_plan.planner.runtime.hardware import card_perf

    if not row["model"].startswith("deepseek-v4"):
        return "not DeepSeek-V4 (the roofline reads V4's compressed layers)"
    if card_perf(row["gpu"]) is None:
        return f"no card figures for {row['gpu']} in planner/runtime/hardware.py"
    if row["spec_method"] not in ("", "none"):
        return f"speculative decoding ({row['spec_method']}): the SGLang replay does not model drafts"
    if not row["tpot_ms"] or not row["max_concurrency"]:
        return "no TPOT or concurrency"
    return None


def split(row: dict) -> str:
    """Fitted on V4-Flash at concurrency 1024 and above, per GPU family; the rest held out."""
    if row["model"] != "deepseek-v4-flash":
        return "held out: model"
    if int(row["max_concurrency"]) < 1024:
        return "held out: regime"
    return "fit"


def replay_row(row: dict, max_requests: int) -> dict:
    """The row's workload through the SGLang runtime: per-request TPOT/TTFT basis vectors."""
    import csa_plan.planner.runtime.serve as serve_mod
    from csa_plan.planner.commands.simulate import SimulateRequest, run_simulate
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.runtime.hardware import card_perf
    from csa_plan.planner.runtime.loop import replay
    from csa_plan.planner.runtime.physics import BASIS, basis_rows, model_cost
    from csa_plan.planner.runtime.sources import model_inputs
    from csa_plan.planner.runtime.steptime import StepSource, StepTime, linear_seconds
    from csa_plan.planner.runtime.trace import runtime_trace
    from csa_plan.planner.workloads import MixSettings
    from csa_plan.planner.loaders.model_files import load_model

    conc = int(row["max_concurrency"])
    n = min(int(row["num_prompts"] or 2 * conc), max_requests)
    isl, osl, tp = int(row["isl"]), int(row["osl"]), int(row["num_gpus"] or row["tp"])
    spec = load_model(row["model"])
    data, inventory = model_inputs(spec)
    rows = basis_rows(model_cost(spec, data, inventory), card_perf(row["gpu"]), tp)
    vecs = [rows[t] for t in BASIS]
    feats: list[list[float]] = []

    def record(step):
        b = step.batch
        tokens = b.prefill + b.decode_tokens
        feats.append([linear_seconds(v, tokens, b.prefill_pos, b.decode_reqs, b.decode_ctx) for v in vecs])

    one_ns = StepTime(20.0, 10_000.0, linear=(0.5e-9, 0, 0, 0, 0, 0, -1.0), source=StepSource.FIXED)
    captured = {}

    def serve(setup, wl, rate_scale, progress=None):
        trace = runtime_trace(wl, rate_scale)
        rt = setup.plan.runtime(setup.sizing, trace, setup.options)
        res = replay(rt, trace, one_ns, max_concurrency=conc, on_step=record)
        captured["res"] = res
        return res

    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for _ in range(n):
            f.write(json.dumps({"arrival_s": 0, "prompt_tokens": isl, "output_tokens": osl}) + "\n")
        path = f.name
    original = serve_mod.serve
    serve_mod.serve = serve
    try:
        given = MixSettings(model=row["model"], tp=tp, device_memory_bytes=None, step_time="fixed",
                            max_concurrency=conc)
        from csa_plan.planner.cards import CardBytes, card

        given = MixSettings(**{**given.__dict__, "device_memory_bytes": CardBytes(card(row["gpu"]))})
        req = SimulateRequest(path, given, engine="sglang-0.5.23",
                              engine_settings=EngineSettings(gpu=row["gpu"]))
        outcome = run_simulate(req)
    finally:
        serve_mod.serve = original
        Path(path).unlink()
    if "res" not in captured:
        why = (outcome.report.get("engine_refusal") or {}).get("message") or f"exit {int(outcome.exit_code)}"
        return {"refused": str(why)[:200]}
    res = captured["res"]
    phi = np.asarray(feats, dtype=np.float64)
    cum = np.vstack([np.zeros((1, len(BASIS))), np.cumsum(phi, axis=0)])
    end = np.asarray(res.series.end_ns, dtype=np.int64)
    idx = lambda t: np.searchsorted(end, t, side="left") + 1  # steps ended by time t (t is a step end)
    first = np.asarray(res.first_token_ns)
    fin = np.asarray(res.finished_ns)
    arr = np.asarray(res.arrival_ns)
    ok = (fin >= 0) & (first >= 0)
    at = lambda t: np.where(t >= end[0], idx(t), 0)
    tpot = (cum[at(fin[ok])] - cum[at(first[ok])]) / (osl - 1)
    ttft = cum[at(first[ok])] - cum[at(arr[ok])]
    running = np.asarray(res.series.running)
    return {"g_tpot": tpot.mean(axis=0).tolist(), "g_ttft": ttft.mean(axis=0).tolist(), "requests": n,
            "served": int(ok.sum()), "steps": int(len(phi)), "peak_running": int(running.max()) if len(running) else 0}


def main(argv: list[str] | None = None) -> int:
    from csa_plan.planner.runtime.nnls import nnls
    from csa_plan.planner.runtime.physics import BASIS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default=str(ROOT / "benchmarks" / "published_serving.csv"))
    ap.add_argument("--max-requests", type=int, default=2048)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--cache", default="/tmp/fit_steptime_cache.json", help="replayed rows (re-fit without replaying)")
    args = ap.parse_args(argv)
    rows = list(csv.DictReader(open(args.csv, newline="", encoding="utf-8")))
    cache = json.loads(Path(args.cache).read_text()) if Path(args.cache).exists() else {}
    used = []
    for i, row in enumerate(rows):
        why = usable(row)
        if why is not None:
            continue
        key = f"{row['source_id']}:{i}:{args.max_requests}"
        if key not in cache:
            print(f"replaying row {i}: {row['model']} {row['gpu']} x{row['num_gpus']} c{row['max_concurrency']}",
                  file=sys.stderr, flush=True)
            cache[key] = replay_row(row, args.max_requests)
            Path(args.cache).write_text(json.dumps(cache))
        if "refused" in cache[key]:
            print(f"row {i}: not replayed: {cache[key]['refused']}", file=sys.stderr)
            continue
        used.append((i, row, cache[key], split(row)))
    from csa_plan.planner.runtime.hardware import card_perf

    family = lambda r: card_perf(r["gpu"]).family
    fams = sorted({family(r) for _, r, _, part in used if part == "fit"})
    betas = {}
    for fam in fams:
        fit_rows = [u for u in used if u[3] == "fit" and family(u[1]) == fam]
        a = np.array([np.array(g["g_tpot"]) / (float(r["tpot_ms"]) / 1e3) for _, r, g, _ in fit_rows])
        betas[fam] = nnls(a, np.ones(len(fit_rows)))
    table = []
    for i, row, g, part in used:
        fam = family(row)
        own = betas.get(fam, betas.get("hopper"))
        other = [b for f, b in betas.items() if f != fam]
        tpot = float(np.dot(g["g_tpot"], own)) * 1e3
        ttft = float(np.dot(g["g_ttft"], own)) * 1e3
        meas_tpot, meas_ttft = float(row["tpot_ms"]), float(row["ttft_ms"]) if row["ttft_ms"] else None
        cross = float(np.dot(g["g_tpot"], other[0])) * 1e3 if other else None
        table.append({"row": i, "source": row["source_id"], "model": row["model"], "gpu": row["gpu"],
                      "gpus": int(row["num_gpus"] or row["tp"]), "concurrency": int(row["max_concurrency"]),
                      "split": part, "tpot_ms": meas_tpot, "tpot_pred_ms": round(tpot, 2),
                      "tpot_err": round(tpot / meas_tpot - 1, 4), "ttft_ms": meas_ttft,
                      "ttft_pred_ms": round(ttft, 1),
                      "ttft_err": None if not meas_ttft else round(ttft / meas_ttft - 1, 4),
                      "tpot_err_other_family_fit": None if cross is None else round(cross / meas_tpot - 1, 4),
                      "peak_running": g["peak_running"], "requests": g["requests"]})
    for fam, beta in betas.items():
        print(f"beta {fam}: {dict(zip(BASIS, (float(b) for b in beta)))}")
    print(f"{'row':>4} {'model':18} {'gpu':5} {'n':>2} {'conc':>5} {'split':17} {'TPOT':>7} {'pred':>7} {'err':>7}"
          f" {'x-fam':>7} {'TTFT':>9} {'pred':>9} {'err':>7}")
    for t in table:
        te = "-" if t["ttft_err"] is None else f"{t['ttft_err']:+.1%}"
        xf = "-" if t["tpot_err_other_family_fit"] is None else f"{t['tpot_err_other_family_fit']:+.1%}"
        print(f"{t['row']:>4} {t['model']:18} {t['gpu']:5} {t['gpus']:>2} {t['concurrency']:>5} {t['split']:17} "
              f"{t['tpot_ms']:7.2f} {t['tpot_pred_ms']:7.2f} {t['tpot_err']:+7.1%} {xf:>7} {t['ttft_ms'] or 0:9.0f} "
              f"{t['ttft_pred_ms']:9.0f} {te:>7}")
    summary = {}
    for part in sorted({t["split"] for t in table}):
        errs = [abs(t["tpot_err"]) for t in table if t["split"] == part]
        summary[part] = {"rows": len(errs), "tpot_median_abs_err": round(float(np.median(errs)), 4),
                         "tpot_max_abs_err": round(float(max(errs)), 4)}
    cross = [abs(t["tpot_err_other_family_fit"]) for t in table
             if t["split"] == "fit" and t["tpot_err_other_family_fit"] is not None]
    if cross:
        summary["held out: GPU family (the other family's fit)"] = {
            "rows": len(cross), "tpot_median_abs_err": round(float(np.median(cross)), 4),
            "tpot_max_abs_err": round(float(max(cross)), 4)}
    print(json.dumps(summary, indent=1))
    if args.write:
        fits = {}
        for fam, beta in betas.items():
            own = [abs(t["tpot_err"]) for t in table if t["split"] == "fit" and family(t) == fam]
            held = [abs(t["tpot_err"]) for t in table if t["split"] != "fit" and family(t) == fam]
            band = f"TPOT median |error| {np.median(own):.0%} in-sample ({len(own)} rows, max {max(own):.0%})"
            if held:
                band += f", {np.median(held):.0%} held out ({len(held)} rows, max {max(held):.0%})"
            if cross:
                band += f", {np.median(cross):.0%} on the other GPU family"
            band += "; TTFT not fitted"
            gpus = sorted({t["gpu"] for t in table if t["split"] == "fit" and family(t) == fam})
            fits[f"sglang/{fam}"] = {"beta": dict(zip(BASIS, (float(b) for b in beta))),
                                     "data": f"{len(own)} SGLang 0.5.15 V4-Flash rows on {', '.join(gpus)} "
                                             "(the SGLang cookbook, benchmarks/published_serving.csv)",
                                     "band": band}
        out = {"schema": "csa-plan/steptime-fit/v1", "default": "sglang/hopper",
               "method": "tools/fit_steptime.py: NNLS on relative mean TPOT, closed-loop replays of "
                         "benchmarks/published_serving.csv", "fits": fits, "rows": table, "summary": summary}
        FIT_PATH.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {FIT_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
