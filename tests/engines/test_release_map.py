"""Every vLLM release a user names: the modelled release whose rules it runs, or a refusal that says why.

The map (planner/engines/releases.py) was read from the wheels; these tests hold its consequences:
a mapped version plans exactly as the release it names, the note names both, the refusals name the
reason, and docs/engine-releases.md's table says the same as the code.
"""

from __future__ import annotations

import re

import pytest

from helpers import ROOT
from csa_plan.planner.engines.registry import ENGINES, get_engine, resolve_engine_name
from csa_plan.planner.engines.releases import NEWEST_MODELLED, ROWS, match_vllm
from csa_plan.planner.engines.settings import EngineSettings
from csa_plan.planner.errors import BadInput
from csa_plan.planner.units import GiB

ONE_M = 1 << 20


@pytest.mark.parametrize("named, modelled", [
    ("vllm-0.22.0", "vllm-0.25"), ("vllm-0.23.0", "vllm-0.25"), ("vllm-0.24", "vllm-0.25"),
    ("vllm-0.25.1", "vllm-0.25"), ("vllm-0.25.2", "vllm-0.25"),  # a patch not in the table: its branch
    ("vllm-0.27.1", "vllm-0.27"), ("vllm-0.27.2", "vllm-0.27"), ("vllm-0.27.1+cu129", "vllm-0.27"),
    ("vllm-0.28.1", "vllm-0.28"), ("vllm-0.28.0rc2", "vllm-0.28"),
    ("vllm-0.29.0", "vllm-0.33"), ("vllm-0.30.1", "vllm-0.33"), ("vllm-0.31", "vllm-0.33"),
    ("vllm-0.32.0rc1", "vllm-0.33"), ("vllm-0.31.1.dev45+g1a2b3c4", "vllm-0.33"),
    ("vllm-0.30.0+cu129", "vllm-0.33"), ("vllm-0.31.0.dev12", "vllm-0.33"), ("vLLM-0.29.1.dev7", "vllm-0.33"), ("vllm-v0.30.0", "vllm-0.33"),
    ("vllm-0.31.1rc1.dev50+g554340f3d", "vllm-0.33"),  # a nightly after an rc tag: between 0.31.0 and 0.31.1
])
def test_a_version_maps_to_the_release_whose_rules_it_runs(named, modelled):
    name, note = resolve_engine_name(named)
    assert name == modelled
    assert note and note.startswith(named.lower()) and f"modelled by {modelled}'s rules" in note


@pytest.mark.parametrize("named", ["vllm-0.33", "vllm-0.33.0", "vllm-0.34", "vllm-0.34.0", "vllm-0.26.0",
                                   "vllm-0.25", "vllm-0.27", "vllm-0.27.0", "vllm-0.28", "vllm-0.28.0"])
def test_a_modelled_release_is_itself_without_a_note(named):
    name, note = resolve_engine_name(named)
    assert name == named.removesuffix(".0") and note is None


@pytest.mark.parametrize("named, reason", [
    ("vllm-0.19.1", "before DeepSeek-V4 support"),
    ("vllm-0.10.2", "before DeepSeek-V4 support"),
    ("vllm-0.18.1.dev4", "before DeepSeek-V4 support"),
    ("vllm-0.21.0", "not compared"),  # 0.20/0.21: DeepSeek-V4 in another code path
    ("vllm-0.27.1.dev4", "between vllm 0.27.0 (vllm-0.27) and 0.28.0 (vllm-0.28)"),
    ("vllm-0.28.1.dev2", "between vllm 0.28.0 (vllm-0.28) and 0.29.0 (vllm-0.33)"),
    ("vllm-0.33.1.dev3", "between vllm 0.33.0 (vllm-0.33) and 0.34.0 (vllm-0.34)"),
    ("vllm-0.34.1", "after the newest modelled release"),
    ("vllm-0.35.0", "after the newest modelled release"),
    ("vllm-1.0", "after the newest modelled release"),
    ("vllm-0.34.1.dev9", "after vllm 0.34.0, the newest modelled release"),
    ("vllm-0.35.0.dev1", "after vllm 0.34.0, the newest modelled release"),
    ("vllm-0.34.0.dev5", "between vllm 0.33.0 (vllm-0.33) and 0.34.0 (vllm-0.34)"),  # before 0.34.0
    ("vllm-0.28.0rc2.dev3", "between vllm 0.27.0 (vllm-0.27) and 0.28.0 (vllm-0.28)"),  # after 0.28.0rc1
    ("vllm-0.34.1rc1.dev2", "after vllm 0.34.0, the newest modelled release"),
    ("sglang-0.5.22", "only SGLang 0.5.23 is modelled"),
])
def test_a_version_no_modelled_release_runs_is_refused_saying_why(named, reason):
    with pytest.raises(BadInput, match=re.escape(reason)) as err:
        get_engine(named)
    assert named in str(err.value) and "docs/engine-releases.md" in str(err.value)


def test_not_a_version_stays_an_unknown_engine():
    assert match_vllm("vllm-banana", "banana") is None
    with pytest.raises(BadInput, match="unknown engine"):
        get_engine("vllm-banana")


def test_the_rows_cover_every_release_from_the_first_v4_to_the_newest_without_overlap():
    for a, b in zip(ROWS, ROWS[1:]):
        assert a.first <= a.last < b.first
    assert ROWS[-1].last == NEWEST_MODELLED and ROWS[-1].modelled == "vllm-0.34"
    assert all(r.modelled is None or r.modelled in ENGINES for r in ROWS)
    assert all(re.search(r":\d+", r.why) for r in ROWS if r.modelled is not None)  # every boundary cited


