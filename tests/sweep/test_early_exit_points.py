"""Plan's path through ``evaluate`` (``Task.early_exit``, issue 45 item 5) against the full evaluation of
every point: a feasible point is evaluated in full (the same result, field for field), an infeasible
one gets the same verdict (stopped early on a bound the full replay breaks, or its rate search not
run once the target rate's replay breaks one), and a shape that cannot beat a found one is not judged."""

from __future__ import annotations

import json

import pytest

from csa_plan.planner.sweep.evaluate import NOT_JUDGED, Task, evaluate, triage
from csa_plan.planner.sweep.spec import parse_spec


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("early")
    (tmp / "m.yaml").write_text(json.dumps({"name": "m", "seed": 3, "requests": 1200, "classes": [
        {"name": "a", "rate": 6, "prompt": {"dist": "fixed", "value": 2048},
         "output": {"dist": "fixed", "value": 256}}]}))
    return parse_spec({"workload": "m.yaml", "grid": {"model": "deepseek-v4-flash", "device": "b200", "tp": [1, 2],
                                                      "dp": [1, 2], "engine": ["vllm-0.33", "sglang-0.5.23"],
                                                      "max_seq_len": 2304},
                       "constraints": {"tpot_p99_max_ms": 30, "ttft_p99_max_s": 2},
                       "search": {"min_scale": 1.0, "max_scale": 1.000001}}, str(tmp / "s.yaml"))


def test_early_exit_keeps_every_verdict_and_every_feasible_result(spec):
    points = triage(spec).to_run
    verdicts, stopped = set(), 0
    for p in points:
        full = evaluate(Task(spec.context, p))
        fast = evaluate(Task(spec.context, p, early_exit=True))
        assert fast.feasible == full.feasible, p.key
        verdicts.add(full.feasible)
        if full.feasible:
            assert fast == full, p.key  # replayed and searched in full
            continue
        reason = fast.violations[0]
        if reason.startswith("stopped early"):
            stopped += 1
            bound = "TPOT" if "TPOT" in reason else "TTFT"
            assert any(v.startswith(bound) for v in full.violations), (reason, full.violations)
        else:  # replayed in full, the search not run: the target rate's own violations
            assert set(fast.violations) <= set(full.violations) and fast.probes == 0
    assert verdicts == {True, False} and stopped >= 1  # the grid has both, and some replay stopped


def test_a_shape_that_cannot_beat_the_found_one_is_not_judged(spec):
    p = next(p for p in triage(spec).to_run if p.engine == "vllm-0.33" and p.tp == 2 and p.dp == 2)
    full = evaluate(Task(spec.context, p))
    assert full.feasible
    lost = evaluate(Task(spec.context, p, early_exit=True, beat=(0.001, 0.0)))  # no TPOT p99 beats 1 ms
    assert not lost.feasible and lost.steady.startswith(NOT_JUDGED) and "cannot be preferred" in lost.violations[0]
    kept = evaluate(Task(spec.context, p, early_exit=True, beat=(1.0, 100.0)))  # beats it: evaluated in full
    assert kept == full
