"""Start-up and check latency as whole processes (target: under 0.3 s each on 2 cores).

With ``--base-exe PATH`` (``csa-plan`` installed from an older commit: ``git worktree add
/tmp/base REV`` and a venv with ``pip install -e /tmp/base``) each case also runs under that
executable, interleaved run by run so both see the same load, and the line shows both
medians and their ratio. A case the older commit cannot run is shown as such.

With ``--kvfit-python PY`` (the python of a throw-away virtualenv holding kvfit 0.3.0, another
tool, never a csa-plan dependency) the cases kvfit can answer also run as kvfit, interleaved
the same way, its Hugging Face calls answered from the bundled preset (benchmarks/kvfit_local.py);
the line shows kvfit's median, the ratio and the target ratio (start-up: csa-plan at most 0.8x
kvfit's wall time, ``--help`` at most 0.5x).

Every process runs with bytecode caching on (PYTHONDONTWRITEBYTECODE removed from the
environment), as an installed tool runs; the warm-up run writes the caches.

Run: python benchmarks/bench_cli.py [--runs N] [--exe PATH] [--base-exe PATH] [--kvfit-python PY] [--only NAME]
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
AZURE = ROOT / "examples" / "traces" / "azure_llm_inference_2023_conv.csv"
TARGET_S = 0.3
KVFIT_LOCAL = Path(__file__).resolve().parent / "kvfit_local.py"
CASES: list[tuple[str, list[str]]] = [
    ("--help", ["--help"]),
    ("check deepseek-v4-pro --json", ["check", "deepseek-v4-pro", "--json"]),
    ("check ... 1M h200 --tp 8 --engine vllm-0.33", ["check", "deepseek-v4-pro", "--max-seq-len", "1M",
                                                    "--device-memory", "h200", "--tp", "8", "--engine", "vllm-0.33",
                                                    "--json"]),
    ("check deepseek-v4-pro (tables)", ["check", "deepseek-v4-pro"]),
    ("check ... --device-memory h200 --tp 8", ["check", "deepseek-v4-pro", "--device-memory", "h200", "--tp", "8",
                                               "--json"]),
    ("check ... h200 --tp 8 --engine vllm-0.33", ["check", "deepseek-v4-pro", "--device-memory", "h200", "--tp", "8",
                                                  "--engine", "vllm-0.33", "--json"]),
    ("simulate Azure conv (19,366), h200 tp 8", ["simulate", str(AZURE), "--model", "deepseek-v4-pro", "--tp", "8",
                                                 "--device-memory", "h200", "--reserved", "20GiB", "--rate-scale",
                                                 "0.5", "--json"]),
]


# The same question put to kvfit 0.3.0, and csa-plan's target: at most this fraction of kvfit's wall time.
KVFIT: dict[str, tuple[list[str], float]] = {
    "--help": (["--help"], 0.5),
    "check deepseek-v4-pro --json": (["deepseek-ai/DeepSeek-V4-Pro", "--hardware", "h200", "--json"], 0.8),
    "check ... 1M h200 --tp 8 --engine vllm-0.33": (["deepseek-ai/DeepSeek-V4-Pro", "--hardware", "h200", "--gpus", "8",
                                                    "--json"], 0.8),
    "check ... h200 --tp 8 --engine vllm-0.33": (["deepseek-ai/DeepSeek-V4-Pro", "--hardware", "h200", "--gpus", "8",
                                                 "--json"], 0.8),
}
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def once(argv: list[str]) -> float | None:
    """Wall seconds of one run; None when it fails as a usage error or crashes (an older commit
    without the option)."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=ENV)
    elapsed = time.perf_counter() - start
    return elapsed if done.returncode in (0, 3) else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--exe", default=None,
                        help="the csa-plan to measure (default: the one beside this python). The README installs "
                             "with `pip install .`; an editable install (`pip install -e`) adds its import hook "
                             "to every start, so compare kvfit against a regular install: "
                             "python3 -m venv /tmp/reg && /tmp/reg/bin/pip install . && --exe /tmp/reg/bin/csa-plan")
    parser.add_argument("--base-exe", default=None, help="csa-plan of an older commit, run side by side")
    parser.add_argument("--kvfit-python", default=None, help="python of a virtualenv with kvfit 0.3.0")
    parser.add_argument("--only", default=None, help="run only the cases whose name contains this")
    args = parser.parse_args()
    exe = args.exe or csa_plan_executable()
    ok = True
    for name, tail in CASES:
        if args.only and args.only not in name:
            continue
        kv = [args.kvfit_python, str(KVFIT_LOCAL), *KVFIT[name][0]] if args.kvfit_python and name in KVFIT else None
        now: list[float | None] = []
        base: list[float | None] = []
        other: list[float | None] = []
        for argv in ([exe, *tail], [args.base_exe, *tail] if args.base_exe else None, kv):
            if argv:
                once(argv)  # warm-up: bytecode caches
        for _ in range(args.runs):
            now.append(once([exe, *tail]))
            if args.base_exe:
                base.append(once([args.base_exe, *tail]))
            if kv:
                other.append(once(kv))
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
        if kv:
            if None in other:
                line += "   | kvfit: failed"
                ok = False
            else:
                theirs = statistics.median(other)  # type: ignore[type-var]
                target = KVFIT[name][1]
                ratio = median / theirs
                line += (f"   | kvfit {theirs * 1000:7.1f} ms   x{ratio:.2f} (target <= {target:.1f}: "
                         f"{'ok' if ratio <= target else 'MISSED'})")
                ok &= ratio <= target
        print(line)
        ok &= median <= TARGET_S
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