@pytest.mark.parametrize("named, modelled", [("vllm-0.30.1", "vllm-0.33"), ("vllm-0.23.0", "vllm-0.25"),
                                             ("vllm-0.27.1", "vllm-0.27")])
def test_a_mapped_version_plans_exactly_as_its_modelled_release(flash, named, modelled):
    settings = EngineSettings(gpu="h200", num_speculative_tokens=1)
    a = get_engine(named).configure(flash, settings, ONE_M).size_pool(40 * GiB)
    b = get_engine(modelled).configure(flash, settings, ONE_M).size_pool(40 * GiB)
    assert a == b and dict(a.extra)["release"] == modelled


def test_vllm_034_plans_the_pool_as_0_33_from_the_same_kv_memory(flash, pro):
    for model in (flash, pro):
        for s in (EngineSettings(gpu="h200"), EngineSettings(gpu="h200", num_speculative_tokens=3),
                  EngineSettings(gpu="b200", indexer_kv_dtype="mxfp4", max_num_batched_tokens=2048)):
            p34 = get_engine("vllm-0.34").configure(model, s, ONE_M)
            p33 = get_engine("vllm-0.33").configure(model, s, ONE_M)
            assert p34.block_bytes == p33.block_bytes and p34.groups == p33.groups
            a, b = p34.size_pool(40 * GiB), p33.size_pool(40 * GiB)
            assert (a.total_units, a.tokens, a.log_lines) == (b.total_units, b.tokens, b.log_lines)
            assert dict(a.extra)["release"] == "vllm-0.34"


def test_vllm_034_names_itself_refuses_the_budget_from_flags_and_replays_over_the_given_pool(csa):
    r = csa("check", "deepseek-v4-flash", "--max-seq-len", "1M", "--engine", "vllm-0.34", "--kv-memory", "40GiB")
    assert r.code == 0 and "vllm-0.34 (vLLM 0.34.0)" in r.out
    assert "GPU KV cache size: 4,169,106 tokens" in r.out  # 0.33's figure for the same 40 GiB
    r = csa("check", "deepseek-v4-flash", "--max-seq-len", "1M", "--engine", "vllm-0.34", "--device-memory", "h200")
    assert r.code == 3 and "extensible KV cache" in r.err and "--kv-memory" in r.err  # a typed refusal
    r = csa("simulate", "examples/traces/mooncake_conversation_head200.jsonl", "--model", "deepseek-v4-flash",
            "--kv-memory", "40GiB", "--engine", "vllm-0.34")
    assert r.code == 0 and "vllm-0.34 (vLLM 0.34.0), its scheduler and KV cache manager replayed" in r.out
    for old in ("vllm-0.28", "vllm-0.27", "vllm-0.26", "vllm-0.25"):  # their schedulers differ from 0.33's: refused
        r = csa("simulate", "examples/traces/mooncake_conversation_head200.jsonl", "--model", "deepseek-v4-flash",
                "--kv-memory", "40GiB", "--engine", old)
        text = r.err if r.err.strip() else r.out
        assert r.code == 2 and f"{old}'s start-up is modelled" in text and "use --engine vllm-0.33" in text


def test_the_cli_says_which_rules_a_named_version_runs(csa):
    r = csa("check", "deepseek-v4-flash", "--max-seq-len", "1M", "--engine", "vllm-0.30.1", "--kv-memory", "40GiB")
    assert r.code == 0 and "vllm-0.33 (vLLM 0.33.0)" in r.out
    assert "note: vllm-0.30.1: modelled by vllm-0.33's rules" in r.err
    r = csa("check", "deepseek-v4-flash", "--max-seq-len", "1M", "--engine", "vllm-0.28", "--kv-memory", "40GiB")
    assert r.code == 0 and "vllm-0.28 (vLLM 0.28.0)" in r.out and "note: vllm-0.28" not in r.err
    r = csa("check", "deepseek-v4-flash", "--max-seq-len", "1M", "--engine", "vllm-0.27.1", "--kv-memory", "40GiB")
    assert r.code == 0 and "vllm-0.27 (vLLM 0.27.0)" in r.out
    assert "note: vllm-0.27.1: modelled by vllm-0.27's rules" in r.err


def _doc_rows() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "engine-releases.md").read_text()
    section = text.split("## Every vLLM release, mapped to the rules it runs", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    return [(a.strip(), b.strip()) for a, b in rows[1:]]


def _probe(cell: str) -> str:
    """A version inside a table row's range ("0.22.0 - 0.25.x" -> 0.22.0; "up to 0.19.x" -> 0.19.0)."""
    m = re.search(r"(\d+\.\d+)\.(\d+|x)", cell)
    assert m, cell
    v = f"{m[1]}.{0 if m[2] == 'x' else m[2]}"
    return f"{m[1]}.{int(m[2] if m[2] != 'x' else 0) + 1}.0" if cell.startswith("after") else v


def test_the_docs_table_is_the_code():
    rows = _doc_rows()
    assert len(rows) == len(ROWS) + 2  # + before V4, + after the newest
    for cell, engine in rows:
        version = _probe(cell)
        expected = re.search(r"`(vllm-[\d.]+)`", engine)
        if expected:
            assert resolve_engine_name(f"vllm-{version}")[0] == expected[1], cell
        else:
            with pytest.raises(BadInput):
                get_engine(f"vllm-{version}")
