"""csa-plan simulate through the real entry point: exit codes (CONTRACT §6) and one-line errors."""

from __future__ import annotations

import pytest

from helpers import EXAMPLES

SAMPLE = str(EXAMPLES / "traces" / "azure_conv_sample_200.csv")
JSONL = str(EXAMPLES / "traces" / "sample.jsonl")
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def test_every_request_admitted_exits_0(csa):
    r = csa("simulate", JSONL, "--model", "deepseek-v4-pro", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["schema"] == "csa-plan/simulate/v1"
    assert doc["requests"]["admitted"] == 5 and doc["memory"]["unlimited"] is True
    assert doc["devices"][0]["peak_bytes"] == 5 * 5_473_376_512 and doc["baseline_ok"] is True


def test_some_request_refused_exits_3_with_reasons(csa):
    r = csa("simulate", SAMPLE, "--model", "deepseek-v4-pro", "--tp", "8", "--device-memory", "h200",
            "--weights", "0", "--reserved", "120GiB", "--verify", "--json")
    assert r.code == 3, r.err
    doc = r.json()
    assert doc["requests"]["refusals"]["OutOfMemory"] == doc["requests"]["refused"] > 0
    assert doc["verified_against_ledger_replay"] is True and doc["devices"][7]["final_bytes"] == 0


def test_queue_reports_waits_and_human_output(csa):
    r = csa("simulate", SAMPLE, "--model", "deepseek-v4-pro", "--tp", "8", "--device-memory", "h200",
            "--weights", "0", "--reserved", "120GiB", "--policy", "queue", "--verify")
    assert r.code == 0, r.err
    assert "wait: p50" in r.out and "identical to the event-by-event ledger replay" in r.out
    assert "every device back at baseline" in r.out


def test_request_longer_than_max_seq_len_exits_3(csa):
    r = csa("simulate", JSONL, "--model", "deepseek-v4-pro", "--max-seq-len", "65536", "--json")
    assert r.code == 3
    assert r.json()["requests"]["refusals"] == {"RequestExceedsCapacity": 1}


def test_mix_spec_runs_on_its_own_and_options_override_it(csa):
    mix = str(EXAMPLES / "mixes" / "chat-h200.yaml")
    r = csa("simulate", mix, "--json")
    assert r.code == 0 and r.json()["deployment"]["tp"] == 8  # the default budget at 128K: all admitted (issue 23)
    r = csa("simulate", mix, "--reserve", "fit", "--json")
    assert r.code == 0 and r.json()["reserve"]["mode"] == "fit"


def test_find_capacity(csa):
    r = csa("simulate", SAMPLE, "--model", "deepseek-v4-pro", "--tp", "8", "--device-memory", "h200",
            "--weights", "0", "--reserved", "120GiB", "--find-capacity", "--json")
    assert r.code == 0, r.err
    cap = r.json()["capacity"]
    assert 0 < cap["rate_scale"] < 1 and r.json()["requests"]["refused"] == 0


def test_plot_without_matplotlib_is_bad_input_before_any_work(csa, tmp_path, monkeypatch):
    """One behaviour for every --plot (issue 12): without matplotlib, exit 2 with the install hint
    (the [plot] extra intact), nothing written; with it, the PNG and the path it went to."""
    path = tmp_path / "r.png"
    r = csa("simulate", JSONL, "--model", "deepseek-v4-pro", "--plot", str(path))
    assert r.code == 0
    try:
        import matplotlib  # noqa: F401
        assert path.exists() and f"plot written to {path}" in r.out
    except ImportError:
        assert r.code == 2
    import csa_plan.cli.plots as plots

    monkeypatch.setattr(plots, "plotting_available", lambda: False)
    path.unlink(missing_ok=True)
    r = csa("simulate", JSONL, "--model", "deepseek-v4-pro", "--plot", str(path))
    assert r.code == 2 and "pip install 'csa-plan[plot]'" in r.err and not path.exists(), r.err


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


BAD_TRACES = {
    "malformed_row": (HEADER + "2023-11-16 18:15:46.1,1,1\n2023-11-16 18:15:47.1,2\n", "t.csv:3"),
    "negative_tokens": (HEADER + "2023-11-16 18:15:46.1,-4,1\n", "t.csv:2: ContextTokens: token count is negative"),
    "non_numeric_tokens": (HEADER + "2023-11-16 18:15:46.1,4,lots\n", "t.csv:2: GeneratedTokens"),
    "empty_trace": (HEADER, "empty trace"),
    "unsorted": (HEADER + "5,1,1\n4,1,1\n", "t.csv:3: arrival is earlier than line 2's"),
}


@pytest.mark.parametrize("case", list(BAD_TRACES))
def test_bad_traces_exit_2_in_one_line(csa, tmp_path, case):
    text, words = BAD_TRACES[case]
    r = csa("simulate", write(tmp_path, "t.csv", text), "--model", "deepseek-v4-pro")
    assert r.code == 2
    assert words in r.err and r.err.count("\n") == 1 and "Traceback" not in r.err


def test_unsorted_trace_is_accepted_with_sort(csa, tmp_path):
    r = csa("simulate", write(tmp_path, "t.csv", HEADER + "5,1,1\n4,1,1\n"), "--model", "deepseek-v4-pro",
            "--sort", "--json")
    assert r.code == 0 and r.json()["workload"]["notes"]


MIX_BASE = "model: deepseek-v4-pro\nrequests: 10\nclasses:\n  - rate: {rate}\n    prompt: {prompt}\n    output: {{dist: fixed, value: 5}}\n"


@pytest.mark.parametrize("rate,prompt,words", [
    ("1", "{dist: pareto, a: 2}", "classes[0].prompt.dist: unknown distribution 'pareto'"),
    ("0", "{dist: fixed, value: 5}", "classes[0].rate: must be positive"),
])
def test_bad_mixes_exit_2(csa, tmp_path, rate, prompt, words):
    r = csa("simulate", write(tmp_path, "m.yaml", MIX_BASE.format(rate=rate, prompt=prompt)))
    assert r.code == 2 and words in r.err and r.err.count("\n") == 1


@pytest.mark.parametrize("args,words", [
    (["--device-memory", "h200", "--reserved", "200GB"], "--reserved"),
    (["--device-memory", "80GiB", "--reserved", "80GiB"], "at or above the device memory"),
    (["--rate-scale", "0"], "--rate-scale: must be positive"),
    (["--rate-scale", "nan"], "--rate-scale"),
    (["--tpot-ms", "-1"], "--tpot-ms"),
    (["--bucket", "0", "--reserve", "fit"], "--bucket"),
    (["--tp", "3"], "not divisible by tp 3"),
    (["--pp", "70"], "--pp"),
    (["--find-capacity"], "needs --device-memory"),
    (["--policy", "queue", "--device-memory", "h200", "--find-capacity"], "--max-wait"),
    (["--tp", "-1"], "-1 is negative"),
])
def test_bad_options_exit_2(csa, args, words):
    r = csa("simulate", JSONL, "--model", "deepseek-v4-pro", *args)
    assert r.code == 2, r.out
    assert words in r.err and r.err.count("\n") == 1 and "Traceback" not in r.err


def test_missing_model_and_unknown_workload_type_exit_2(csa, tmp_path):
    r = csa("simulate", JSONL)
    assert r.code == 2 and "--model" in r.err
    r = csa("simulate", write(tmp_path, "w.txt", "x"), "--model", "deepseek-v4-pro")
    assert r.code == 2 and "unknown workload type" in r.err
