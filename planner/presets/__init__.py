"""The bundled Hugging Face configs of the presets, read beside this module (``importlib.resources``
and ``pathlib`` would cost every check start-up time: docs/architecture.md)."""

from __future__ import annotations

import os


def read_preset(file_name: str) -> str:
    """The text of a bundled config, as ``Path.read_text(encoding="utf-8")`` gives it."""
    with open(os.path.join(os.path.dirname(__file__), file_name), encoding="utf-8") as f:
        return f.read()
