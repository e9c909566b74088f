"""Issue 12: every answer true and readable (crashes, refused-model answers, what people type).

Each test here reproduces one item of the issue; each failed on the main it was filed
against (internal errors, a capacity count for a refused model, `80G` refused, ...).
"""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import pytest

from helpers import EXAMPLES, ROOT

from csa_plan.planner.amounts import parse_count
from csa_plan.planner.errors import BadInput
from csa_plan.planner.memory import parse_size

ALL_SWA = str(ROOT / "tests" / "fixtures" / "edge" / "all-swa.yaml")
H200 = 143771 << 20


# --- crashes -----------------------------------------------------------------------

@pytest.mark.parametrize("model", ["deepseek-v4-pro", ALL_SWA])
def test_compare_at_2m_tokens_and_all_swa_does_not_crash(csa, model):
    r = csa("compare", model, "--max-seq-len", "2000000", "--device-memory", "h200")
    assert "internal error" not in r.err, r.err
    assert r.code in (0, 3), r.err
    j = csa("compare", model, "--max-seq-len", "2000000", "--device-memory", "h200", "--json")
    assert j.code == r.code and j.json()["exit_code"] == r.code


def test_check_bf16_reference_at_2m_tokens_does_not_crash(csa):
    r = csa("check", "deepseek-v4-pro", "--max-seq-len", "2000000", "--layout", "bf16-reference",
            "--device-memory", "h200", "--weights", "0")
    assert r.code == 3 and "internal error" not in r.err, r.err
    assert "that fit: no answer" in r.out  # v2 head (issue 23)


def test_all_swa_zero_bytes_under_bf16_reference_is_any_number(csa):
    r = csa("check", ALL_SWA, "--layout", "bf16-reference", "--device-memory", "h200", "--weights", "0", "--json")
    assert r.code == 0, r.err
    mem = r.json()["fit"]  # v2: the one capacity answer (issue 23)
    assert mem["per_request_bytes"] == 0 and mem["requests_that_fit"] is None
    assert mem["unbounded"] is True and mem["fits"] is True and mem["answered"] is True
    t = csa("check", ALL_SWA, "--layout", "bf16-reference", "--device-memory", "h200", "--weights", "0")
    assert "any number" in t.out


# --- a refused model gets no capacity answer ------------------------------------------

@pytest.mark.parametrize("gate", ["op", "c1"])
def test_refused_model_has_no_capacity_answer(csa, gate):
    args = ("check", "deepseek-v4-pro", "--max-seq-len", "2000000", "--device-memory", "h200", "--weights", "0",
            "--gate", gate)
    doc = csa(*args, "--json").json()
    assert doc["verdict"] == "refused" and doc["exit_code"] == 3
    mem = doc["fit"]  # v2 (issue 23)
    assert mem["fits"] is None and mem["requests_that_fit"] is None and mem["longest_context"] is None
    assert mem["answered"] is False and "refused" in mem["no_answer"]
    assert doc["budget"]["kv_memory_bytes"] == H200  # the budget itself is still reported
    text = csa(*args)
    assert text.code == 3
    assert "2,020,192" not in text.out and "2020192" not in text.out
    assert not re.search(r"that fit: \[?[a-z]*\]?[0-9]", text.out), text.out
    assert "that fit: no answer" in text.out


def test_c1_gate_on_pro_refuses_without_a_count(csa):
    doc = csa("check", "deepseek-v4-pro", "--gate", "c1", "--device-memory", "h200", "--weights", "0", "--json").json()
    assert doc["verdict"] == "refused" and doc["fit"]["requests_that_fit"] is None


# --- compare: the slope describes the same layers as the per-request bytes ---------------

def test_compare_slope_is_over_the_admitted_layers(csa):
    doc = csa("compare", "deepseek-v4-pro", "--max-seq-len", "2000000", "--device-memory", "h200", "--json").json()
    exact = next(p for p in doc["profiles"] if p["profile"] == "exact")
    # only the MTP sliding-window ring is admitted at 2M tokens: 74,624 B that never grow
    assert exact["per_request_bytes"] == 74_624
    assert Fraction(exact["bytes_per_token"]["numerator"], exact["bytes_per_token"]["denominator"]) == 0
    layouts = [p for p in doc["profiles"] if p.get("kind", "profile") == "profile"]
    assert layouts and all(p["requests_that_fit"] is None for p in layouts)  # refused: no answer
    text = csa("compare", "deepseek-v4-pro", "--max-seq-len", "2000000", "--device-memory", "h200")
    assert "5,177.7" not in text.out and "refused" in text.out


def test_compare_admitted_slope_unchanged(csa):
    doc = csa("compare", "deepseek-v4-pro", "--max-seq-len", "65536", "--json").json()
    exact = next(p for p in doc["profiles"] if p["profile"] == "exact")
    assert Fraction(exact["bytes_per_token"]["numerator"], exact["bytes_per_token"]["denominator"]) \
        == Fraction(662_745, 128)


# --- the refusal example produces its refusal ------------------------------------------

def test_unsupported_c1_ratio_example_refuses_as_documented(csa):
    path = str(EXAMPLES / "configs" / "refusals" / "UnsupportedC1Ratio.yaml")
    doc = csa("check", path, "--json").json()
    assert doc["exit_code"] == 3 and {r["type"] for r in doc["refusals"]} == {"UnsupportedC1Ratio"}
    assert doc["options"]["gate"] == "c1"
    assert csa("check", path, "--gate", "op").code == 0  # the command line overrides the spec


