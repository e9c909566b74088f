"""Graphs for the ONNX tests, built in tmp_path with the example builder (examples/onnx/build_examples.py).

One builder serves the README examples, the benchmark and the tests, so what the
tests refuse is exactly what the examples show.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_BUILDER_PATH = ROOT / "examples" / "onnx" / "build_examples.py"


def _load_builder():
    name = "csa_plan_onnx_examples"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _BUILDER_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


builder = _load_builder()
build_model = builder.build_model
NodeSpec = builder.NodeSpec
INTERLEAVED = builder.INTERLEAVED
V4_PRO_MAIN = builder.V4_PRO_MAIN


def write_model(directory: Path, name: str, *args, **kwargs) -> Path:
    """Build a graph with ``build_model(*args, **kwargs)`` and write it to ``directory/name``."""
    return builder.write(build_model(*args, **kwargs), directory / name)


def edit_layer(layer_id: int, change):
    """An ``edit`` callback for build_model that applies ``change(spec)`` to one layer only."""

    def edit(spec) -> None:
        if spec.layer_id == layer_id:
            change(spec)

    return edit
