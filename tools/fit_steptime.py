"""Fit the physics step time's coefficients on published serving rows, and report the error per row.

    python tools/fit_steptime.py [--csv benchmarks/published_serving.csv] [--write] [--max-requests 1024]

Each usable row (DeepSeek-V4, a card with figures in ``planner/steptime/hardware.py``, no
speculative decoding or EAGLE with its steps stated) is replayed once through csa-plan's own
engine runtime (sglang-0.5.23, the closest replayed release to the rows' 0.5.15; fixed lengths
at the row's concurrency, a closed-loop client), every step lasting 1 ns, while each step's batch
is recorded. In a closed loop the schedule does not depend on how long steps take, so each
request's TPOT and TTFT are linear in the coefficients of the six basis terms
(``physics.BASIS``): mean TPOT = g . beta.

EAGLE rows (TPOT per accepted token): the replay has no drafts, so each decode step is costed
with every request verifying its draft tokens (``spec_draft_tokens``) plus one draft pass per
speculative step (one more layer each), and TPOT divides that step by the accepted length
``1 + p + ... + p^steps`` at the acceptance rate ``--acceptance`` (0.65: the middle of the
published 0.57-0.70 MTP rates, docs/steptime.md). Targets: TPOT of every row, and TTFT of the
rows at concurrency 16 or less (prefill, little queueing).

Fitted per GPU family on V4-Flash at concurrency 1, 16, 1024 and 4096, by non-negative least
squares on relative error (Lawson-Hanson); held out: V4-Pro (another model), concurrency 64 and
256 (another regime), and each family's rows under the other family's fit (another GPU family).
``--write`` stores the fits in ``planner/steptime/steptime_fit.json`` with every row's error.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIT_PATH = ROOT / "planner" / "steptime" / "steptime_fit.json"
from csa_plan.planner.replay.draft_acceptance import DEFAULT_RATE as ACCEPTANCE
FIT_CONCURRENCY = (1, 16, 1024, 4096)
TTFT_MAX_CONCURRENCY = 16
TABLE_START, TABLE_END = "<!-- fit-table: tools/fit_steptime.py --write -->", "<!-- /fit-table -->"


def usable(row: dict) -> str | None:
    """Why a row is not replayed, or None."""
    from csa_plan.planner.steptime.hardware import card_perf

    if not row["model"].startswith("deepseek-v4"):
        return "not DeepSeek-V4 (the roofline reads V4's compressed layers)"
    if card_perf(row["gpu"]) is None:
        return f"no card figures for {row['gpu']} in planner/steptime/hardware.py"
    if row["spec_method"] not in ("", "none", "EAGLE") or (row["spec_method"] == "EAGLE" and not row["spec_steps"]):
        return f"speculative decoding ({row['spec_method']}) without its steps stated"
    if not row["tpot_ms"] or not row["max_concurrency"] or not row["isl"] or not row["osl"]:
        return "no TPOT, concurrency or lengths"
    return None


FLAGS = {"max-running-requests": ("max_running_requests", int), "mem-fraction-static": ("mem_fraction_static", float),
         "chunked-prefill-size": ("chunked_prefill_size", int)}


def row_settings(row: dict) -> dict:
    """The cell's own SGLang flags that csa-plan's engine settings take (from the row's notes)."""
    import re

    out = {}
    for flag, (name, kind) in FLAGS.items():
        m = re.search(rf"{flag} ([0-9.]+)", row["notes"])
        if m:
            out[name] = kind(m.group(1))
    return out


def split(row: dict) -> str:
    if row["model"] != "deepseek-v4-flash":
        return "held out: model"
    if int(row["max_concurrency"]) not in FIT_CONCURRENCY:
        return "held out: regime"
    return "fit"


def replay_row(row: dict, max_requests: int) -> dict:
    """The row's workload through the SGLang runtime (1 ns steps): every step's batch and every request's times."""
    import csa_plan.planner.serving.serve as serve_mod
    from csa_plan.planner.cards import CardBytes, card
    from csa_plan.planner.commands.simulate import SimulateRequest, run_simulate
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.replay.loop import replay
    from csa_plan.planner.steptime.model import StepSource, StepTime
    from csa_plan.planner.replay.trace import runtime_trace
    from csa_plan.planner.workloads import MixSettings

    conc = int(row["max_concurrency"])
    n = min(int(row["num_prompts"] or 2 * conc), max_requests)
    tp = int(row["num_gpus"] or row["tp"])
    feats: list[tuple[float, ...]] = []

    def record(step):
        b = step.batch
        feats.append((b.prefill, b.prefill_pos, b.decode_reqs, b.decode_tokens, b.decode_ctx))

    one_ns = StepTime(20.0, 10_000.0, linear=(0.5e-9, 0, 0, 0, 0, 0, 0, -1.0), source=StepSource.FIXED)
    captured = {}

    def serve(setup, wl, rate_scale, progress=None):
        trace = runtime_trace(wl, rate_scale)
        res = replay(setup.plan.runtime(setup.sizing, trace, setup.options), trace, one_ns, max_concurrency=conc,
                     on_step=record)
        captured["res"] = res
        return res

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for _ in range(n):
            f.write(json.dumps({"arrival_s": 0, "prompt_tokens": int(row["isl"]), "output_tokens": int(row["osl"])})
                    + "\n")
        path = f.name
    original = serve_mod.serve
    serve_mod.serve = serve
    try:
        given = MixSettings(model=row["model"], tp=tp, device_memory_bytes=CardBytes(card(row["gpu"])),
                            step_time="fixed", max_concurrency=conc)
        outcome = run_simulate(SimulateRequest(path, given, engine="sglang-0.5.23",
                                               engine_settings=EngineSettings(gpu=row["gpu"], **row_settings(row))))
    finally:
        serve_mod.serve = original
        Path(path).unlink()
    if "res" not in captured:
        why = (outcome.report.get("engine_refusal") or {}).get("message") or f"exit {int(outcome.exit_code)}"
        return {"refused": str(why)[:200]}
    res = captured["res"]
    return {"feats": np.asarray(feats, dtype=np.float64), "end": np.asarray(res.series.end_ns, dtype=np.int64),
            "first": np.asarray(res.first_token_ns), "fin": np.asarray(res.finished_ns),
            "arr": np.asarray(res.arrival_ns), "requests": n, "peak_running": int(np.max(res.series.running))}


def basis_vectors(row: dict, rec: dict) -> tuple[np.ndarray, np.ndarray | None]:
    """(TPOT basis, TTFT basis or None): per-request means of the steps' basis terms (module docstring)."""
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.steptime.hardware import card_perf
    from csa_plan.planner.steptime.physics import BASIS, basis_rows, model_cost
    from csa_plan.planner.serving.step_source import model_inputs
    from csa_plan.planner.steptime.model import linear_seconds

    spec = load_model(row["model"])
    data, inventory = model_inputs(spec)
    cost = model_cost(spec, data, inventory)
    vecs = basis_rows(cost, card_perf(row["gpu"]), int(row["num_gpus"] or row["tp"]))
    f = rec["feats"]
    steps = int(row["spec_steps"] or 0) if row["spec_method"] == "EAGLE" else 0
    draft = (int(row["spec_draft_tokens"] or steps + 1) - 1) if steps else 0

    def phi(feats: np.ndarray, spec: bool) -> np.ndarray:
        out = np.empty((len(feats), len(BASIS)))
        for k, (p, pos, dreq, dtok, dctx) in enumerate(feats):
            if spec and dreq:
                dtok = dreq * (1 + draft)
            tokens = int(p + dtok)
            for j, term in enumerate(BASIS):
                out[k, j] = linear_seconds(vecs[term], tokens, int(p), pos, int(dreq), int(dctx))
            if spec and dreq:
                out[k, BASIS.index("layer")] *= (cost.layers + steps) / cost.layers  # the draft passes
        return out

    end = rec["end"]
    at = lambda t: np.searchsorted(end, t, side="left") + 1  # steps ended by t (t is a step end, or 0)
    first, fin, arr = rec["first"], rec["fin"], rec["arr"]
    ok = (fin >= 0) & (first >= 0)
    osl = int(row["osl"])
    cum = np.vstack([np.zeros((1, len(BASIS))), np.cumsum(phi(f, bool(steps)), axis=0)])
    accept = sum(ACCEPTANCE ** j for j in range(steps + 1))
    tpot = ((cum[at(fin[ok])] - cum[at(first[ok])]) / (osl - 1)).mean(axis=0) / accept
    ttft = None
    if int(row["max_concurrency"]) <= TTFT_MAX_CONCURRENCY:
        plain = np.vstack([np.zeros((1, len(BASIS))), np.cumsum(phi(f, False), axis=0)])
        start = np.where(arr[ok] > 0, at(arr[ok]), 0)
        ttft = (plain[at(first[ok])] - plain[start]).mean(axis=0)
    return tpot, ttft


def main(argv: list[str] | None = None) -> int:
    from csa_plan.planner.steptime.hardware import card_perf
    from csa_plan.planner.steptime.nnls import nnls
    from csa_plan.planner.steptime.physics import BASIS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default=str(ROOT / "benchmarks" / "published_serving.csv"))
    ap.add_argument("--max-requests", type=int, default=1024)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    rows = list(csv.DictReader(open(args.csv, newline="", encoding="utf-8")))
    used = []
    for i, row in enumerate(rows):
        if usable(row) is not None:
            continue
        print(f"replaying row {i}: {row['model']} {row['gpu']} x{row['num_gpus']} c{row['max_concurrency']} "
              f"{row['spec_method'] or 'no spec'}", file=sys.stderr, flush=True)
        rec = replay_row(row, args.max_requests)
        if "refused" in rec:
            print(f"row {i}: not replayed: {rec['refused']}", file=sys.stderr)
            continue
        tpot, ttft = basis_vectors(row, rec)
        used.append({"i": i, "row": row, "tpot": tpot, "ttft": ttft, "split": split(row), "rec": rec})
    family = lambda r: card_perf(r["gpu"]).family
    betas = {}
    for fam in sorted({family(u["row"]) for u in used if u["split"] == "fit"}):
        a = []
        for u in used:
            if u["split"] != "fit" or family(u["row"]) != fam:
                continue
            a.append(u["tpot"] / (float(u["row"]["tpot_ms"]) / 1e3))
            if u["ttft"] is not None and u["row"]["ttft_ms"]:
                a.append(u["ttft"] / (float(u["row"]["ttft_ms"]) / 1e3))
        betas[fam] = nnls(np.array(a), np.ones(len(a)))
    table = []
    for u in used:
        row, fam = u["row"], family(u["row"])
        own = betas.get(fam, betas["hopper"])
        other = [b for f_, b in betas.items() if f_ != fam]
        m_tpot, m_ttft = float(row["tpot_ms"]), float(row["ttft_ms"]) if row["ttft_ms"] else None
        tpot = float(u["tpot"] @ own) * 1e3
        ttft = None if u["ttft"] is None else float(u["ttft"] @ own) * 1e3
        cross = float(u["tpot"] @ other[0]) * 1e3 if other else None
        table.append({"row": u["i"], "source": row["source_id"], "model": row["model"], "gpu": row["gpu"],
                      "gpus": int(row["num_gpus"] or row["tp"]), "concurrency": int(row["max_concurrency"]),
                      "spec": row["spec_method"] or "none", "split": u["split"], "tpot_ms": m_tpot,
                      "tpot_pred_ms": round(tpot, 2), "tpot_err": round(tpot / m_tpot - 1, 4),
                      "tpot_err_other_family_fit": None if cross is None else round(cross / m_tpot - 1, 4),
                      "ttft_ms": m_ttft, "ttft_pred_ms": None if ttft is None else round(ttft, 1),
                      "ttft_err": None if ttft is None or not m_ttft else round(ttft / m_ttft - 1, 4),
                      "peak_running": u["rec"]["peak_running"], "requests": u["rec"]["requests"]})
    for fam, beta in betas.items():
        print(f"beta {fam}: {dict(zip(BASIS, (float(b) for b in beta)))}")
    print(f"{'row':>4} {'model':18} {'gpu':5} {'n':>2} {'conc':>5} {'spec':5} {'split':17} {'TPOT':>7} {'pred':>7} "
          f"{'err':>7} {'x-fam':>7} {'TTFT':>8} {'pred':>8} {'err':>7}")
    for t in table:
        fmt = lambda v: "-" if v is None else f"{v:+.1%}"
        print(f"{t['row']:>4} {t['model']:18} {t['gpu']:5} {t['gpus']:>2} {t['concurrency']:>5} {t['spec']:5} "
              f"{t['split']:17} {t['tpot_ms']:7.2f} {t['tpot_pred_ms']:7.2f} {fmt(t['tpot_err']):>7} "
              f"{fmt(t['tpot_err_other_family_fit']):>7} {t['ttft_ms'] or 0:8.0f} "
              f"{'-' if t['ttft_pred_ms'] is None else format(t['ttft_pred_ms'], '8.0f'):>8} {fmt(t['ttft_err']):>7}")
    summary = {}

    def add(name, errs):
        if errs:
            summary[name] = {"rows": len(errs), "median_abs_err": round(float(np.median(errs)), 4),
                             "max_abs_err": round(float(max(errs)), 4)}

    for part in sorted({t["split"] for t in table}):
        add(f"TPOT {part}", [abs(t["tpot_err"]) for t in table if t["split"] == part])
        add(f"TTFT {part}", [abs(t["ttft_err"]) for t in table if t["split"] == part and t["ttft_err"] is not None])
    add("TPOT held out: GPU family (the other family's fit)",
        [abs(t["tpot_err_other_family_fit"]) for t in table
         if t["split"] == "fit" and t["tpot_err_other_family_fit"] is not None])
    print(json.dumps(summary, indent=1))
    if args.write:
        fits = {}
        for fam, beta in betas.items():
            mine = [t for t in table if family(t) == fam]
            own = [abs(t["tpot_err"]) for t in mine if t["split"] == "fit"]
            held = [abs(t["tpot_err"]) for t in mine if t["split"] != "fit"]
            ttft = [abs(t["ttft_err"]) for t in mine if t["split"] == "fit" and t["ttft_err"] is not None]
            band = f"TPOT median |error| {np.median(own):.0%} in-sample ({len(own)} rows, max {max(own):.0%})"
            if held:
                band += f", {np.median(held):.0%} held out ({len(held)} rows, max {max(held):.0%})"
            cross = summary.get("TPOT held out: GPU family (the other family's fit)")
            if cross:
                band += f", {cross['median_abs_err']:.0%} on the other GPU family"
            if ttft:
                band += f"; TTFT at concurrency <= {TTFT_MAX_CONCURRENCY}: {np.median(ttft):.0%}"
            gpus = sorted({t["gpu"] for t in mine if t["split"] == "fit"})
            fits[f"sglang/{fam}"] = {"beta": dict(zip(BASIS, (float(b) for b in beta))),
                                     "data": f"{len(own)} SGLang 0.5.15 V4-Flash rows on {', '.join(gpus)} "
                                             "(the SGLang cookbook, benchmarks/published_serving.csv)",
                                     "band": band}
        out = {"schema": "csa-plan/steptime-fit/v1", "default": "sglang/hopper",
               "method": "tools/fit_steptime.py: NNLS on relative mean TPOT (and TTFT at concurrency <= "
                         f"{TTFT_MAX_CONCURRENCY}), closed-loop replays of benchmarks/published_serving.csv; "
                         f"EAGLE rows at acceptance {ACCEPTANCE}", "acceptance": ACCEPTANCE,
               "fits": fits, "rows": table, "summary": summary}
        FIT_PATH.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        from csa_plan.planner.steptime.physics import fit_table_markdown

        doc = ROOT / "docs" / "steptime.md"
        text = doc.read_text(encoding="utf-8")
        head, rest = text.split(TABLE_START, 1)
        _, tail = rest.split(TABLE_END, 1)
        doc.write_text(head + TABLE_START + "\n" + fit_table_markdown(out) + TABLE_END + tail, encoding="utf-8")
        print(f"wrote {FIT_PATH} and the table in {doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
