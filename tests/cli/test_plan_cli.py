"""csa-plan plan (issue 45): a rate and SLO bounds in; GPUs per card, the shape and its launch out."""

from __future__ import annotations

import pytest

from csa_plan.planner.commands.plan import parse_duration_s


def test_durations_as_people_write_them():
    assert parse_duration_s("2s", "--ttft-p99") == 2.0
    assert parse_duration_s("50ms", "--tpot-p99") == pytest.approx(0.05)
    assert parse_duration_s("1.5", "--ttft-p99") == 1.5
    from csa_plan.planner.errors import BadInput

    for bad in ("fast", "-1s", "0ms", "nan"):
        with pytest.raises(BadInput):
            parse_duration_s(bad, "--tpot-p99")


def test_plan_needs_a_bound(csa):
    r = csa("plan", "deepseek-v4-flash", "--rate", "1", "--isl", "1024", "--osl", "128")
    assert r.code == 2 and "--ttft-p99" in r.err


def test_plan_answers_per_card_with_the_launch_command(csa):
    """One card, one shape family: the fewest GPUs that serve 2 req/s of 2K/256 within TPOT p99 <= 200 ms,
    the search stopping at the first count that serves, the answer's launch command in vLLM's words."""
    r = csa("plan", "deepseek-v4-flash", "--rate", "2", "--isl", "2048", "--osl", "256", "--tpot-p99", "200ms",
            "--device", "b200", "--tp", "2,4", "--max-dp", "2", "--requests", "600", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["schema"] == "csa-plan/plan/v1"
    a = doc["answer"]
    assert a is not None and a["feasible"] and a["device"] == "b200" and a["tpot_p99_s"] <= 0.2
    assert a["steady"].startswith("steady — window")
    assert a["launch"]["argv"][:3] == ["vllm", "serve", "deepseek-ai/DeepSeek-V4-Flash"]
    assert a["launch"]["argv"][3:5] == ["--tensor-parallel-size", str(a["tp"])]
    card = doc["cards"][0]
    assert card["devices"] == a["devices"]
    assert all(s["devices"] <= a["devices"] for s in card["runners_up"])  # no larger count was replayed
    assert all(not s["feasible"] for s in card["runners_up"] if s["devices"] < a["devices"])


@pytest.mark.parametrize("search, why", [
    ("max_running_requests=64,128", "no engine planned reads it (vllm-0.33)"),  # SGLang's, on vLLM
    ("usage=serve,llm", "the replay does not distinguish its values"),
    ("max_num_seqs=64,64", "lists a value twice"),
    ("max_num_seqs", "expected NAME=V1,V2"),
    ("expert_parallel=on,off", "takes true and false"),
])
def test_a_search_axis_that_cannot_apply_is_refused_not_ignored(csa, search, why):
    r = csa("plan", "deepseek-v4-flash", "--rate", "1", "--isl", "1024", "--osl", "128", "--tpot-p99", "50ms",
            "--search", search)
    assert r.code == 2 and why in r.err and "Traceback" not in r.err


def test_a_searched_setting_is_run_on_each_shape_and_says_what_it_changes(csa):
    """MTP off and on as one search: each shape runs with each value, the answer names its settings and the
    launch carries them; a memory-only option is marked as one the step clock does not distinguish."""
    r = csa("plan", "deepseek-v4-flash", "--rate", "2", "--isl", "2048", "--osl", "256", "--tpot-p99", "200ms",
            "--device", "b200", "--tp", "4", "--max-dp", "1", "--requests", "400", "--json",
            "--search", "num_speculative_tokens=0,1", "--search", "kv_cache_dtype=auto")
    assert r.code in (0, 3), r.err
    doc = r.json()
    axes = {a["name"]: a for a in doc["question"]["search"]}
    assert axes["num_speculative_tokens"]["values"] == [0, 1]
    assert "step clock" in axes["num_speculative_tokens"]["changes"]
    assert "does not distinguish" in axes["kv_cache_dtype"]["changes"]
    shapes = doc["cards"][0]["runners_up"] + ([doc["cards"][0]["answer"]] if doc["cards"][0]["answer"] else [])
    assert sorted(s["settings"]["num_speculative_tokens"] for s in shapes) == [0, 1]
    for s in shapes:
        mtp = "--speculative-config" in s["launch"]["argv"]
        assert mtp == (s["settings"]["num_speculative_tokens"] == 1)


def test_plan_disaggregated_searches_layouts_beside_the_aggregated_shapes(csa):
    """--disaggregated (issue 46): every prefill tp x decode tp, each role 1 .. --max-dp workers or one worker of
    dp 2, 4 .. --max-dp, beside the
    aggregated shapes (dp every count up to --max-dp), GPUs over both roles; a layout's row says its layout and
    carries each role's command."""
    r = csa("plan", "deepseek-v4-flash", "--rate", "2", "--isl", "2048", "--osl", "256", "--tpot-p99", "200ms",
            "--device", "b200", "--tp", "2", "--max-dp", "2", "--requests", "300", "--disaggregated", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["question"]["disaggregated"] is True
    assert doc["grid_points"] == 2 + 9  # tp 2 x dp 1, 2; and (1, 2 workers or 1 worker of dp 2) for each role
    shapes = [doc["cards"][0]["answer"], *doc["cards"][0]["runners_up"]]
    for s in shapes:
        if s["disaggregation"] is None:
            assert s["layout"] == "aggregated" and s["launch"]["argv"][:2] == ["vllm", "serve"]
        else:
            assert s["layout"] == s["disaggregation"]["layout"]
            assert s["devices"] == s["disaggregation"]["prefill"]["gpus"] + s["disaggregation"]["decode"]["gpus"]
            assert set(s["launch"]) == {"prefill", "decode"}
            assert '"kv_role":"kv_producer"' in s["launch"]["prefill"]["text"]
            for role in ("prefill", "decode"):  # a role of dp 2 is started with its DP engine cores
                dp = s["disaggregation"][role]["dp"]
                assert ("--data-parallel-size" in s["launch"][role]["argv"]) == (dp > 1)
    text = csa("plan", "deepseek-v4-flash", "--rate", "2", "--isl", "2048", "--osl", "256", "--tpot-p99", "200ms",
               "--device", "b200", "--tp", "2", "--max-dp", "2", "--requests", "300", "--disaggregated").out
    assert "tp 1" not in text  # a layout (replayed or bounded out) is named by its roles, never its tp-1 point
    for s in shapes:
        if s["layout"] != "aggregated":
            assert f"GPUs, {s['layout']}" in text or f"GPUs — {s['layout']}" in text


def test_plan_without_disaggregated_keeps_its_grid(csa):
    r = csa("plan", "deepseek-v4-flash", "--rate", "2", "--isl", "2048", "--osl", "256", "--tpot-p99", "200ms",
            "--device", "b200", "--tp", "2", "--max-dp", "4", "--requests", "300", "--json")
    doc = r.json()
    assert doc["question"]["disaggregated"] is False and doc["grid_points"] == 3  # dp 1, 2, 4
    assert all(s["layout"] == "aggregated" for s in doc["cards"][0]["runners_up"] + [doc["answer"]])
