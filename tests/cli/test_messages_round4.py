"""Issue 47, class 8: messages that said something false or misleading.

A value shown rounded to the bound it is said to pass; a grid value named twice in another spelling;
``-j`` far past the machine (a process per point) or with ``--ray``; a mix's ``time:`` conflict named as
command-line options. (``/dev/null`` as a log and a negative KV line: ``tests/budget/test_from_log_bounded.py``.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import EXAMPLES
from csa_plan.planner.errors import BadInput
from csa_plan.planner.values import check_range, read_number, shown_against, shown_bound

MIX = str(EXAMPLES / "mixes" / "chat-h200.yaml")
SAMPLE = str(EXAMPLES / "traces" / "sample.csv")


def one_line(r, *needles):
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err, r.err
    for n in needles:
        assert n in r.err, r.err


@pytest.mark.parametrize("value, bound", [(1_000_000.5, 1e6), (1e6 + 1e-9, 1e6), (1_048_576.0000001, 2.0 ** 20),
                                          (1_048_577.0, 2.0 ** 20), (1.0000000001, 1.0), (1e-12 * 0.9999999, 1e-12)])
def test_a_value_past_its_bound_never_reads_as_the_bound(value, bound):
    got, limit = shown_against(value, bound), shown_bound(bound)
    assert float(got) != bound and got != limit
    for call in (lambda: check_range("s", "f", value, low=-bound, high=bound) if value > bound else
                 check_range("s", "f", value, low=bound, high=2 * bound),
                 lambda: read_number("s", "f", value, at_most=bound) if value > bound else
                 read_number("s", "f", value, at_least=bound)):
        with pytest.raises(BadInput) as e:
            call()
        said = str(e.value).rsplit("got ", 1)[1]
        assert said == got, str(e.value)


def test_the_cli_names_the_exact_value_and_bound(csa):
    one_line(csa("simulate", MIX, "--rate-scale", "1048576.0000001"), "at most 1,048,576", "got 1048576.0000001")


def test_one_gpu_spelled_twice_in_a_grid_is_refused(csa, tmp_path):
    for devices in ("[h200, H200]", "[B200, h200, b200]"):
        spec = tmp_path / "s.yaml"
        spec.write_text(f"name: d\nworkload: {SAMPLE}\ngrid:\n  model: deepseek-v4-flash\n  device: {devices}\n")
        one_line(csa("sweep", str(spec), "-j", "1"), "grid.device", "twice", "each point would run twice")


def test_jobs_past_the_machine_and_jobs_with_ray(csa):
    spec = str(EXAMPLES / "sweeps" / "small.yaml")
    one_line(csa("sweep", spec, "-j", "100000"), "--jobs", "100,000 local workers")
    one_line(csa("sweep", spec, "-j", "2", "--ray", "auto"), "--jobs", "--ray")


def test_a_mix_time_conflict_names_the_mix(csa, tmp_path):
    text = Path(MIX).read_text()
    mix = tmp_path / "m.yaml"
    lines = [ln for ln in text.splitlines() if not ln.startswith("time:")]
    mix.write_text("\n".join(lines) + "\ntime: {step_time: physics, tpot_ms: 20}\n")
    r = csa("simulate", str(mix))
    one_line(r, "m.yaml: time.step_time", "time.tpot_ms")
    assert "--tpot-ms" not in r.err and "options" not in r.err


@pytest.mark.parametrize("option, value", [("--gpu-memory-utilization", "1.0000001"),
                                           ("--gpu-memory-utilization", "1.00000000001"),
                                           ("--mem-fraction-static", "1.000000001")])
def test_a_fraction_past_one_is_never_shown_as_one(csa, option, value):
    engine = "vllm-0.33" if option.startswith("--gpu") else "sglang-0.5.23"
    r = csa("check", "deepseek-v4-flash", "--engine", engine, option, value)
    assert r.code == 2 and f"{float(value)!r}" in r.err or value in r.err, r.err
    assert " 1 is outside" not in r.err
