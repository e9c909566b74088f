"""Start-up and check latency as whole processes (target: under 0.3 s each on 2 cores).

Run: python benchmarks/bench_cli.py [--runs N]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import csa_plan_executable, median_seconds, report  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    exe = csa_plan_executable()
    ok = report("csa-plan --help", median_seconds([exe, "--help"], args.runs), 0.3)
    ok &= report("csa-plan check deepseek-v4-pro --json",
                 median_seconds([exe, "check", "deepseek-v4-pro", "--json"], args.runs), 0.3)
    ok &= report("csa-plan check deepseek-v4-pro (tables)",
                 median_seconds([exe, "check", "deepseek-v4-pro"], args.runs), 0.3)
    ok &= report("csa-plan check deepseek-v4-pro --device-memory h200",
                 median_seconds([exe, "check", "deepseek-v4-pro", "--device-memory", "h200", "--json"], args.runs), 0.3)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