def test_spec_gate_must_be_known(csa, tmp_path):
    spec = tmp_path / "g.yaml"
    spec.write_text((EXAMPLES / "configs" / "tiny-interleaved.yaml").read_text() + "gate: C2\n")
    r = csa("check", str(spec))
    assert r.code == 2 and "did you mean 'c1'" in r.err


# --- inputs that people type -------------------------------------------------------------

@pytest.mark.parametrize("text,value", [
    ("128k", 128_000), ("128K", 131_072), ("1M", 1_048_576), ("1m", 1_000_000), ("25.6k", 25_600),
    ("1e6", 1_000_000), ("1,000,000", 1_000_000), ("1_000_000", 1_000_000), ("2000000", 2_000_000), ("0", 0),
])
def test_token_counts_as_vllm_reads_them(text, value):
    assert parse_count(text, "options", "--max-seq-len") == value


@pytest.mark.parametrize("text,needle", [
    ("1.5K", "did you mean 1.5k"), ("1e-3", "not a whole"), ("1,00", "commas must group"),
    ("12q", "is not an integer"), ("1e40", "too large"), ("-4", "-4 is negative"),
])
def test_token_counts_refused_with_a_reason(text, needle):
    with pytest.raises(BadInput, match=needle):
        parse_count(text, "options", "--max-seq-len")


@pytest.mark.parametrize("text,value", [
    ("80G", 80 << 30), ("80g", 80 * 10**9), ("80GiB", 80 << 30), ("2,000,000", 2_000_000), ("512B", 512),
])
def test_sizes_people_type(text, value):
    assert parse_size(text, "--device-memory") == value


def test_size_exponent_and_gpu_typo_get_a_suggestion():
    with pytest.raises(BadInput, match="did you mean 100,000,000,000"):
        parse_size("1e11", "--device-memory")
    with pytest.raises(BadInput, match="did you mean 'h200'"):
        parse_size("h200x", "--device-memory")


def test_typed_inputs_on_the_command_line(csa):
    r = csa("check", "deepseek-v4-pro", "--max-seq-len", "128K", "--device-memory", "80G", "--weights", "0", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["options"]["max_seq_len"] == 131_072 and doc["budget"]["card_bytes"] == 80 << 30
    assert csa("check", "deepseek-v4-pro", "--max-seq-len", "1e6", "--json").json()["options"]["max_seq_len"] \
        == 1_000_000


@pytest.mark.parametrize("ref", ["DeepSeek-V4-Pro", "deepseek-ai/DeepSeek-V4-Pro", "DEEPSEEK-V4-PRO"])
def test_preset_spellings_name_the_bundled_preset(csa, ref):
    doc = csa("check", ref, "--json").json()
    assert doc["model"]["name"] == "deepseek-v4-pro" and doc["model"]["source"] == "deepseek-v4-pro"


@pytest.mark.parametrize("args,needle", [
    (("check", "deepseek-v4pro"), "did you mean 'deepseek-v4-pro'"),
    (("check", "deepseek-v4-pro", "--layout", "exat"), "did you mean 'exact'"),
    (("check", "deepseek-v4-pro", "--gate", "c2"), "did you mean 'c1'"),
    (("compare", "deepseek-v4-pro", "--layout", "bf16-ref"), "did you mean 'bf16-reference'"),
    (("check", "deepseek-v4-pro", "--device-memory", "h200x"), "did you mean 'h200'"),
    (("check", "deepseek-v4-pro", "--kv-format", "fp8"), "did you mean 'fp8_e4m3_block64'"),
    (("simulate", str(EXAMPLES / "mixes" / "chat-h200.yaml"), "--policy", "queu"), "did you mean 'queue'"),
    (("chek", "deepseek-v4-pro"), "did you mean 'check'"),
])
def test_every_refused_choice_names_the_closest(csa, args, needle):
    r = csa(*args)
    assert r.code == 2, (r.code, r.err)
    lines = [l for l in r.err.splitlines() if l.strip()]
    assert len(lines) == 1 and needle in lines[0], r.err


def test_kv_format_on_the_command_line_is_bad_input_but_a_file_format_is_a_refusal(csa):
    r = csa("check", "deepseek-v4-pro", "--kv-format", "fp8")
    assert r.code == 2 and "Refusals" not in r.out
    assert csa("check", "deepseek-v4-pro", "--kv-format", "FP8_E4M3_BLOCK64").code == 0
    doc = csa("check", str(EXAMPLES / "configs" / "refusals" / "UnknownCacheFormat.yaml"), "--json").json()
    assert doc["exit_code"] == 3 and {r["type"] for r in doc["refusals"]} == {"UnknownCacheFormat"}


def test_unknown_spec_field_suggests(csa, tmp_path):
    spec = tmp_path / "t.yaml"
    spec.write_text("num_head: 16\nlayers:\n  - compression_ratio: 4\n")
    r = csa("check", str(spec))
    assert r.code == 2 and "did you mean 'num_heads'" in r.err


def test_compare_engine_rows_give_no_count_for_a_refused_model(csa):
    """At 2M tokens every compressed layer is refused: no profile and no engine row may count requests."""
    r = csa("compare", "deepseek-v4-pro", "--max-seq-len", "2000000", "--device-memory", "h200", "--json")
    doc = r.json()
    assert r.code == 3 and doc["refused_layers"]
    engines = [row for row in doc["profiles"] if row.get("kind") == "engine"]
    assert engines, "the engine rows are part of the comparison"
    assert all(row["requests_that_fit"] is None for row in doc["profiles"])
