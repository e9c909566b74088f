"""Start-up and check latency as whole processes (target: under 0.3 s each on 2 cores).

With ``--base-exe PATH`` (``csa-plan`` installed from an older commit: ``git worktree add
/tmp/base REV`` and a venv with ``pip install -e /tmp/base``) each case also runs under that
executable, interleaved run by run so both see the same load, and the line shows both
medians and their ratio. A case the older commit cannot run is shown as such.

Run: python benchmarks/bench_cli.py [--runs N] [--base-exe PATH]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import csa_plan_executable  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
AZURE = ROOT / "examples" / "traces" / "azure_llm_inference_2023_conv.csv"
TARGET_S = 0.3
CASES: list[tuple[str, list[str]]] = [
    ("--help", ["--help"]),
    ("check deepseek-v4-pro --json", ["check", "deepseek-v4-pro", "--json"]),
    ("check deepseek-v4-pro (tables)", ["check", "deepseek-v4-pro"]),
    ("check ... --device-memory h200 --tp 8", ["check", "deepseek-v4-pro", "--device-memory", "h200", "--tp", "8",
                                               "--json"]),
    ("check ... h200 --tp 8 --engine vllm-0.33", ["check", "deepseek-v4-pro", "--device-memory", "h200", "--tp", "8",
                                                  "--engine", "vllm-0.33", "--json"]),
    ("simulate Azure conv (19,366), h200 tp 8", ["simulate", str(AZURE), "--model", "deepseek-v4-pro", "--tp", "8",
                                                 "--device-memory", "h200", "--reserved", "20GiB", "--rate-scale",
                                                 "0.5", "--json"]),
]


def once(argv: list[str]) -> float | None:
    """Wall seconds of one run; None when it fails as a usage error or crashes (an older commit
    without the option)."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True)
    elapsed = time.perf_counter() - start
    return elapsed if done.returncode in (0, 3) else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--base-exe", default=None, help="csa-plan of an older commit, run side by side")
    args = parser.parse_args()
    exe = csa_plan_executable()
    ok = True
    for name, tail in CASES:
        now: list[float | None] = []
        base: list[float | None] = []
        for argv in ([exe, *tail], [args.base_exe, *tail] if args.base_exe else None):
            if argv:
                once(argv)  # warm-up: bytecode caches
        for _ in range(args.runs):
            now.append(once([exe, *tail]))
            if args.base_exe:
                base.append(once([args.base_exe, *tail]))
        if None in now:
            print(f"{name:<44} FAILED under the current commit")
            ok = False
            continue
        median = statistics.median(now)  # type: ignore[type-var]
        line = f"{name:<44} {median * 1000:7.1f} ms  {'ok' if median <= TARGET_S else 'SLOW':4}"
        if args.base_exe:
            if None in base:
                line += "   | before: cannot run this case"
            else:
                before = statistics.median(base)  # type: ignore[type-var]
                line += f"   | before {before * 1000:7.1f} ms   x{median / before:.2f}"
        print(line)
        ok &= median <= TARGET_S
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
