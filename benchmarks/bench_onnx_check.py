"""Benchmark: ``csa-plan check`` on a generated 62-node V4-Pro-shaped ONNX graph, as a whole process.

The graph has V4-Pro's 61 main-layer ratios plus one more ratio-4 node (62 CSA nodes),
V4-Pro geometry, max_seq_len 1,048,576 in metadata, and 200 MiB of external weights
declared per layer (12 GiB in all) in a weights.bin that does not exist.

    .venv/bin/python benchmarks/bench_onnx_check.py [--runs 21] [--budget 0.5]

Prints the median, min and max wall time of the whole process (start-up, reading,
planning, JSON output) and the in-process time of the ONNX read alone; exits 1 when
the median is over the budget.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _builder():
    spec = importlib.util.spec_from_file_location("build_examples", ROOT / "examples" / "onnx" / "build_examples.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _command() -> list[str]:
    script = Path(sys.executable).with_name("csa-plan")
    if script.exists():
        return [str(script)]
    found = shutil.which("csa-plan")
    return [found] if found else [sys.executable, "-m", "csa_plan.cli.main"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--budget", type=float, default=0.5, help="seconds allowed for the median run")
    args = parser.parse_args()

    builder = _builder()
    with tempfile.TemporaryDirectory() as tmp:
        path = builder.write(builder.EXAMPLES["v4_pro_62_nodes.onnx"](), Path(tmp) / "v4_pro_62_nodes.onnx")
        size = path.stat().st_size
        command = _command() + ["check", str(path), "--json"]
        first = subprocess.run(command, capture_output=True, text=True)
        if first.returncode != 0:
            print(f"check failed (exit {first.returncode}): {first.stderr.strip()}", file=sys.stderr)
            return 1
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            subprocess.run(command, capture_output=True, check=True)
            times.append(time.perf_counter() - start)

        from csa_plan.planner.onnx.graph import load_onnx_model

        reads = []
        for _ in range(args.runs):
            start = time.perf_counter()
            spec = load_onnx_model(path, max_seq_len=None, window=None, at_length=8)
            reads.append(time.perf_counter() - start)
        assert len(spec.layers) == 62

    median = statistics.median(times)
    print(f"graph: 62 CSA nodes, {size:,} B file, external data declared but absent")
    print(f"whole process ({' '.join(command[:1])} check ... --json), {args.runs} runs: "
          f"median {median * 1000:.1f} ms, min {min(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms")
    print(f"load_onnx_model alone: median {statistics.median(reads) * 1000:.2f} ms")
    verdict = "OK" if median < args.budget else "OVER BUDGET"
    print(f"budget {args.budget * 1000:.0f} ms: {verdict}")
    return 0 if median < args.budget else 1


if __name__ == "__main__":
    sys.exit(main())
