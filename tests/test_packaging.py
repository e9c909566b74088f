"""Every Python package folder of the repository is listed for installation."""

from __future__ import annotations

import tomllib

from helpers import ROOT

ROOTS = {"cli": "csa_plan.cli", "planner": "csa_plan.planner", "kernels": "csa_plan.kernels"}


def test_every_package_folder_is_installed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for folder, dotted in ROOTS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((dotted,) + rel))
    assert found == listed
    for name in listed:
        assert name in config["package-dir"], name
