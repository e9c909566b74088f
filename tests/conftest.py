"""Shared test helpers: run the real CLI entry point in-process."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> dict:
        return json.loads(self.out)


@pytest.fixture
def csa(capsys):
    """Run ``csa-plan ARGS`` through ``main`` (exit code, stdout, stderr)."""
    from csa_plan.cli.main import main

    def run(*args: str) -> Result:
        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run
