"""What a new user still hit (issue 36 items 8-11): each line says what is true, in words that add up.

Each test is one item of the issue, as the user saw it on the old main and as it reads now.
"""

from __future__ import annotations

import re

from helpers import EXAMPLES

SAMPLE = str(EXAMPLES / "traces" / "azure_conv_sample_200.csv")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def test_kv_memory_is_said_to_replace_the_budget_not_summed_wrongly(csa):
    """Item 8: `usable 135,679,338,086 - weights 39,982,633,308 - reserves 536,870,912 = 12,884,901,888 B`
    did not add up: --kv-memory replaced the steps. Now the line says so, as check does."""
    args = ("simulate", SAMPLE, "--model", "deepseek-v4-flash", "--engine", "vllm-0.33", "--device-memory", "h200",
            "--tp", "2")
    given = _one_line(csa(*args, "--kv-memory", "12GiB").out)
    assert ("device limit = the state pool per GPU (vllm-0.33): --kv-memory 12,884,901,888 B "
            "(replaces usable - weights - reserves)") in given
    assert "usable" not in given.split("device limit =")[1].split("replaces")[0]
    derived = _one_line(csa(*args).out)
    m = re.search(r"usable ([\d,]+) - weights ([\d,]+) - reserves ([\d,]+) = ([\d,]+) B", derived)
    usable, weights, reserves, pool = (int(g.replace(",", "")) for g in m.groups())
    assert usable - weights - reserves == pool  # the sum shown is the sum


def test_compare_per_request_has_one_meaning_and_no_count_is_not_fits(csa):
    """Item 9: vllm-0.33's "per request" read 5.51 GiB without a device (a decoding request) and
    14.41 GiB with one (its admission charge); `compare --brief` said FITS while every row said "no
    count". Now "per request" is the table's figure everywhere and the charge is named as such."""
    bare = csa("compare", "deepseek-v4-pro", "--brief")
    assert bare.code == 0
    assert bare.out.splitlines()[0].startswith("deepseek-v4-pro at max_seq_len 1,048,576: ADMITTED (exit 0)")
    assert "FITS" not in bare.out
    assert csa("compare", "deepseek-v4-pro", "--json").json()["verdict"] == "admitted"
    line = lambda out: next(_one_line(l) for l in out.splitlines() if l.strip().startswith("vllm-0.33:"))
    without = line(csa("compare", "deepseek-v4-pro", "--engine", "vllm-0.33").out)
    assert without.endswith("5,919,060,096 (5.51 GiB) per decoding request (engine: vllm-0.33)")
    with_device = line(csa("compare", "deepseek-v4-pro", "--engine", "vllm-0.33", "--device-memory", "h200",
                           "--tp", "8").out)
    assert with_device.endswith("5,919,060,096 (5.51 GiB) per decoding request, 15,476,863,104 (14.41 GiB) "
                                "charged per request at admission (engine: vllm-0.33)")


def test_no_wider_tp_is_searched_past_the_heads_and_replicas_are_offered(csa):
    """Item 10: `no deployment up to --tp 256 passes every check` for 64 requests of V4-Pro: widening
    tp cannot help (each rank keeps the full latent state) and tp 256 exceeds the 128 heads. The search
    now stops at the heads and offers the data-parallel replicas that hold the 64."""
    r = csa("check", "deepseek-v4-pro", "--device-memory", "h200", "--tp", "8", "--max-seq-len", "1M", "--concurrency",
            "64", "--json")
    assert r.code == 3
    head = r.json()["head"]
    assert head["smallest_fitting"] == [] and head["searched_max_tp"] == 128
    assert head["replicas"] == {"tp": 8, "pp": 1, "dp": 11, "gpus": 88, "per_replica": 6, "in_all": 66}
    text = _one_line(csa("check", "deepseek-v4-pro", "--device-memory", "h200", "--tp", "8", "--max-seq-len", "1M", "--concurrency",
                         "64").out)
    assert "no --tp up to 128 (the model's attention heads) passes every check" in text and "256" not in text
    assert "data-parallel replicas instead: --tp 8 --dp 11 (88 GPUs) admit 6 per replica, 66 in all" in text
    # the replicas suggested do admit 6 each
    six = csa("check", "deepseek-v4-pro", "--device-memory", "h200", "--tp", "8", "--dp", "11", "--concurrency", "6")
    assert six.code == 0


def test_engine_names_as_the_engines_print_them(csa):
    """Item 11: `--engine vllm-0.33.0` (what `vllm --version` prints) and `vLLM-0.33` were refused."""
    for spelled, canonical in (("vllm-0.33.0", "vllm-0.33"), ("vLLM-0.33", "vllm-0.33"),
                               ("SGLang-0.5.23", "sglang-0.5.23")):
        r = csa("check", "deepseek-v4-flash", "--engine", spelled, "--json")
        assert r.code == 0, r.err
        assert r.json()["head"]["engine"].startswith(canonical + " ")


