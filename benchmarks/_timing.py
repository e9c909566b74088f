"""Whole-process timing shared by the benchmarks: median wall time of a command."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def csa_plan_executable() -> str:
    beside = Path(sys.executable).with_name("csa-plan")
    return str(beside) if beside.exists() else (shutil.which("csa-plan") or "csa-plan")


def median_seconds(argv: list[str], runs: int = 11, ok_codes: tuple[int, ...] = (0,)) -> float:
    """Run ``argv`` ``runs`` times (after one warm-up) and return the median wall time."""
    subprocess.run(argv, capture_output=True)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True)
        times.append(time.perf_counter() - start)
        if done.returncode not in ok_codes:
            raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[:300]}")
    return statistics.median(times)


def report(name: str, seconds: float, target: float) -> bool:
    verdict = "ok" if seconds <= target else "SLOW"
    print(f"{name:<48} median {seconds * 1000:8.1f} ms   target {target * 1000:.0f} ms   {verdict}")
    return seconds <= target
