"""Model directories (issue 18): what a directory holds is said plainly, and two configs that
disagree are noted, never silently reconciled."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from csa_plan.planner.errors import BadInput
from csa_plan.planner.loaders.model_files import load_model

from helpers import ROOT

FLASH = ROOT / "planner" / "presets" / "deepseek-v4-flash.json"
INFERENCE = ROOT / "tests" / "fixtures" / "inference_config_pro" / "inference_config.json"


def test_config_json_and_inference_config_json_that_disagree_are_noted(tmp_path):
    shutil.copy(FLASH, tmp_path / "config.json")  # V4-Flash
    shutil.copy(INFERENCE, tmp_path / "inference_config.json")  # V4-Pro's reference config
    spec = load_model(str(tmp_path))
    assert spec.source.endswith("config.json") and not spec.source.endswith("inference_config.json")
    notes = [n for n in spec.notes if "disagree" in n]
    assert len(notes) == 1 and notes[0].startswith("config.json and inference_config.json disagree on layers")
    assert notes[0].endswith("; config.json is used")


def test_configs_that_agree_get_no_note(tmp_path):
    shutil.copy(FLASH, tmp_path / "config.json")
    data = json.loads(FLASH.read_text())
    (tmp_path / "inference_config.json").write_text(json.dumps(data))
    assert not [n for n in load_model(str(tmp_path)).notes if "disagree" in n]


def test_an_unreadable_second_config_is_noted_not_fatal(tmp_path):
    shutil.copy(FLASH, tmp_path / "config.json")
    (tmp_path / "inference_config.json").write_text("{oops")
    notes = load_model(str(tmp_path)).notes
    assert any(n.startswith("inference_config.json is ignored (malformed JSON") for n in notes)


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/null"])
def test_a_config_that_is_a_device_says_so(tmp_path, target):
    os.symlink(target, tmp_path / "config.json")
    with pytest.raises(BadInput, match="a character device, not a regular file") as info:
        load_model(str(tmp_path))
    assert info.value.source.endswith("config.json")


def test_zero_layers_is_bad_input(tmp_path):
    data = json.loads(FLASH.read_text())
    data.update(num_hidden_layers=0, num_nextn_predict_layers=0, compress_ratios=[])
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(BadInput, match="at least one layer"):
        load_model(str(tmp_path / "config.json"))
    spec = tmp_path / "m.yaml"
    spec.write_text("num_heads: 64\nmax_seq_len: 4096\ncompress_ratios: []\n")
    with pytest.raises(BadInput, match="at least one layer"):
        load_model(str(spec))
