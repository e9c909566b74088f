"""``simulate --max-concurrency 1,4,16``: the throughput-interactivity frontier, one closed-loop replay per
concurrency (issue 44, item 7), through the real entry point."""

from __future__ import annotations

import pytest

from csa_plan.planner.serving.frontier import FrontierPoint, mark_frontier

MIX = """name: bench
seed: 1
requests: 48
model: deepseek-v4-flash
max_seq_len: 4096
classes:
  - name: fixed
    rate: 1000.0
    prompt: {dist: fixed, value: 2048}
    output: {dist: fixed, value: 64}
"""
DEPLOY = ("--gpu", "b200", "--tp", "4")


@pytest.fixture
def mix(tmp_path):
    path = tmp_path / "bench.yaml"
    path.write_text(MIX)
    return str(path)


def test_each_point_is_the_single_concurrency_run(csa, mix):
    r = csa("simulate", mix, *DEPLOY, "--engine", "vllm-0.33", "--max-concurrency", "1,4,16", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    fr = doc["frontier"]
    assert fr["concurrencies"] == [1, 4, 16] and "runtime" not in doc
    assert doc["time"]["step_time"]["source"] == "physics" and "max_concurrency" not in doc["time"]
    for p in fr["points"]:
        one = csa("simulate", mix, *DEPLOY, "--engine", "vllm-0.33", "--max-concurrency", str(p["concurrency"]),
                  "--json")
        rt = one.json()["runtime"]
        assert p["output_tok_s_per_gpu"] == rt["output_tok_s_per_gpu"]
        assert p["tpot_p50_s"] == rt["tpot"]["p50_s"] and p["ttft_p99_s"] == rt["ttft"]["p99_s"]
        assert p["output_tok_s_per_user"] == 1 / rt["tpot"]["p50_s"]
        assert p["peak_running"] == min(p["concurrency"], 48) and p["served"] == 48
    per_gpu = [p["output_tok_s_per_gpu"] for p in fr["points"]]
    per_user = [p["output_tok_s_per_user"] for p in fr["points"]]
    assert per_gpu == sorted(per_gpu) and per_user == sorted(per_user, reverse=True)  # the trade-off itself


def test_table_and_plot(csa, mix, tmp_path):
    path = tmp_path / "f.png"
    r = csa("simulate", mix, *DEPLOY, "--engine", "sglang-0.5.23", "--max-concurrency", "1,8", "--plot", str(path))
    assert r.code == 0, r.err
    assert "frontier" in r.out and "tok/s/user" in r.out and "1 / TPOT p50" in r.out and "step time: physics" in r.out
    pytest.importorskip("matplotlib")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "frontier plot written to" in r.out


def test_plot_without_matplotlib_is_bad_input(csa, mix, tmp_path, monkeypatch):
    import csa_plan.cli.plots as plots

    monkeypatch.setattr(plots, "plotting_available", lambda: False)
    path = tmp_path / "f.png"
    r = csa("simulate", mix, *DEPLOY, "--engine", "vllm-0.33", "--max-concurrency", "1,8", "--plot", str(path))
    assert r.code == 2 and "pip install 'csa-plan[plot]'" in r.err and not path.exists()


@pytest.mark.parametrize("extra, field, words", [
    (("--max-concurrency", "1,4,4"), "--max-concurrency", "given twice"),
    (("--max-concurrency", "0,4"), "--max-concurrency", "at least 1"),
    (("--max-concurrency", "1,4", "--engine", "sglang-0.5.23"), "--max-concurrency", "one --engine"),
    (("--max-concurrency", "1,4", "--find-capacity", "--max-wait", "1"), "--find-capacity", "do not go together"),
])
def test_refusals(csa, mix, extra, field, words):
    r = csa("simulate", mix, *DEPLOY, "--engine", "vllm-0.33", *extra)
    assert r.code == 2 and field in r.err and words in r.err and "Traceback" not in r.err, r.err


def test_no_engine_replay_is_refused(csa, mix):
    r = csa("simulate", mix, *DEPLOY, "--max-concurrency", "1,4")
    assert r.code == 2 and "--max-concurrency" in r.err and "replayed step by step" in r.err, r.err


def _p(c, gpu, user):
    return FrontierPoint(c, 1, 1, 0.1, 0.1, None if user is None else 1 / user, None, gpu, user, c, 0, 1.0)


def test_dominated_points_are_off_the_frontier():
    pts = mark_frontier([_p(1, 10.0, 100.0), _p(4, 30.0, 90.0), _p(16, 25.0, 80.0), _p(64, 30.0, 90.0),
                         _p(256, None, None)])
    assert [p.on_frontier for p in pts] == [True, True, False, True, False]  # equal points both stay
