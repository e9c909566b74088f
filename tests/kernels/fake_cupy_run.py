"""Run csa-plan with tests/kernels/fake_cupy.py standing in for ``cupy`` (no GPU needed).

    python tests/kernels/fake_cupy_run.py run-gpu --max-seq-len 1048576 --json
    FAKE_CUPY_KERNELS=skip /usr/bin/time -v python tests/kernels/fake_cupy_run.py run-gpu --max-seq-len 1M

With FAKE_CUPY_KERNELS=skip the kernels are checked but not run, which measures the host
side of run-gpu (inputs, chunked prefill, the oracle, the byte checks, the fake device's
buffers, which live in host memory here) at lengths the CPU emulator cannot reach.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def main() -> None:
    spec = importlib.util.spec_from_file_location("fake_cupy", Path(__file__).with_name("fake_cupy.py"))
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    sys.modules["cupy"] = fake
    from csa_plan.cli.main import main as cli_main

    cli_main(sys.argv[1:])


if __name__ == "__main__":
    main()
