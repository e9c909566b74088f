"""The package installs under one namespace that a checkout's root cannot shadow, and needs no onnx."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT
from helpers.onnx_graphs import INTERLEAVED, write_model


def _tracked_tree(dest: Path) -> Path:
    """A clean copy of the tracked tree, as a fresh clone would have it."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_regular_install_is_not_shadowed_by_the_checkout(tmp_path):
    """``pip install .`` (not editable), then in the checkout's root the package and the tests import."""
    clone = _tracked_tree(tmp_path / "clone")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(target), str(clone)], check=True, capture_output=True)
    assert not (target / "csa_plan" / "__init__.py").exists()  # a namespace, nothing to shadow
    assert {"cli", "planner", "kernels"} & {p.name for p in target.iterdir()} == set()
    env = {**os.environ, "PYTHONPATH": str(target)}
    probe = subprocess.run([sys.executable, "-c", "import csa_plan.planner, csa_plan.planner.reserve, "
                            "csa_plan.cli.main, csa_plan.kernels; print(csa_plan.planner.__file__)"],
                           cwd=clone, env=env, capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    assert str(target) in probe.stdout  # the installed copy, not the checkout
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "tests/planner/test_ledger.py"], cwd=clone, env=env, capture_output=True, text=True)
    assert tests.returncode == 0, tests.stdout[-2000:]


def test_check_reads_onnx_without_the_onnx_package(tmp_path):
    """Reading a graph needs no ``onnx``: the check runs with ``import onnx`` made to fail."""
    graph = write_model(tmp_path, "tiny.onnx", INTERLEAVED)
    code = ("import sys; sys.modules['onnx'] = None\n"
            "from csa_plan.cli.main import main\n"
            f"main(['check', {str(graph)!r}, '--json'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert '"verdict": "admitted"' in out.stdout
