"""README.md and docs/ cannot rot: every relative link resolves, every shown command parses,
and every README command runs, from a fresh install, with the output the README shows.

- a relative link (``[text](docs/x.md#anchor)``, images too) names a file of the repository
  and, for a Markdown page, one of its headings;
- every ``csa-plan`` command in a fenced block of README.md or docs/*.md parses as the CLI
  would parse it (click's own option and type validation, ``--help`` level), and the example
  files it names exist;
- every README command runs in a quick-start install (the tracked tree installed with
  ``pip install .`` semantics into a fresh target; onnx, matplotlib, ray and cupy made
  unimportable, as the quick start lacks them) from the clone's root, exits as its shown
  output says (``(exit N)``) and prints every line the README shows under it, in order
  (``…`` stands for lines left out).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import click
import pytest

from helpers import ROOT
from helpers.doc_commands import ELISION, broken_link, commands, pages, relative_links

ALL_COMMANDS = [c for p in pages() for c in commands(p)]
README_COMMANDS = [c for c in ALL_COMMANDS if c.page.name == "README.md"]
LINKS = [(p, n, t) for p in pages() for n, t in relative_links(p)]
# Options whose value is a file the command writes, not one it reads.
_WRITES = {"--plot", "--budget-plot", "--resume"}


def test_the_scan_finds_the_pages_commands_and_links():
    assert len(README_COMMANDS) >= 6 and len(ALL_COMMANDS) > len(README_COMMANDS)
    assert {c.args[0] for c in ALL_COMMANDS} >= {"check", "simulate", "sweep", "compare"}
    assert len([1 for p, _n, _t in LINKS if p.name == "README.md"]) >= 15


@pytest.mark.parametrize("page, line, target", LINKS, ids=[f"{p.name}:{n}" for p, n, _t in LINKS])
def test_relative_link_resolves(page, line, target):
    why = broken_link(page, target)
    assert why is None, f"{page.relative_to(ROOT)}:{line}: link ({target}): {why}"


def parse_only(args: tuple[str, ...]) -> None:
    """Parse as ``csa-plan ARGS`` would, without running the command: click converts and checks every value."""
    from csa_plan.cli.main import cli

    with cli.make_context("csa-plan", list(args)) as ctx:
        with warnings.catch_warnings():  # click 8.2 deprecates protected_args (9.0 folds it into args)
            warnings.simplefilter("ignore", DeprecationWarning)
            rest_of_line = [*ctx.protected_args, *ctx.args]
        name, command, rest = cli.resolve_command(ctx, rest_of_line)
        with command.make_context(name, rest, parent=ctx):
            pass


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=[c.where for c in ALL_COMMANDS])
def test_shown_command_parses(command):
    try:
        parse_only(command.args)
    except click.ClickException as exc:
        pytest.fail(f"{command.where}: `csa-plan {' '.join(command.args)}` does not parse: {exc.format_message()}")
    previous = None
    for word in command.args:
        if previous not in _WRITES and word.startswith(("examples/", "tests/", "benchmarks/")):
            assert (ROOT / word).exists(), f"{command.where}: names {word}, which is not in the repository"
        previous = word


def test_parse_only_refuses_what_the_cli_refuses():
    """The parse is a real check: a misspelt option, a bad value and an unknown command all fail it."""
    for bad in (("check", "deepseek-v4-pro", "--max-seq-lenn", "1M"), ("check", "deepseek-v4-pro", "--tp", "x"),
                ("chekc", "deepseek-v4-pro")):
        with pytest.raises(click.ClickException):
            parse_only(bad)
    parse_only(("check", "deepseek-v4-pro", "--tp", "8"))


# ---- the README's commands, run from a fresh install ------------------------------------------

_BLOCKED = ("onnx", "matplotlib", "ray", "cupy")
_RUN = ("import sys\n"
        f"for name in {_BLOCKED!r}: sys.modules[name] = None\n"
        "sys.argv = ['csa-plan'] + sys.argv[1:]\n"
        "from csa_plan.cli.main import main\n"
        "main()\n")


def _tracked_tree(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.fixture(scope="module")
def quick_start(tmp_path_factory):
    """(clone, site): the tracked tree, and it installed as ``pip install .`` installs it."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    base = tmp_path_factory.mktemp("quick-start")
    clone = _tracked_tree(base / "clone")
    site = base / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(site), str(clone)], check=True, capture_output=True, timeout=300)
    return clone, site


def matches_shown(shown: tuple[str, ...], printed: list[str]) -> str | None:
    """None when every shown line (``…`` aside) is a printed line, in order; else the first one that is not."""
    at = 0
    for want in (s.rstrip() for s in shown):
        if want in ELISION or not want:
            continue
        while at < len(printed) and printed[at].rstrip() != want:
            at += 1
        if at == len(printed):
            return want
        at += 1
    return None


def test_matches_shown_needs_every_line_in_order():
    printed = ["a", "b", "c"]
    assert matches_shown(("a", "…", "c"), printed) is None
    assert matches_shown(("c", "a"), printed) == "a"
    assert matches_shown(("a", "x"), printed) == "x"


@pytest.mark.slow
@pytest.mark.parametrize("command", README_COMMANDS, ids=[c.where for c in README_COMMANDS])
def test_readme_command_runs_from_a_fresh_install(command, quick_start):
    clone, site = quick_start
    env = {**os.environ, "PYTHONPATH": str(site), "COLUMNS": "100", "NO_COLOR": "1"}
    env.pop("CSA_PLAN_DEBUG", None)
    run = subprocess.run([sys.executable, "-c", _RUN, *command.args], cwd=clone, env=env, capture_output=True,
                         text=True, timeout=300)
    assert "Traceback" not in run.stderr, run.stderr[-2000:]
    assert run.returncode == command.shown_exit_code(), \
        f"{command.where}: exit {run.returncode}, the README says {command.shown_exit_code()}\n{run.stderr[-2000:]}"
    printed = (run.stdout + run.stderr).splitlines()
    missing = matches_shown(command.shown, printed)
    assert missing is None, (f"{command.where}: `csa-plan {' '.join(command.args)}` no longer prints this README "
                             f"line (in this order):\n  {missing!r}\nit printed:\n" + "\n".join(printed[:200]))
