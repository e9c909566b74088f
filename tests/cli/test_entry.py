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


def _run(args: list[str], via_entry: bool, before: str = "") -> subprocess.CompletedProcess:
    call = ("from csa_plan.cli.entry import main\nmain()\n" if via_entry else
            "from csa_plan.cli.main import main\nmain()\n")
    code = f"import sys\n{before}\nsys.argv = ['csa-plan'] + {args!r}\n{call}"
    return subprocess.run([sys.executable, "-c", code], capture_output=True)


@pytest.mark.parametrize("args", [
    ["check", "deepseek-v4-pro", "--max-seq-len", "1M", "--device-memory", "h200", "--tp", "8",
     "--engine", "vllm-0.33", "--json"],
    ["check", "deepseek-v4-flash", "--brief"],
    ["check", "deepseek-v4-pro", "--device-memory", "141", "--json"],  # bad input: 2
    ["check", "deepseek-v4-pro", "--device-memory", "h100", "--tp", "1", "--engine", "vllm-0.33"],  # refused: 3
    ["--version"],
    ["--help"],
])
def test_the_fast_exit_changes_no_output_or_exit_code(args):
    """The console script ends without the interpreter's teardown: the same bytes and exit code as
    the CLI run the ordinary way."""
    fast, plain = _run(args, True), _run(args, False)
    if args != ["--help"]:
        assert (fast.returncode, fast.stdout, fast.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert fast.stdout and fast.returncode in (0, 2, 3)


def test_the_fast_exit_leaves_atexit_work_and_odd_codes_to_python():
    """A registered ``atexit`` callback still runs (the normal teardown is used), and a non-int
    exit code exits as ``sys.exit`` does."""
    run = _run(["--version"], True, "import atexit\natexit.register(lambda: print('ATEXIT RAN'))")
    assert run.returncode == 0 and run.stdout.rstrip().endswith(b"ATEXIT RAN")
    code = "import sys\nfrom csa_plan.cli.entry import leave\nprint('out')\nleave('a message')\n"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (run.returncode, run.stdout, run.stderr) == (1, "out\n", "a message\n")


def test_the_console_script_collects_the_young_generation_less_often():
    code = ("import gc, sys\nsys.argv = ['csa-plan', '--version']\nimport atexit\n"
            "atexit.register(lambda: print('threshold', gc.get_threshold()[0]))\n"
            "from csa_plan.cli.entry import GC_YOUNG_THRESHOLD, main\nassert GC_YOUNG_THRESHOLD > 700\nmain()\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.split()[-2:] == ["threshold", "10000"]
