"""Issue 23's remaining gaps, each failing on the main before them: simulate's refusal document, the rate
search's int64 floor, one vLLM batch-size rule, and the answer first in compare and sweep."""

from __future__ import annotations

import json

from helpers import EXAMPLES

PRO = "deepseek-v4-pro"
H200_8 = ("--device-memory", "h200", "--tp", "8")
JSONL = str(EXAMPLES / "traces" / "sample.jsonl")
SMALL_SWEEP = str(EXAMPLES / "sweeps" / "small.yaml")


# -- simulate: an engine that refuses writes its document ---------------------------------------


def test_simulate_engine_refusal_writes_its_json_document(csa):
    r = csa("simulate", JSONL, "--model", PRO, *H200_8, "--engine", "vllm-0.33", "--indexer-kv-dtype", "mxfp4",
            "--json")
    assert r.code == 3
    doc = r.json()  # was: no document, one error line on stderr
    assert doc["exit_code"] == 3 and doc["engine_refusal"]["type"] == "EngineRefused"
    assert doc["engine_refusal"]["setting"] == "--indexer-kv-dtype" and "sm_10x" in doc["engine_refusal"]["message"]
    assert [x["kind"] for x in doc["all_refusals"]] == ["configuration"]
    assert doc["all_refusals"][0]["type"] == "EngineRefused"
    fit = doc["fit"]
    assert fit["authority"] == "engine: vllm-0.33" and fit["requests_that_fit"] is None and not fit["answered"]
    assert "requests" not in doc  # nothing was replayed
    text = csa("simulate", JSONL, "--model", PRO, *H200_8, "--engine", "vllm-0.33", "--indexer-kv-dtype", "mxfp4")
    assert text.code == 3 and "REFUSED (exit 3)" in text.out and "sm_10x" in " ".join(text.out.split())


# -- the rate search stays inside the int64 clock -----------------------------------------------


