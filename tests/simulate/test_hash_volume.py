"""Issue 47 leftover: a trace of more distinct prefix-block ids than an engine replay keeps is served by the
ledger (the ids summarised: sorted in place for the distinct count, then dropped), refused by an engine
replay naming MAX_REPLAY_HASH_IDS, and a trace past MAX_TRACE_HASH_IDS is still refused as it is read.
Full size (32.8M ids, 325 MB): ``benchmarks/bench_hash_volume.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from csa_plan.planner.workloads import load_workload
from csa_plan.planner.workloads import jsonl_trace, workload


def _trace(path: Path, rows: int, per: int, repeat: int = 0) -> str:
    with open(path, "w") as f:
        for i in range(rows):
            ids = [i * per + k for k in range(per)] + list(range(repeat))
            f.write(json.dumps({"timestamp": i * 1000, "input_length": 512 * len(ids), "output_length": 4,
                                "hash_ids": ids}) + "\n")
    return str(path)


def test_past_the_replay_bound_the_ids_are_summarised_not_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(jsonl_trace, "MAX_REPLAY_HASH_IDS", 1000)
    wl = load_workload(_trace(tmp_path / "t.jsonl", 300, 4, repeat=2))
    p = wl.trace.prefix
    assert (p.blocks, p.kept, wl.hash_ids, wl.hash_offsets) == (1800, False, None, None)
    assert p.shared_blocks == 1800 - 1200  # ids 0 and 1 repeat in every row after the first
    small = load_workload(_trace(tmp_path / "s.jsonl", 100, 4, repeat=2))
    assert small.trace.prefix.kept and len(small.hash_ids) == 600
    assert small.trace.prefix.shared_blocks == 600 - 400


def test_the_ledger_serves_it_and_an_engine_replay_refuses_it(csa, tmp_path):
    path = _trace(tmp_path / "v.jsonl", 6_400, 328)  # 2.1M ids: past MAX_REPLAY_HASH_IDS
    r = csa("simulate", path, "--model", "deepseek-v4-flash", "--json")
    assert r.code == 0, r.err
    assert any("MAX_REPLAY_HASH_IDS" in n for n in r.json()["workload"]["notes"])
    for engine in ("vllm-0.33", "sglang-0.5.23"):
        e = csa("simulate", path, "--model", "deepseek-v4-flash", "--engine", engine, "--device-memory", "h200",
                "--tp", "2")
        assert e.code == 2 and "MAX_REPLAY_HASH_IDS" in e.err and len(e.err.splitlines()) == 1, e.err


def test_past_the_trace_bound_it_is_refused_as_read(tmp_path, monkeypatch):
    from csa_plan.planner.errors import BadInput

    monkeypatch.setattr(jsonl_trace, "MAX_TRACE_HASH_IDS", 1000)
    with pytest.raises(BadInput, match="MAX_TRACE_HASH_IDS"):
        load_workload(_trace(tmp_path / "t.jsonl", 300, 4))
    assert workload.MAX_TRACE_HASH_IDS >= 1 << 26 > 32_800_000
