"""Fixtures shared by the kernel tests."""

import pytest


@pytest.fixture(scope="module")
def be():
    """One emulated backend per test module (only modules marked ``requires_emulator`` use it)."""
    from csa_plan.kernels.backends import EmulatedBackend

    return EmulatedBackend()