def _overlapping_long_trace(tmp_path):
    """Two requests 1 µs apart that cannot be held together, and a third an hour later: no rate
    scale has zero refusals, and the span puts the clock's floor (3,600 s / 2^61) above 2^-20."""
    rows = [{"arrival_s": 0.0, "prompt_tokens": 4000, "output_tokens": 4000},
            {"arrival_s": 1e-6, "prompt_tokens": 4000, "output_tokens": 4000},
            {"arrival_s": 3600.0, "prompt_tokens": 10, "output_tokens": 10}]
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_rate_search_stops_at_the_clock_floor_and_says_so(csa, tmp_path):
    from csa_plan.planner.reserve.capacity import CLOCK_FLOOR
    from csa_plan.planner.bisection import SCALE_MIN
    from csa_plan.planner.clock import MAX_SIM_NS

    trace = _overlapping_long_trace(tmp_path)
    per_request = 5_473_376_512  # V4-Pro at its max_seq_len, per device at tp 8: one fits, two do not
    r = csa("simulate", trace, "--model", PRO, "--tp", "8", "--device-memory", "141GB", "--weights", "0",
            "--reserved", str(141 * 10**9 - per_request - per_request // 2), "--find-capacity", "--json")
    assert r.code == 3, r.err  # was exit 2: "--rate-scale: makes simulated times exceed the int64 clock"
    cap = r.json()["capacity"]
    floor = cap["floor_rate_scale"]
    assert cap["rate_scale"] is None and cap["floor"] == CLOCK_FLOOR
    assert floor > SCALE_MIN and 3600e9 / floor <= MAX_SIM_NS
    assert min(p["rate_scale"] for p in cap["probes"]) == floor  # the floor itself was probed, nothing below
    assert "no rate scale down to" in csa("simulate", trace, "--model", PRO, "--tp", "8", "--device-memory",
                                          "141GB", "--weights", "0", "--reserved",
                                          str(141 * 10**9 - per_request - per_request // 2),
                                          "--find-capacity").out


def test_azure_sweep_needs_no_min_scale_workaround():
    import yaml

    spec = yaml.safe_load((EXAMPLES / "sweeps" / "azure-200.yaml").read_text())
    assert "min_scale" not in spec["search"]


# -- one vLLM batch-size default rule -----------------------------------------------------------


def test_budget_takes_vllms_batch_default_from_the_engine_rule():
    from csa_plan.planner.budget.deployment import Deployment, deployment_budget
    from csa_plan.planner.cards import CardBytes, card
    from csa_plan.planner.engines.settings import EngineSettings, gpu_target
    from csa_plan.planner.engines.vllm.startup import default_batched_tokens

    for name in ("a100-80gb", "h100", "h200", "b200"):
        memory = CardBytes(card(name))
        b = deployment_budget("deepseek-v4-flash", memory, Deployment(tp=8), 65_536, "vllm-0.33",
                              EngineSettings(gpu=name, gpu_memory_bytes=int(memory)), search=False)
        want = default_batched_tokens(gpu_target(name, memory_bytes=int(memory)), "serve")[0]
        assert b.resolved["max_num_batched_tokens"]["value"] == want, name
    # vLLM matches "a100" in the device name: an 80 GB A100 stays on the small tier (was 8,192 in the budget)
    assert default_batched_tokens(gpu_target("a100-80gb"), "serve")[0] == 2048


# -- compare and sweep: the answer first, one typed head read by both renderers ---------------


def test_compare_answers_first_and_the_head_is_the_table(csa):
    r = csa("compare", PRO, *H200_8, "--max-seq-len", "1M", "--json")
    doc = r.json()
    head = doc["head"]  # was: no head
    assert doc["verdict"] == head["verdict"] and head["exit_code"] == r.code == doc["exit_code"]
    by_row = {p["profile"]: p for p in doc["profiles"]}
    assert [x["profile"] for x in head["rows"]] == list(by_row)
    for x in head["rows"]:
        row = by_row[x["profile"]]
        if row["pool_refused"]:  # an engine that refuses to start gives no count
            assert x["requests_that_fit"] is None and row["pool_refused"] in x["no_answer"]
        else:
            assert x["requests_that_fit"] == row["requests_that_fit"]
        assert x["authority"] == row["authority"]
    top = max(x["requests_that_fit"] for x in head["rows"] if x["requests_that_fit"] is not None)
    assert head["most"] == [x["profile"] for x in head["rows"] if x["requests_that_fit"] == top]
    text = csa("compare", PRO, *H200_8, "--max-seq-len", "1M")
    first = text.out.splitlines()[0]
    assert first.startswith(PRO) and ("DOES NOT FIT" in first if r.code else "FITS" in first)
    lines = " ".join(text.out.split())
    vllm = next(x for x in head["rows"] if x["profile"] == "vllm-0.33")
    assert f"vllm-0.33: {vllm['requests_that_fit']:,} request" in lines
    assert any(x["no_answer"] for x in head["rows"]) == ("no count:" in lines)
    # onnx-genai charges one buffer set per request: the count is the pool over that charge
    onnx = by_row["onnx-genai"]
    assert onnx["requests_that_fit"] == onnx["limit_bytes"] // onnx["charge_bytes"]  # was 1 at 6 x the charge
    brief = csa("compare", PRO, *H200_8, "--max-seq-len", "1M", "--brief")
    assert brief.code == r.code and "State per request" not in brief.out and brief.out.splitlines()[0] == first


def test_sweep_answers_first_and_brief(csa):
    r = csa("sweep", SMALL_SWEEP, "-j", "1", "--json")
    doc = r.json()
    head = doc["head"]  # was: no head
    assert doc["verdict"] == head["verdict"] == ("answered" if r.code == 0 else "no_feasible_point")
    assert head["answer_key"] == doc["answer"]["key"] and head["devices"] == doc["answer"]["devices"]
    assert head["fit"] == doc["answer"]["fit"] and head["feasible"] == doc["grid"]["feasible"]
    text = csa("sweep", SMALL_SWEEP, "-j", "1")
    assert text.out.splitlines()[0].startswith("answer: ")
    brief = csa("sweep", SMALL_SWEEP, "-j", "1", "--brief")
    assert brief.code == r.code and "Pareto" not in brief.out and "ranked" not in brief.out
    assert brief.out.splitlines()[0] == text.out.splitlines()[0]


# -- SGLang's admission counts its full pages only (found by tools/crosscheck_answers.py) ------


def test_sglang_count_is_its_full_pages_over_a_requests_pages():
    """SGLang sizes its SWA pool for max_running_requests at start-up; a request draws on the full
    pages (cdiv(L, 256)). The count was taken with the SWA pages and the c128 slot in the divisor and
    used as ``used_units`` for ``admits``, which counts full pages: 63 where SGLang admits 64."""
    from csa_plan.planner.budget.admission import engine_admits
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.loaders.model_files import load_model

    settings = EngineSettings(gpu="b200", max_running_requests=64, chunked_prefill_size=16384)
    kv = 142_628_476_663  # Flash at tp 8 on a B200, the device budget at this length
    for length in (528_641, 131_072, 1_048_576, 4_097):
        plan = get_engine("sglang-0.5.23").configure(load_model("deepseek-v4-flash", max_seq_len=length), settings,
                                                     length)
        sizing = plan.size_pool(kv)
        pages = -(-length // 256)
        want = min(64, dict(sizing.extra)["max_total_num_tokens"] // 256 // pages)
        got = engine_admits(plan, sizing)
        assert got["count"] == want and got["units_per_request"] == pages, length


def test_simulate_answers_first_and_brief(csa):
    sample = str(EXAMPLES / "traces" / "azure_conv_sample_200.csv")
    args = ("simulate", sample, "--model", PRO, *H200_8, "--weights", "0", "--reserved", "120GiB")
    doc = csa(*args, "--json").json()
    text = csa(*args)
    first = text.out.splitlines()[0]
    req = doc["requests"]
    assert first.startswith("REFUSED (exit 3)") and f"{req['refused']:,} of {req['total']:,} requests refused" in first
    fit = doc["fit"]
    assert f"that fit the state pool: {fit['requests_that_fit']:,} ({fit['authority']})" in text.out.splitlines()[1]
    brief = csa(*args, "--brief")
    assert brief.code == text.code == 3 and brief.out.splitlines() == text.out.splitlines()[:2]
