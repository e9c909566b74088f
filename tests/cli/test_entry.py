"""``csa-plan --help`` is printed without click (start-up), and is exactly click's own rendering."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from csa_plan.cli.entry import top_level_help


def click_help(columns: int) -> str:
    code = ("import sys\nfrom csa_plan.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n")
    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout


@pytest.mark.parametrize("columns", [40, 50, 60, 79, 80, 81, 100, 200])
def test_fast_help_equals_clicks_help(columns):
    assert top_level_help(columns) == click_help(columns)


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_imports_no_click(flag):
    code = ("import sys\nsys.argv = ['csa-plan', %r]\nfrom csa_plan.cli.entry import main\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0\n"
            "print('click' in sys.modules, 'csa_plan.cli.main' in sys.modules, file=sys.stderr)" % flag)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stderr.split() == ["False", "False"]
    assert run.stdout.startswith("Usage: csa-plan [OPTIONS] COMMAND [ARGS]...")


def test_everything_else_goes_to_click():
    code = ("import sys\nsys.argv = ['csa-plan', 'check', '--help']\nfrom csa_plan.cli.entry import main\n"
            "main()\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.startswith("Usage: csa-plan check [OPTIONS] MODEL")
