"""The CPU kernel emulator for tests: built once per process, or a precise skip reason."""

from __future__ import annotations

import pytest


def _build() -> str | None:
    try:
        from csa_plan.kernels.backends import build_emulator

        build_emulator()
    except Exception as exc:  # no g++ (or the build failed): say so
        return f"kernel emulator cannot be built: {exc}"
    return None


EMULATOR_SKIP = _build()
requires_emulator = pytest.mark.skipif(EMULATOR_SKIP is not None, reason=EMULATOR_SKIP or "")
