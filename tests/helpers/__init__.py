"""Shared test helpers, imported by name (``from helpers import EXAMPLES``).

``tests/`` is on ``sys.path`` because ``tests/conftest.py`` lives there (pytest's
default import mode), so every test directory imports these the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

# The fuzz budget: one definition, used by every test under tests/fuzz/.
FUZZ = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass
class Result:
    """What one in-process ``csa-plan`` run left: exit code, stdout, stderr."""

    code: int
    out: str
    err: str

    def json(self) -> dict:
        return json.loads(self.out)
