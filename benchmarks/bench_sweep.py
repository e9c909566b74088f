"""csa-plan sweep, the 200-point Azure benchmark: the local process pool against one core.

Runs ``csa-plan sweep examples/sweeps/azure-200.yaml --json`` as whole processes with
``--jobs 0`` (every core) and ``--jobs 1`` (in-process, serial), checks that both give
the same results, and reports wall time, points per second and the speed-up.
Run: python benchmarks/bench_sweep.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import csa_plan_executable  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "examples" / "sweeps" / "azure-200.yaml"


def run(jobs: int) -> tuple[float, dict]:
    argv = [csa_plan_executable(), "sweep", str(SPEC), "--jobs", str(jobs), "--json"]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[:300]}")
    return wall, json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="runs per setting (median reported)")
    args = parser.parse_args()
    rows = {}
    docs = {}
    for label, jobs in (("local pool (all cores)", 0), ("one core (--jobs 1)", 1)):
        walls = []
        for _ in range(args.runs):
            wall, doc = run(jobs)
            walls.append(wall)
        rows[label] = statistics.median(walls)
        docs[label] = doc
    pool, serial = docs["local pool (all cores)"], docs["one core (--jobs 1)"]
    identical = pool["results"] == serial["results"] and pool["ranked"] == serial["ranked"]
    ran = pool["grid"]["ran"]
    print(f"{SPEC.relative_to(ROOT)}: {pool['grid']['points']} points, {pool['grid']['skipped']} skipped, "
          f"{ran} simulated over {pool['workload']['requests']:,} requests; {os.cpu_count()} cores")
    for label, wall in rows.items():
        print(f"  {label:<24} {wall:7.1f} s   {ran / wall:6.2f} points/s")
    speedup = rows["one core (--jobs 1)"] / rows["local pool (all cores)"]
    print(f"  speed-up {speedup:.2f}x; results identical: {identical}")
    print(f"  answer: {pool['answer']['label'] if pool['answer'] else None}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
