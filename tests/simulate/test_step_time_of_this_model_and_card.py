"""Issue 47, class 5: a step time is the model's and the card's own, or refused.

``--step-time measured`` chose its kernel data by the model's name (an 8-layer config in a folder named
deepseek-v4-flash was timed as the 43-layer preset); a raw ``--device-memory`` size names no card and was
timed on the default H200's roofline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import EXAMPLES

TRACE = str(EXAMPLES / "traces" / "sample.jsonl")
PRESETS = Path(__file__).resolve().parents[2] / "planner" / "presets"


def _variant(tmp_path: Path, name: str, **changes) -> str:
    d = json.loads((PRESETS / f"{name}.json").read_text())
    layers = changes.get("num_hidden_layers")
    if layers is not None:
        d["compress_ratios"] = d["compress_ratios"][:layers] + d["compress_ratios"][d["num_hidden_layers"]:]
    d.update(changes)
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(d))
    return str(folder)


@pytest.mark.parametrize("engine", ("vllm-0.33", "sglang-0.5.23"))
@pytest.mark.parametrize("changes", [{"num_hidden_layers": 8}, {"n_routed_experts": 64}, {"hidden_size": 2048}])
def test_measured_data_is_never_another_shape_of_the_same_name(csa, tmp_path, engine, changes):
    model = _variant(tmp_path, "deepseek-v4-flash", **changes)
    r = csa("simulate", TRACE, "--engine", engine, "--model", model, "--device-memory", "h200", "--tp", "2",
            "--step-time", "measured")
    key = next(iter(changes))
    assert r.code == 2 and "--step-time" in r.err and key in r.err and len(r.err.splitlines()) == 1, r.err


@pytest.mark.parametrize("engine", ("vllm-0.33", "sglang-0.5.23"))
@pytest.mark.parametrize("size", ["141GB", "140GiB", "150000000000"])
@pytest.mark.parametrize("source", ["physics", "measured", None])
def test_a_raw_size_names_no_card_to_time_on(csa, engine, size, source):
    args = ("simulate", TRACE, "--engine", engine, "--model", "deepseek-v4-flash", "--device-memory", size, "--tp", "2",
            *(("--step-time", source) if source else ()))
    r = csa(*args)
    assert r.code == 2 and "names no card" in r.err and len(r.err.splitlines()) == 1, r.err
    if source != "measured":  # named: the card's own roofline (measured needs aiconfigurator-core)
        assert csa(*args, "--gpu", "h200", "--brief").code == 0
    fixed = [a for a in args if a not in ("--step-time", source)]
    assert csa(*fixed, "--step-time", "fixed", "--brief").code == 0
