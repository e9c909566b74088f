"""Run csa-plan with tests/kernels/fake_cupy.py standing in for ``cupy`` (no GPU needed).

    python tests/kernels/fake_cupy_run.py run-gpu --max-seq-len 1048576 --json
    FAKE_CUPY_KERNELS=skip /usr/bin/time -v python tests/kernels/fake_cupy_run.py run-gpu --max-seq-len 1M
    python tests/kernels/fake_cupy_run.py -m csa_plan.kernels.probe --small      # a module, as python -m
    python tests/kernels/fake_cupy_run.py benchmarks/bench_kernels.py --help       # a script

With FAKE_CUPY_KERNELS=skip the kernels are checked but not run, which measures the host
side of run-gpu (inputs, chunked prefill, the oracle, the byte checks, the fake device's
buffers, which live in host memory here) at lengths the CPU emulator cannot reach. Like
CuPy 14, the fake compiles only where it finds the CUDA runtime headers (CUDA_PATH, a
headers wheel, a conda prefix): fake_cupy.cuda_include_dir says how it looks.
"""

from __future__ import annotations

import importlib.util
import runpy
import sys
from pathlib import Path


def install() -> object:
    """Put the fake in sys.modules as ``cupy`` and return it."""
    spec = importlib.util.spec_from_file_location("fake_cupy", Path(__file__).with_name("fake_cupy.py"))
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    sys.modules["cupy"] = fake
    return fake


def main() -> None:
    install()
    args = sys.argv[1:]
    if args[:1] == ["-m"] and len(args) > 1:
        sys.argv = [args[1]] + args[2:]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return
    if args and args[0].endswith(".py"):
        sys.argv = args
        runpy.run_path(args[0], run_name="__main__")
        return
    from csa_plan.cli.main import main as cli_main

    cli_main(args)


if __name__ == "__main__":
    main()
