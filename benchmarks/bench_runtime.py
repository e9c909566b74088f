"""``simulate --engine vllm-0.33`` / ``sglang-0.5.23`` (the step-by-step runtime replays) as whole processes: wall time and peak RSS.

Cases: the Azure 2023 conversation trace (19,366 requests; issue 25 budget: under 2 s whole
process on the 2-core machine), V4-Flash on 4 x H200, TP 4, prefix caching on (vLLM's
default) and off; the Mooncake conversation head (200 requests, prefix ids) with caching on;
the 1,000,000-request mix ``examples/mixes/million-requests-vllm.yaml`` (V4-Pro, 8 x H200,
TP 8; issue 25 budget: under 60 s and under 1 GiB peak RSS), caching on and off; for SGLang
also the 1,000,000-request mix (examples/mixes/million-requests.yaml on V4-Flash,
TP 4: under 60 s and 1 GiB peak RSS; its base run takes hours in the Python loop, so time the
base with ``--only sglang-azure`` and the like).

With ``--base-exe PATH`` (a ``csa-plan`` installed from an older commit: ``git worktree add
/tmp/base <commit>``, a venv, ``pip install -e /tmp/base``) every case also runs under that
executable, interleaved run by run so both see the same load, and the table shows both
medians and their ratio; a base without the runtime replay runs the same command with
``--reserve max --policy queue`` (what ``--engine vllm-0.33`` meant before issue 25).

A base run longer than ``--base-timeout`` seconds (the Python loop on a million requests) is
stopped and shown as ``>T``.

Run: python benchmarks/bench_runtime.py [--runs 3] [--base-exe PATH] [--base-timeout S] [--only NAME]
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
MOONCAKE = ROOT / "examples" / "traces" / "mooncake_conversation_head200.jsonl"
MILLION = ROOT / "examples" / "mixes" / "million-requests-vllm.yaml"
MIX = ROOT / "examples" / "mixes" / "million-requests.yaml"
BASE = ["--model", "deepseek-v4-flash", "--device-memory", "h200", "--tp", "4", "--engine", "vllm-0.33"]
CASES = {
    "azure-conv-caching": ([str(AZURE), *BASE], 2.0),
    "azure-conv-no-caching": ([str(AZURE), *BASE, "--no-enable-prefix-caching"], 2.0),
    "mooncake-head-caching": ([str(MOONCAKE), *BASE], None),
    "million-mix-caching": ([str(MILLION), "--engine", "vllm-0.33"], 60.0),
    "million-mix-no-caching": ([str(MILLION), "--engine", "vllm-0.33", "--no-enable-prefix-caching"], 60.0),
    # SGLang 0.5.23's scheduler (issue 27: the same budgets as the vLLM runtime)
    "sglang-azure-conv-radix": ([str(AZURE), *BASE[:-1], "sglang-0.5.23"], 2.0),
    "sglang-azure-conv-no-radix": ([str(AZURE), *BASE[:-1], "sglang-0.5.23", "--disable-radix-cache"], 2.0),
    "sglang-mooncake-head-radix": ([str(MOONCAKE), *BASE[:-1], "sglang-0.5.23"], None),
    # 1,000,000 requests of the chat + retrieval mix on V4-Flash, TP 4 (issue 27: under 60 s and 1 GiB)
    "sglang-million-mix": ([str(MIX), *BASE[:-1], "sglang-0.5.23"], 60.0),
}
# peak RSS budgets (MiB) where a case has one
RSS_BUDGET_MIB = {"sglang-million-mix": 1024, "million-mix-caching": 1024, "million-mix-no-caching": 1024}
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_once(argv: list[str], timeout: float | None = None) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB); (inf, 0) when it ran past ``timeout`` (then stopped)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
    while True:
        pid, status, usage = os.wait4(proc.pid, 0 if timeout is None else os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - start > timeout:
            proc.kill()
            os.wait4(proc.pid, 0)
            return float("inf"), 0
        time.sleep(0.01)
    elapsed = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 3):
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        raise SystemExit(f"{' '.join(argv)} exited {code}: {err[-400:]}")
    return elapsed, usage.ru_maxrss


def supports_runtime(exe: str) -> bool:
    out = subprocess.run([exe, "simulate", "--help"], capture_output=True, text=True, env=ENV).stdout
    return "--enable-prefix-caching" in out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--base-exe", default=None)
    p.add_argument("--only", default=None)
    p.add_argument("--base-timeout", type=float, default=300.0)
    args = p.parse_args(argv)
    exe = csa_plan_executable()
    base_new = supports_runtime(args.base_exe) if args.base_exe else False
    print(f"{'case':26} {'median s':>9} {'RSS MiB':>8} {'budget':>7}" + ("  base s   ratio" if args.base_exe else ""))
    ok = True
    for name, (cmd, budget) in CASES.items():
        if args.only and args.only not in name:
            continue
        times, rss, base_times = [], 0, []
        base_cmd = cmd if base_new else [c for c in cmd if c != "--no-enable-prefix-caching"] + \
            ["--reserve", "max", "--policy", "queue"]
        for _ in range(args.runs):
            t, r = run_once([exe, "simulate", *cmd])
            times.append(t)
            rss = max(rss, r)
            if args.base_exe:
                base_times.append(run_once([args.base_exe, "simulate", *base_cmd], args.base_timeout)[0])
        med = statistics.median(times)
        within = (budget is None or med <= budget) and rss / 1024 <= RSS_BUDGET_MIB.get(name, float("inf"))
        ok &= within
        line = f"{name:26} {med:9.2f} {rss / 1024:8.0f} {'-' if budget is None else f'{budget:g} s':>7}"
        if args.base_exe:
            bm = statistics.median(base_times)
            stopped, bound = f">{args.base_timeout:g}", f"<{med / args.base_timeout:.3f}"
            line += f"  {bm:7.2f} {med / bm:7.2f}x" if bm != float("inf") else f"  {stopped:>7} {bound:>7}x"
        print(line + ("" if within else "  OVER BUDGET"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
