"""Byte-identity of the data-parallel replays between two builds (issue 44, speed budget): a change that makes
``serving/balanced.py``'s replays faster must leave every figure as it was.

Runs each case's ``csa-plan simulate ... --json`` with this build's ``csa-plan`` and, with ``--base-exe``, with
an older build's (``git worktree add --detach /tmp/base main``, a venv there, ``pip install -e /tmp/base``), and
prints the SHA-256 of each stdout and whether the two are the same bytes; ``--write FILE`` stores this build's
digests and ``--check FILE`` compares against stored ones (no second build needed). Exit 1 when any differs.

The cases cover both engines, DP 2/4/8, the balancers (round_robin, total_requests, total_tokens, vLLM's DP
coordinator), closed-loop clients and open-loop arrivals, and a disaggregated run with ``--prefill-dp``.

Run: python tools/dp_identity.py [--base-exe PATH] [--only NAME] [--write FILE | --check FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXED = str(ROOT / "examples" / "mixes" / "fixed-8k-1k.yaml")
VARIED = str(ROOT / "examples" / "mixes" / "random-8k-1k.yaml")
AZURE200 = str(ROOT / "examples" / "traces" / "azure_conv_sample_200.csv")
SAMPLE = str(ROOT / "examples" / "traces" / "sample.jsonl")
B200 = ["--gpu", "b200", "--tp", "1"]
FLASH_H200 = ["--model", "deepseek-v4-flash", "--device-memory", "h200"]

CASES: list[tuple[str, list[str]]] = [
    ("vllm dp8 fixed c256 (its DP balancer)",
     [FIXED, *B200, "--dp", "8", "--ep", "8", "--max-concurrency", "256", "--engine", "vllm-0.33"]),
    ("vllm dp4 ratio0.5 c128 (its DP balancer)",
     [VARIED, *B200, "--dp", "4", "--ep", "4", "--max-concurrency", "128", "--engine", "vllm-0.33"]),
    ("vllm dp2 azure200 arrivals (its DP balancer)",
     [AZURE200, *FLASH_H200, "--tp", "1", "--dp", "2", "--ep", "2", "--engine", "vllm-0.33"]),
    ("vllm dp4 azure200 c64 (its DP balancer)",
     [AZURE200, *FLASH_H200, "--tp", "1", "--dp", "4", "--ep", "4", "--max-concurrency", "64",
      "--engine", "vllm-0.33"]),
    ("sglang dp8 fixed c256 round_robin",
     [FIXED, *B200, "--dp", "8", "--ep", "8", "--max-concurrency", "256", "--engine", "sglang-0.5.23"]),
    ("sglang dp4 ratio0.5 c128 total_tokens",
     [VARIED, *B200, "--dp", "4", "--ep", "4", "--max-concurrency", "128", "--engine", "sglang-0.5.23",
      "--load-balance-method", "total_tokens"]),
    ("sglang dp2 azure200 arrivals total_requests",
     [AZURE200, *FLASH_H200, "--tp", "1", "--dp", "2", "--ep", "2", "--engine", "sglang-0.5.23",
      "--load-balance-method", "total_requests"]),
    ("sglang disaggregated prefill-dp2 decode x2",
     [SAMPLE, *FLASH_H200, "--engine", "sglang-0.5.23", "--prefill-tp", "1", "--prefill-dp", "2",
      "--prefill-ep", "2", "--decode-workers", "2", "--decode-tp", "2"]),
    ("vllm disaggregated prefill-dp2 decode-dp2",
     [SAMPLE, *FLASH_H200, "--engine", "vllm-0.33", "--prefill-tp", "1", "--prefill-dp", "2",
      "--prefill-ep", "2", "--decode-tp", "1", "--decode-dp", "2", "--decode-ep", "2"]),
]


def digest(exe: str, args: list[str]) -> tuple[str, float, int]:
    """The SHA-256 of ``exe simulate ARGS --json``'s stdout, its wall time and exit code."""
    t = time.perf_counter()
    p = subprocess.run([exe, "simulate", *args, "--json"], capture_output=True)
    wall = time.perf_counter() - t
    if p.returncode not in (0, 3):
        raise SystemExit(f"{exe} simulate {' '.join(args)}: exit {p.returncode}: {p.stderr.decode()[-300:]}")
    if "runtime" not in json.loads(p.stdout):  # a replay, not a refusal
        raise SystemExit(f"{exe} simulate {' '.join(args)}: no replay: {p.stderr.decode()[-300:]}")
    return hashlib.sha256(p.stdout).hexdigest(), wall, p.returncode


def main() -> int:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _timing import csa_plan_executable

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-exe")
    ap.add_argument("--only")
    ap.add_argument("--write")
    ap.add_argument("--check")
    a = ap.parse_args()
    exe = csa_plan_executable()
    stored = json.loads(Path(a.check).read_text()) if a.check else {}
    mine: dict[str, str] = {}
    bad = 0
    print(f"{'case':46} {'sha256 (this)':16} {'this (s)':>8} {'base (s)':>8}  same")
    for name, args in CASES:
        if a.only and a.only not in name:
            continue
        h, wall, _ = digest(exe, args)
        mine[name] = h
        other, base_wall = stored.get(name), None
        if a.base_exe:
            other, base_wall, _ = digest(a.base_exe, args)
        same = "-" if other is None else ("yes" if other == h else "NO")
        bad += same == "NO"
        print(f"{name:46} {h[:16]} {wall:8.2f} {'-' if base_wall is None else f'{base_wall:8.2f}':>8}  {same}",
              flush=True)
    if a.write:
        Path(a.write).write_text(json.dumps(mine, indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
