"""The core stays pure and the CLI stays fast: check what each entry point imports."""

from __future__ import annotations

import subprocess
import sys


def imported_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_planner_imports_no_cli_or_gpu():
    """Every module of the core, imported together, pulls in no CLI, GPU, onnx or numpy."""
    mods = imported_after(
        "import importlib, pkgutil, csa_plan.planner as p\n"
        "for m in pkgutil.walk_packages(p.__path__, 'csa_plan.planner.'):\n"
        "    importlib.import_module(m.name)")
    assert "csa_plan.planner.simulate" in mods and "csa_plan.planner.engines.vllm_0_33" in mods
    for banned in ("click", "rich", "cupy", "onnx", "numpy"):
        assert banned not in mods, banned


def test_help_imports_no_heavy_modules():
    mods = imported_after("from csa_plan.cli.main import cli\n"
                          "try:\n    cli.main(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass")
    for banned in ("numpy", "onnx", "cupy", "matplotlib"):
        assert banned not in mods, banned


def test_console_script_runs():
    from pathlib import Path

    script = Path(sys.executable).with_name("csa-plan")  # installed beside the interpreter
    out = subprocess.run([str(script), "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and "csa-plan" in out.stdout
