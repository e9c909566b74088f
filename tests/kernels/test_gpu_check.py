"""benchmarks/gpu_check.sh on a machine without a GPU (CI): every GPU step reports the no-GPU
code 5, the summary is written and printed, and the script exits 5; a budget too small for
the steps skips them and exits 1, still with its summary.

CuPy is blocked (a ``cupy`` package on PYTHONPATH whose import fails), so the test behaves
the same on a machine that has a GPU. The install step uses the no-pip PYTHONPATH fallback,
which leaves the test's environment untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
GPU_STEPS = ["tiny", "memcheck", "racecheck", "probe", "run_gpu", "bench"]

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="needs bash and coreutils timeout")


def _run(tmp_path: Path, **env) -> tuple[subprocess.CompletedProcess, dict]:
    block = tmp_path / "block"
    (block / "cupy").mkdir(parents=True)
    (block / "cupy" / "__init__.py").write_text("raise ImportError('cupy blocked by test_gpu_check')\n")
    out = tmp_path / "out"
    e = dict(os.environ, PYTHON=sys.executable, CSA_GPU_CHECK_INSTALL="pythonpath",
             PYTHONPATH=str(block) + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    r = subprocess.run(["bash", str(SCRIPT), str(out)], capture_output=True, text=True, env=e, timeout=300)
    summary = json.loads((out / "summary.json").read_text())
    return r, summary


def test_gpu_check_without_a_gpu_reports_no_gpu_everywhere_and_exits_5(tmp_path):
    r, s = _run(tmp_path)
    assert r.returncode == 5, r.stdout + r.stderr
    assert s["schema"] == "csa-plan/gpu-check/v1" and s["exit_code"] == 5 and s["no_gpu_code"] == 5
    assert s["install_mode"] == "pythonpath"
    by = {st["name"]: st for st in s["steps"]}
    assert list(by) == ["facts", "install"] + GPU_STEPS
    assert by["facts"]["status"] == "pass" and by["install"]["status"] == "pass"
    for name in GPU_STEPS:
        assert by[name]["gpu"] and by[name]["rc"] == 5 and by[name]["status"] == "no-gpu", by[name]
        assert "no usable GPU" in Path(by[name]["log"]).read_text(), name
        assert 0 < by[name]["timeout_s"] <= 150
    assert sum(st["timeout_s"] for st in s["steps"]) <= 480  # the per-step limits fit the 8-minute promise
    assert "summary in" in r.stdout and '"exit_code": 5' in r.stdout
    assert s["artifacts"] == {}  # no GPU, no JSON documents


def test_gpu_check_budget_skips_steps_and_still_writes_its_summary(tmp_path):
    r, s = _run(tmp_path, CSA_GPU_CHECK_BUDGET_S="12")
    assert r.returncode == 1, r.stdout + r.stderr
    assert s["exit_code"] == 1
    statuses = [st["status"] for st in s["steps"]]
    assert "skipped" in statuses and statuses[-1] == "skipped"
