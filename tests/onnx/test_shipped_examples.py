"""The ONNX example graphs shipped in examples/onnx/ are what the builder writes, and check without onnx.

The quick start has no onnx package (it is the ``[onnx]`` extra, needed only to *write*
graphs), so the README's ``csa-plan check examples/onnx/….onnx`` must read the shipped
files; these tests keep them byte-equal to ``build_examples.py`` and prove the read path
imports no onnx.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import ROOT
from helpers.onnx_graphs import builder

SHIPPED = ROOT / "examples" / "onnx"


def test_every_shipped_graph_is_a_builder_example():
    assert sorted(p.name for p in SHIPPED.glob("*.onnx")) == sorted(builder.EXAMPLES)


@pytest.mark.parametrize("name", sorted(builder.EXAMPLES))
def test_shipped_graph_equals_what_the_builder_writes(name, tmp_path):
    built = builder.write(builder.EXAMPLES[name](), tmp_path / name).read_bytes()
    shipped = (SHIPPED / name).read_bytes()
    assert shipped == built, (f"examples/onnx/{name} differs from what build_examples.py writes; "
                              "run `python examples/onnx/build_examples.py` and commit the graphs")


# The check runs with the onnx package made unimportable (as in the quick-start virtualenv).
_NO_ONNX = ("import sys; sys.modules['onnx'] = None; sys.argv = ['csa-plan'] + sys.argv[1:]; "
            "from csa_plan.cli.main import main; main()")


@pytest.mark.parametrize("name, exit_code", [("interleaved_per_layer.onnx", 0),
                                             ("interleaved_shared_symbol.onnx", 3),
                                             ("v4_pro_62_nodes.onnx", 0)])
def test_shipped_graph_checks_without_the_onnx_package(name, exit_code):
    run = subprocess.run([sys.executable, "-c", _NO_ONNX, "check", str(SHIPPED / name), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == exit_code, run.stderr
    doc = json.loads(run.stdout)
    assert doc["schema"].startswith("csa-plan/check/") and doc["exit_code"] == exit_code
    assert "Traceback" not in run.stderr


def test_builder_without_onnx_says_which_extra():
    script = ("import sys, runpy; sys.modules['onnx'] = None; sys.argv = ['build_examples.py', sys.argv[1]]; "
              f"runpy.run_path({str(SHIPPED / 'build_examples.py')!r}, run_name='__main__')")
    run = subprocess.run([sys.executable, "-c", script, "/nonexistent-out"], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "pip install -e '.[onnx]'" in run.stderr
