"""benchmarks/bench_kernels.py without a GPU: --help, the no-GPU exit, and its memory plan.

This does not run the benchmark body (that needs CuPy and a GPU); it checks that the
script parses, refuses cleanly, and that the default run (1M context, 64 requests,
16 heads/device, plus the 128-head FLOP/s run) plans to fit an H200 before allocating.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_kernels.py"


def _run(*args, cupy_blocked=True):
    pre = "import sys; sys.modules['cupy'] = None; " if cupy_blocked else ""
    code = pre + f"import runpy; sys.argv = {[str(BENCH), *args]!r}; runpy.run_path({str(BENCH)!r}, run_name='__main__')"
    return subprocess.run([sys.executable, "-c", "import sys; " + code], capture_output=True, text=True, timeout=60)


def test_help_works_without_a_gpu():
    r = _run("--help")
    assert r.returncode == 0 and "--requests" in r.stdout and "--plan-only" in r.stdout


def test_no_gpu_is_one_line_and_exit_5():
    r = _run()
    assert r.returncode == 5, r.stderr
    assert r.stderr.strip().splitlines() == [
        "bench_kernels: no usable GPU: CuPy not installed (pip install 'csa-plan[gpu]'), or use --backend emulate"]


def test_default_plan_fits_an_h200_and_is_printed():
    sys.path.insert(0, str(BENCH.parent))
    try:
        import bench_kernels as b
    finally:
        sys.path.pop(0)
    args = b.main.__globals__["argparse"].Namespace(context=1 << 20, requests=64, heads=16, index_heads=64,
                                                      topk=1024, window=128, chunks=16)
    plan = b.plan_bytes(args)
    assert 10**9 < max(plan.values()) <= b.H200_BYTES
    r = _run("--plan-only")
    assert r.returncode == 0 and f"{max(plan.values()):,} B" in r.stderr
    assert _run("--plan-only", "--requests", "512").returncode == 3  # would not fit: refused up front
