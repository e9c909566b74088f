"""The physics clock against the published DeepSeek-V4.1 rows it never saw (benchmarks/published_serving_v41_heldout.csv).

    python tools/v41_heldout.py

No V4.1 row is fitted: the clock is V4's coefficients applied to V4.1's per-role terms
(planner/steptime/roles.py). Each row is one request alone (concurrency 1): TPOT is one decode step at
the mean context (prompt + half the output), TTFT one prefill step of the whole prompt (no queueing, no
HTTP or tokenizer time). The card table has no H20-3e row: the H20's figures (4.0 TB/s) stand in, and
the records are SGLang 0.5.23's Hopper widths (584 B, 68 B FP4 keys; vLLM's FP8 keys: 132 B), the
Engram tables in HBM as the report ran them.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

ROWS = Path(__file__).resolve().parent.parent / "benchmarks" / "published_serving_v41_heldout.csv"
STAND_IN = {"h20-3e": "h20"}


def main(argv: list[str] | None = None) -> int:
    from csa_plan.planner.cards import CARDS, HOSTS
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.placement import Placement
    from csa_plan.planner.serving.step_source import model_inputs
    from csa_plan.planner.steptime.model import StepBatch, batch_ns
    from csa_plan.planner.steptime.physics import physics_step_time
    from csa_plan.planner.steptime.roles import ReadFormats, engram_read, flat_config
    from csa_plan.planner.weights.rules import rules_for

    print("| engine | build | GPU (figures of) | layout | prompt/output | C | TPOT published p95 (ms) | TPOT physics (ms) "
          "| error | TTFT published p95 (ms) | TTFT physics (ms) | error |")
    print("|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    with ROWS.open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            spec = load_model(row["model"])
            data, inv = model_inputs(spec)
            gpu = STAND_IN.get(row["gpu"], row["gpu"])
            tp, ep, isl, osl = (int(row[k]) for k in ("tp", "ep", "isl", "osl"))
            engine = "sglang-0.5.23" if row["engine"] == "sglang" else "vllm-0.33"
            key = 68 if row["engine"] == "sglang" else 132
            fmt = ReadFormats(584, 584, key, f"Hopper 584 B records, {key} B keys")
            lookups = engram_read(flat_config(data), "sglang-0.5.23", tp, 1, HOSTS.get(gpu))  # on the GPU, as run
            st = physics_step_time(spec, data, inv, gpu, Placement(tp=tp, ep=ep), row["engine"], engine,
                                   rules_for(engine, None, CARDS[gpu].capability), formats=fmt, engram=lookups)
            d = StepBatch()
            d.add_decode(isl + osl // 2, 1)
            p = StepBatch()
            p.add_prefill(0, isl)
            tpot, ttft = batch_ns(d, st) / 1e6, batch_ns(p, st) / 1e6
            pt, pf = float(row["tpot_ms"]), float(row["ttft_ms"])
            print(f"| {row['engine']} | {row['engine_version']} | {row['gpu']} ({gpu}) | TP{tp} EP{ep} | {isl}/{osl} "
                  f"| {row['max_concurrency']} | {pt:.2f} | {tpot:.2f} | {tpot / pt - 1:+.0%} | {pf:.0f} | {ttft:.0f} "
                  f"| {ttft / pf - 1:+.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
