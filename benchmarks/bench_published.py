"""Each published serving row replayed through csa-plan with each step-time source: the error per row.

    python benchmarks/bench_published.py [--sources physics,fixed,measured] [--max-requests 1024]

A row of ``benchmarks/published_serving.csv`` that csa-plan can replay (DeepSeek-V4, a card in
``planner/steptime/hardware.py``, no speculative decoding) becomes a workload of its fixed
lengths (isl/osl), its prompt count (at most ``--max-requests``), replayed by ``csa-plan
simulate --engine sglang-0.5.23 --max-concurrency C`` (the closed-loop client every published
row was measured with) on its GPUs. Printed per row and source: the replay's TPOT p50 and TTFT
p50 against the published p50s, and the error. ``physics`` rows marked ``fit`` were fitted on
(``tools/fit_steptime.py``); the others are held out. ``measured`` needs csa-plan[perf].
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import csa_plan_executable  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))


def main() -> int:
    from fit_steptime import row_settings, split, usable

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", default=str(ROOT / "benchmarks" / "published_serving.csv"))
    ap.add_argument("--sources", default="physics,fixed" + (",measured" if importlib.util.find_spec(
        "aiconfigurator_core") else ""))
    ap.add_argument("--max-requests", type=int, default=1024)
    args = ap.parse_args()
    exe = csa_plan_executable()
    rows = list(csv.DictReader(open(args.csv, newline="", encoding="utf-8")))
    sources = args.sources.split(",")
    print(f"{'row':>4} {'model':18} {'gpu':5} {'n':>2} {'conc':>5} {'split':17} {'source':9} {'TPOT':>7} "
          f"{'replay':>7} {'err':>7} {'TTFT':>8} {'replay':>8} {'err':>7}")
    errors: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, row in enumerate(rows):
            if usable(row) is not None or row["spec_method"] not in ("", "none"):
                continue  # the SGLang replay has no drafts: EAGLE rows enter the fit only (tools/fit_steptime.py)
            conc = int(row["max_concurrency"])
            n = min(int(row["num_prompts"] or 2 * conc), args.max_requests)
            mix = Path(tmp) / f"row{i}.yaml"
            mix.write_text(f"name: row{i}\nseed: 1\nrequests: {n}\nmodel: {row['model']}\nclasses:\n"
                           f"  - name: fixed\n    rate: 1000000.0\n"
                           f"    prompt: {{dist: fixed, value: {row['isl']}}}\n"
                           f"    output: {{dist: fixed, value: {row['osl']}}}\n")
            gpus = row["num_gpus"] or row["tp"]
            for source in sources:
                flags = [x for k, v in row_settings(row).items() for x in (f"--{k.replace('_', '-')}", str(v))]
                argv = [exe, "simulate", str(mix), "--engine", "sglang-0.5.23", "--device-memory", row["gpu"],
                        "--tp", gpus, "--max-concurrency", str(conc), "--step-time", source, *flags, "--json"]
                p = subprocess.run(argv, capture_output=True, text=True)
                if p.returncode not in (0, 3) or not p.stdout:
                    print(f"{i:>4} {row['model']:18} {row['gpu']:5} {gpus:>2} {conc:>5} {'':17} {source:9} "
                          f"not replayed: {p.stderr.strip()[-120:]}")
                    continue
                rt = json.loads(p.stdout).get("runtime")
                if rt is None:
                    print(f"{i:>4} {row['model']:18} {row['gpu']:5} {gpus:>2} {conc:>5} {'':17} {source:9} "
                          "refused at start-up")
                    continue
                tpot = rt["tpot"]["p50_s"] * 1e3
                ttft = rt["ttft"]["p50_s"] * 1e3
                meas_tpot, meas_ttft = float(row["tpot_ms"]), float(row["ttft_ms"])
                e_tpot, e_ttft = tpot / meas_tpot - 1, ttft / meas_ttft - 1
                part = split(row)
                errors.setdefault((source, part), []).append(abs(e_tpot))
                print(f"{i:>4} {row['model']:18} {row['gpu']:5} {gpus:>2} {conc:>5} {part:17} {source:9} "
                      f"{meas_tpot:7.2f} {tpot:7.2f} {e_tpot:+7.1%} {meas_ttft:8.0f} {ttft:8.0f} {e_ttft:+7.1%}",
                      flush=True)
    print("\nTPOT median |error| by source and split:")
    for (source, part), errs in sorted(errors.items()):
        print(f"  {source:9} {part:17} {len(errs):>2} rows  {statistics.median(errs):6.1%}  (max {max(errs):.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
