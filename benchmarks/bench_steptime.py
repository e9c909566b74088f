"""The replays under each step-time source, as whole processes, side by side with an older build.

Issue 35's budget: the Azure 2023 conversation trace (19,366 requests) through each engine's
replay at most 2x the previous commit's whole-process time with each source; the
1,000,000-request vLLM mix within 60 s. Each case runs interleaved with ``--base-exe`` (a
``csa-plan`` installed from the previous commit: ``git worktree add /tmp/base <commit>`` and
``pip install -e /tmp/base`` in its own venv), which has only the fixed constants, so its
every run is the fixed-source command line. Prints the median wall time of each and the ratio.

Run: python benchmarks/bench_steptime.py [--runs 5] [--base-exe PATH] [--measured]
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
AZURE = str(ROOT / "examples" / "traces" / "azure_llm_inference_2023_conv.csv")
MILLION = str(ROOT / "examples" / "mixes" / "million-requests-vllm.yaml")
DEPLOY = ["--model", "deepseek-v4-flash", "--device-memory", "h200", "--tp", "4"]


def cases(measured: bool) -> list[tuple[str, list[str], list[str]]]:
    """(name, this build's arguments, the base build's arguments)."""
    out = []
    for engine in ("vllm-0.33", "sglang-0.5.23"):
        base = ["simulate", AZURE, *DEPLOY, "--engine", engine, "--json"]
        for source in ("fixed", "physics") + (("measured",) if measured else ()):
            out.append((f"azure-conv {engine} {source}", base + ["--step-time", source], base))
    million = ["simulate", MILLION, "--engine", "vllm-0.33", "--json"]
    for source in ("fixed", "physics"):
        out.append((f"million-vllm {source}", million + ["--step-time", source], million))
    return out


def once(exe: str, args: list[str]) -> float:
    t = time.perf_counter()
    p = subprocess.run([exe, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode not in (0, 3):
        raise SystemExit(f"{exe} {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--base-exe")
    ap.add_argument("--measured", action="store_true", help="also --step-time measured (needs csa-plan[perf])")
    ap.add_argument("--only")
    args = ap.parse_args()
    exe = csa_plan_executable()
    print(f"{'case':34} {'this (s)':>9} {'base (s)':>9} {'ratio':>6}")
    for name, mine, base in cases(args.measured):
        if args.only and args.only not in name:
            continue
        a, b = [], []
        for _ in range(args.runs):
            a.append(once(exe, mine))
            if args.base_exe:
                b.append(once(args.base_exe, base))
        ma = statistics.median(a)
        mb = statistics.median(b) if b else None
        ratio = "-" if mb is None else f"{ma / mb:.2f}"
        print(f"{name:34} {ma:9.2f} {'-' if mb is None else f'{mb:9.2f}':>9} {ratio:>6}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