def test_a_global_option_after_the_command_says_where_it_goes(csa):
    """Item 11: `check ... --color never` gave `No such option` with no hint."""
    r = csa("check", "deepseek-v4-pro", "--color", "never")
    assert r.code == 2
    assert r.err.strip() == ("csa-plan: error: No such option '--color'. (--color is an option of csa-plan itself, "
                             "given before the command: csa-plan --color auto|always|never check ...)")
    assert "option of csa-plan itself" not in csa("check", "deepseek-v4-pro", "--colr", "never").err


def test_no_suggestion_of_another_model_or_release(csa):
    """Item 11: `check deepseek-v3` suggested deepseek-v4-pro, `--engine vllm-0.8.5` suggested vllm-0.25:
    other models and releases, not typos. A typo with the same digits still gets its suggestion."""
    assert "did you mean" not in csa("check", "deepseek-v3").err
    assert "did you mean" not in csa("check", "deepseek-v4-pro", "--engine", "vllm-0.8.5").err
    assert "did you mean 'deepseek-v4-pro'?" in csa("check", "deepseek-v4-prp").err
    assert "did you mean 'vllm-0.33'?" in csa("check", "deepseek-v4-pro", "--engine", "vlm-0.33").err


def test_piped_answer_lines_are_whole():
    """Item 11: piped output wrapped the answer lines at 80 columns (`grep Longest` lost half a line)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    run = subprocess.run([sys.executable, "-c", "from csa_plan.cli.entry import main; main()", "check",
                          "deepseek-v4-pro", "--device-memory", "h200", "--tp", "8", "--max-seq-len", "1M", "--concurrency", "64"],
                         capture_output=True, text=True, env=env)
    refusal = [l for l in run.stdout.splitlines() if l.startswith("fit refusal StatePoolTooSmall")]
    assert refusal == ["fit refusal StatePoolTooSmall (--concurrency): 64 requests of 1,048,576 tokens do not fit: "
                       "layout: exact admits 6; the longest max_seq_len for 64 is 106,472"]


def test_a_refused_engine_run_does_not_print_csa_plans_reservation_settings(csa):
    """Item 11: engine replays printed `reserve max; policy refuse`, which do not apply to them."""
    r = csa("simulate", str(EXAMPLES / "mixes" / "million-requests-vllm.yaml"), "--engine", "sglang-0.5.23")
    assert r.code == 3
    limit = next(l for l in r.out.splitlines() if "limit per device" in l)
    assert "reserve" not in limit and "policy" not in limit
    own = csa("simulate", SAMPLE, "--model", "deepseek-v4-flash", "--device-memory", "h200", "--tp", "2")
    assert "; reserve max; policy refuse;" in _one_line(own.out)


def test_the_sweep_plot_labels_several_ticks_and_keeps_cards_apart(monkeypatch, tmp_path):
    """Item 11: the sweep plot's log axis labelled one tick, and points of different cards hid each other."""
    import pytest

    pytest.importorskip("matplotlib", reason="--plot draws only with the [plot] extra")
    from csa_plan.cli import plots

    def point(key, card, devices, rate):
        return {"key": key, "point": {"device": card}, "devices": devices, "sustainable_rate_per_s": rate,
                "rate_limited_by_memory": True, "at_least": False, "feasible": True, "label": key}

    results = [point("a", "h100", 8, 12.0), point("b", "h200", 8, 12.0), point("c", "h200", 16, 30.0)]
    report = {"results": results, "pareto_front": ["a", "c"], "not_limited_by_memory": [],
              "spec": {"name": "t"}, "grid": {"ran": 3, "resumed": 0, "skipped": 0}}
    figs = []
    monkeypatch.setattr(plots, "_save", lambda fig, path, **kw: figs.append(fig))
    assert plots.plot_sweep(report, str(tmp_path / "p.png")) is None
    ax = figs[0].axes[0]
    ax.figure.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text() and ax.get_ylim()[0] <= t.get_position()[1]
              <= ax.get_ylim()[1]]
    assert len(labels) >= 2, labels  # 12 to 30 req/s lies within one decade
    spots = [tuple(xy) for c in ax.collections for xy in c.get_offsets()]
    at_8 = sorted(x for x, y in spots if abs(y - 12.0) < 1e-9 and 7 < x < 9)
    assert len(at_8) >= 2 and len(set(at_8)) == len(at_8)  # the two cards' equal points side by side
    assert {t.get_text() for t in ax.get_legend().get_texts()} >= {"feasible, h100", "feasible, h200"}
