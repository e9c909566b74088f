"""Issue 23: one budget, one admission rule, one answer in check, simulate, sweep and compare."""

from __future__ import annotations

import pytest

PRO, FLASH = "deepseek-v4-pro", "deepseek-v4-flash"

# (model, engine, device, tp, dp, max_seq_len): 20 points over both models, every engine, three cards
POINTS = [
    (FLASH, "vllm-0.33", "h200", 8, 1, 1_048_576),
    (FLASH, "vllm-0.33", "h200", 4, 1, 262_144),
    (FLASH, "vllm-0.33", "h200", 2, 2, 131_072),
    (FLASH, "vllm-0.33", "b200", 4, 1, 1_048_576),
    (FLASH, "vllm-0.33", "h20", 8, 1, 65_536),
    (FLASH, "vllm-0.33", "h100", 8, 1, 200_000),
    (FLASH, "sglang-0.5.23", "h200", 8, 1, 1_048_576),
    (FLASH, "sglang-0.5.23", "h200", 4, 1, 131_072),
    (FLASH, "sglang-0.5.23", "b200", 4, 1, 262_144),
    (FLASH, None, "h200", 4, 1, 1_048_576),
    (FLASH, None, "h200", 2, 2, 300_000),
    (FLASH, None, "h100", 8, 1, 131_072),
    (PRO, "vllm-0.33", "h200", 8, 1, 1_048_576),
    (PRO, "vllm-0.33", "b200", 8, 1, 524_288),
    (PRO, "vllm-0.33", "h200", 8, 2, 65_536),
    (PRO, "sglang-0.5.23", "b200", 8, 1, 1_048_576),
    (PRO, "sglang-0.5.23", "h200", 8, 1, 131_072),
    (PRO, None, "h200", 8, 1, 1_048_576),
    (PRO, None, "b200", 8, 1, 262_144),
    (PRO, None, "h200", 8, 2, 100_000),
]


def _triple(cap):
    return cap["kv_memory_bytes"], cap["per_request_bytes"], cap["requests_that_fit"]


def _check(csa, model, engine, device, tp, dp, length):
    args = ["check", model, "--device-memory", device, "--tp", str(tp), "--dp", str(dp), "--max-seq-len",
            str(length), "--json"] + (["--engine", engine] if engine else [])
    return csa(*args).json()["fit"]


def _simulate(csa, tmp_path, model, engine, device, tp, dp, length):
    trace = tmp_path / "one.csv"
    trace.write_text(f"arrival_s,prompt_tokens,output_tokens\n0.0,{length - 1},1\n")
    args = ["simulate", str(trace), "--model", model, "--device-memory", device, "--tp", str(tp), "--dp", str(dp),
            "--max-seq-len", str(length), "--json"] + (["--engine", engine] if engine else [])
    r = csa(*args)
    doc = r.json()
    if doc["schema"] == "csa-plan/error/v1":  # refused before any simulation: the error document
        return {"exit_code": r.code, "fit": None, "error": r.err}
    return doc


def _sweep(csa, tmp_path, model, engine, device, tp, dp, length):
    trace = tmp_path / "one.csv"
    trace.write_text(f"arrival_s,prompt_tokens,output_tokens\n0.0,{length - 1},1\n")
    spec = tmp_path / "one-point.yaml"
    spec.write_text(f"name: one\nworkload: {trace}\ngrid:\n  model: {model}\n  device: {device}\n  tp: {tp}\n"
                    f"  dp: {dp}\n  max_seq_len: {length}\n  engine: {engine or 'null'}\n"
                    "objective: fewest_devices\nsearch: {rel_tol: 0.5}\n"
                    + ("constraints: {wait_p99_max_s: 60}\n" if engine else ""))  # an engine queues: a wait bound
    doc = csa("sweep", str(spec), "--json").json()
    return doc


def _compare(csa, model, engine, device, tp, dp, length):
    args = ["compare", model, "--device-memory", device, "--tp", str(tp), "--dp", str(dp), "--max-seq-len",
            str(length), "--json"] + (["--engine", engine] if engine else ["--layout", "exact"])
    doc = csa(*args).json()
    row = next(r for r in doc["profiles"] if r["profile"] == (engine or "exact"))
    return row["limit_bytes"], row["charge_bytes"], row["requests_that_fit"]


@pytest.mark.parametrize("point", POINTS, ids=lambda p: "-".join(str(x) for x in p))
def test_four_commands_give_one_answer(csa, tmp_path, point):
    model, engine, device, tp, dp, length = point
    check = _check(csa, *point)
    assert check["authority"] == (f"engine: {engine}" if engine else "layout: exact")
    kv, per, count = _triple(check)
    sim = _simulate(csa, tmp_path, *point)
    if not check["answered"]:  # the engine refuses, or no pool: nobody gives a count
        assert sim["fit"] is None or sim["fit"]["requests_that_fit"] is None
        assert sim["exit_code"] == 3
        return
    sweep = _sweep(csa, tmp_path, *point)
    comp = _compare(csa, *point)
    assert _triple(sim["fit"]) == (kv, per, count)
    assert sim["budget"]["kv_memory_bytes"] == kv
    results = sweep["results"]
    assert len(results) == 1 and _triple(results[0]["fit"]) == (kv, per, count)
    assert results[0]["point"]["limit_bytes"] == kv
    assert comp == (kv, per, count)


def test_sweep_sizes_the_pool_as_simulate_does(csa, tmp_path):
    """Issue 23 case 3: sweep with an engine sized the pool from the whole card (65.0 / 101.6 / 120.0 GiB
    at tp 2 / 4 / 8); it is the engine's budget now, the same as simulate --engine."""
    for tp in (2, 4, 8):
        sweep = _sweep(csa, tmp_path, FLASH, "vllm-0.33", "h200", tp, 1, 1_048_576)
        sim = _simulate(csa, tmp_path, FLASH, "vllm-0.33", "h200", tp, 1, 1_048_576)
        assert sweep["results"][0]["point"]["limit_bytes"] == sim["budget"]["kv_memory_bytes"]
    gib = sweep["results"][0]["point"]["limit_bytes"] / (1 << 30)
    # tp 8: simulate's 104.2 GiB (103.8 before the shared workspace, 105.4 with the flat 2 GiB), not the card's 120.0
    assert round(gib, 1) == 104.2
