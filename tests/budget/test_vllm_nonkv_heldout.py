"""The held-out table of vLLM's non-KV terms (docs/vllm-nonkv-heldout.md), recomputed from its fixtures.

tests/fixtures/vllm_nonkv_logs.json holds each posted log's source, the lines it printed and csa-plan's
command for its flags; tools/heldout_vllm_nonkv.py predicts each from its flags alone and refits the
terms the 'fit' logs fix. The document must be exactly what the tool writes today, so a change of a
term (or of a fixture) that moves any figure fails here until the document is regenerated.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("heldout_vllm_nonkv", ROOT / "tools" / "heldout_vllm_nonkv.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _logs() -> list[dict]:
    return json.loads((ROOT / "tests" / "fixtures" / "vllm_nonkv_logs.json").read_text(encoding="utf-8"))["logs"]


def test_every_fixture_names_its_source_lines_and_role():
    for log in _logs():
        assert log["source"] and log["excerpt"] and log["argv"][0].startswith("deepseek-v4"), log["id"]
        assert log["role"] in ("fit", "held-out") and log["measure"] in ("kv_gib", "concurrency")
        assert (log["role"] == "fit") == ("fits" in log), log["id"]


def test_document_is_the_tools_output():
    tool = _tool()
    assert (ROOT / "docs" / "vllm-nonkv-heldout.md").read_text(encoding="utf-8") == tool.render(_logs())


def test_refit_reproduces_the_codes_figures_and_the_band_is_from_held_out_logs_only():
    tool = _tool()
    rows, text = tool.table(_logs())
    fit = [r for r in rows if r["role"] == "fit"]
    held = [r for r in rows if r["role"] == "held-out"]
    assert all(abs(r["error_pct"]) < 0.5 for r in fit)  # small by construction
    lo, hi = min(r["error_pct"] for r in held), max(r["error_pct"] for r in held)
    assert f"Held-out band ({len(held)} logs): {lo:+.1f} % to {hi:+.1f} %" in text
    lines = tool.refit(_logs())
    assert "refit 614.4 MiB, code 614 MiB" in lines[0] and "refit 0.4541, code 0.4541" in lines[1]
