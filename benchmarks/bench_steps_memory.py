"""Peak memory of the runtime replays against the number of steps (issue 37, steps bombs).

A Mooncake trace of 32 requests asking for N output tokens each, spaced so that each runs alone
(N decode steps apiece, 32 N steps in all), through ``simulate --engine vllm-0.33`` and
``--engine sglang-0.5.23`` (V4-Flash, 2 x H200, TP 2), for N = 125k, 250k, 500k and 1M: the
whole process's wall time and peak RSS (``/usr/bin/time -v``). Since the step series is bounded
(``result.STEP_BUCKETS`` buckets, docs/limits.md "Runtime replays") the peak is flat in N; before,
every step kept its record (about 90 bytes: 3.0 GB at 32M steps under vLLM).

With ``--base-exe PATH`` (a ``csa-plan`` installed from an older commit) every case also runs
under that executable, side by side.

Run: python benchmarks/bench_steps_memory.py [--base-exe PATH] [--tokens 125000,1000000] [--engines vllm-0.33]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import csa_plan_executable  # noqa: E402

REQUESTS = 32
GAP_MS = 100_000_000  # 100,000 s apart: 1M decode steps of 20 ms take 20,000 s, so each runs alone


def write_trace(folder: Path, tokens: int) -> Path:
    path = folder / f"steps_{tokens}.jsonl"
    with open(path, "w") as f:
        for i in range(REQUESTS):
            f.write(json.dumps({"timestamp": i * GAP_MS, "input_length": 100, "output_length": tokens,
                                "hash_ids": [i]}) + "\n")
    return path


def measure(exe: str, trace: Path, engine: str) -> tuple[int, float, float]:
    """(exit code, wall seconds, peak RSS MiB) of one whole process."""
    argv = ["/usr/bin/time", "-v", exe, "simulate", str(trace), "--model", "deepseek-v4-flash", "--engine", engine,
            "--device-memory", "h200", "--tp", "2"]
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", done.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    seconds = int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3)) if wall else -1.0
    return done.returncode, seconds, int(rss.group(1)) / 1024 if rss else -1.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exe", default=csa_plan_executable())
    ap.add_argument("--base-exe", default=None)
    ap.add_argument("--tokens", default="125000,250000,500000,1000000")
    ap.add_argument("--engines", default="vllm-0.33,sglang-0.5.23")
    a = ap.parse_args()
    exes = [("this", a.exe)] + ([("base", a.base_exe)] if a.base_exe else [])
    print(f"{'engine':<14} {'output':>9} {'steps':>11}  " + "  ".join(f"{n + ' rc  s  MiB':>22}" for n, _ in exes))
    peaks: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="csa-steps-") as tmp:
        for engine in a.engines.split(","):
            for tokens in (int(t) for t in a.tokens.split(",")):
                trace = write_trace(Path(tmp), tokens)
                cells = []
                for name, exe in exes:
                    code, s, mb = measure(exe, trace, engine)
                    peaks.setdefault(f"{name} {engine}", []).append(mb)
                    cells.append(f"{code:>6} {s:7.2f} {mb:7.0f}")
                print(f"{engine:<14} {tokens:>9,} {REQUESTS * tokens:>11,}  " + "  ".join(f"{c:>22}" for c in cells))
    flat = all(max(v) - min(v) < 64 for k, v in peaks.items() if k.startswith("this"))
    print("peak RSS flat in the number of steps (within 64 MiB):", "yes" if flat else "NO")
    return 0 if flat else 1


if __name__ == "__main__":
    raise SystemExit(main())
