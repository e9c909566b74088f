"""Fixtures shared by the kernel tests."""

import os

import pytest


@pytest.fixture(scope="module")
def be():
    """One emulated backend per test module (only modules marked ``requires_emulator`` use it)."""
    from csa_plan.kernels.backends import EmulatedBackend

    return EmulatedBackend()


@pytest.fixture(scope="session", autouse=True)
def cuda_headers_for_the_fake(tmp_path_factory):
    """The fake CuPy compiles only where CuPy 14 would find cuda_runtime.h (tests/kernels/fake_cupy.py):
    unless CUDA_PATH or CUDA_HOME is set, point CUDA_PATH at a toolkit-shaped folder holding one (the
    lookup checks the file is there, as cuda.pathfinder does; nothing includes it). Tests of the
    missing-headers path unset it themselves."""
    if os.environ.get("CUDA_PATH") or os.environ.get("CUDA_HOME"):
        yield None
        return
    root = tmp_path_factory.mktemp("cuda-toolkit")
    (root / "include").mkdir()
    (root / "include" / "cuda_runtime.h").write_text("/* stands in for the CUDA runtime header */\n")
    os.environ["CUDA_PATH"] = str(root)
    try:
        yield root
    finally:
        os.environ.pop("CUDA_PATH", None)
