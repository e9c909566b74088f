"""Compile the kernel module once, into CuPy's kernel cache, before anything is timed.

    python -m csa_plan.kernels.gpu_compile [--json]

The cold NVRTC compile of the whole module (kernels/backends.module_source) takes about 33 s
of CPU (NVRTC 13.0); CuPy keeps the cubin in its kernel cache (``CUPY_CACHE_DIR``, default
``~/.cupy/kernel_cache``), keyed on the source, the options, the architecture and the NVRTC
version, so every later CupyBackend of the same machine loads it in well under a second —
run-gpu, the probe, and the probe under compute-sanitizer, which would otherwise compile
inside its own, shorter, limit. The GPU check's ``compile`` step is this, with its own limit.

Exit 0 compiled (or found in the cache), 5 (one line) without a usable GPU — CuPy missing,
no driver or device, or no CUDA runtime headers where CuPy looks (kernels/cuda_headers.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def cache_dir() -> str:
    return os.environ.get("CUPY_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cupy", "kernel_cache")


def _files(folder: str) -> int:
    try:
        return sum(len(f) for _, _, f in os.walk(folder))
    except OSError:
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m csa_plan.kernels.gpu_compile", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print the facts as JSON")
    a = ap.parse_args(argv)
    from csa_plan.kernels.gpu_env import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason:
        print(f"gpu_compile: {reason}", file=sys.stderr)
        return 5
    import cupy

    from csa_plan.kernels.backends import KERNEL_NAMES, CudaHeadersMissing, CupyBackend, module_source

    folder = cache_dir()
    before = _files(folder)
    t0 = time.perf_counter()
    try:
        be = CupyBackend(cupy)
    except CudaHeadersMissing as exc:
        print(f"gpu_compile: {exc}", file=sys.stderr)
        return 5
    cold_s = time.perf_counter() - t0
    facts = {"sources": module_source().split("\n", 1)[0].rsplit(" ", 1)[-1],  # the hash CuPy's cache keys on "kernels": len(KERNEL_NAMES), "load_s": round(cold_s, 3),
             "cache_dir": folder, "cache_files_before": before, "cache_files_after": _files(folder),
             "sm_count": be.sm_count}
    if a.json:
        print(json.dumps(facts, indent=1))
    else:
        print(f"gpu_compile: {len(KERNEL_NAMES)} kernels (sources {facts['sources']}) compiled or loaded in "
              f"{cold_s:.1f} s; CuPy kernel cache {folder}: {before} -> {facts['cache_files_after']} files "
              f"(later steps load from it: the probe's module_load_s says how long)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
