"""csa-plan simulate as whole processes: a 1,000,000-request mix on V4-Pro over 8 devices
(target under 5 s on 2 cores) and the Azure conversation trace (target under 1 s).

Reports the median wall time and the peak resident memory (max RSS) of the process.
Run: python benchmarks/bench_simulate.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import csa_plan_executable  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MIX = ROOT / "examples" / "mixes" / "million-requests.yaml"
AZURE = ROOT / "examples" / "traces" / "azure_llm_inference_2023_conv.csv"


def run_once(argv: list[str]) -> tuple[float, int, int]:
    """(wall seconds, exit code, max RSS KiB) of one process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return elapsed, proc.returncode, usage.ru_maxrss


def bench(name: str, argv: list[str], runs: int, target: float) -> bool:
    run_once(argv)  # warm-up (file cache, bytecode)
    times, rss = [], []
    for _ in range(runs):
        seconds, code, maxrss = run_once(argv)
        if code not in (0, 3):
            raise SystemExit(f"{' '.join(argv)} exited {code}")
        times.append(seconds)
        rss.append(maxrss)
    median = statistics.median(times)
    verdict = "ok" if median <= target else "SLOW"
    print(f"{name:<58} median {median:6.2f} s  (min {min(times):.2f}, max {max(times):.2f}) "
          f"peak RSS {max(rss) / 1024:6.0f} MiB   target {target:.0f} s   {verdict}")
    return median <= target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    exe = csa_plan_executable()
    azure = [exe, "simulate", str(AZURE), "--model", "deepseek-v4-pro", "--tp", "8", "--device-memory", "h200",
             "--reserved", "20GiB", "--rate-scale", "0.5", "--json"]
    ok = bench("1M-request mix, V4-Pro, tp 8, refuse (contended)", [exe, "simulate", str(MIX), "--json"],
               args.runs, 5.0)
    ok &= bench("1M-request mix, V4-Pro, tp 8, queue (contended)",
                [exe, "simulate", str(MIX), "--policy", "queue", "--json"], args.runs, 5.0)
    ok &= bench("Azure conv trace (19,366), V4-Pro, tp 8, H200, refuse", azure, args.runs, 1.0)
    ok &= bench("Azure conv trace (19,366), V4-Pro, tp 8, H200, queue", azure + ["--policy", "queue"],
                args.runs, 1.0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
