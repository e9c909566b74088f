"""The bounded step series (issue 37, steps bombs): ``result.StepSeries`` and its compiled twin ``stepseries.h``.

A replay keeps at most ``STEP_BUCKETS`` buckets of consecutive steps, whatever the number of steps:
the buckets equal a brute-force grouping of the full per-step record (width the smallest power of two
that fits), the compiled loops keep the same buckets as the Python twin with a tiny cap, and every
figure of the report (peaks, per-pool peaks, means, steps, makespan) is the same whatever the cap.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from csa_plan.planner.serving.report import runtime_report
from csa_plan.planner.replay import result
from csa_plan.planner.replay.loop import replay
from csa_plan.planner.replay.protocol import RuntimeOptions
from csa_plan.planner.replay.result import StepSeries
from csa_plan.planner.steptime.model import StepTime

ROOT = Path(__file__).resolve().parents[2]
TIME = StepTime(20.0, 10_000.0)


def reference(steps: list[tuple], cap: int, pools: int) -> dict:
    """The buckets by definition: groups of ``width`` consecutive steps, width the least power of 2 that fits."""
    width = 1
    while len(steps) > cap * width:
        width *= 2
    out = {k: [] for k in ("end", "used", "run", "wait", "tok", "pre")}
    for i in range(0, len(steps), width):
        group = steps[i:i + width]
        totals = [sum(s[1]) for s in group]
        peak = group[totals.index(max(totals))]  # the first with the largest total
        out["end"].append(group[-1][0])
        out["used"].append(list(peak[1]))
        out["run"].append(max(s[2] for s in group))
        out["wait"].append(max(s[3] for s in group))
        out["tok"].append(sum(s[4] for s in group))
        out["pre"].append(sum(s[5] for s in group))
    out["width"] = width
    return out


step = st.tuples(st.integers(0, 1 << 40), st.lists(st.integers(0, 50), min_size=2, max_size=2),
                 st.integers(0, 9), st.integers(0, 9), st.integers(0, 1000), st.integers(0, 1000))


@settings(max_examples=200, deadline=None)
@given(st.lists(step, max_size=90), st.sampled_from([2, 4, 6, 8, 16]))
def test_buckets_are_the_grouping_by_definition(steps, cap):
    s = StepSeries(2, cap=cap)
    for end, used, run, wait, tok, pre in steps:
        s.add(end, tuple(used), run, wait, tok, pre)
    f = s.freeze()
    ref = reference(steps, cap, 2)
    assert f.buckets <= cap and f.steps == len(steps)
    assert f.end_ns.tolist() == ref["end"] and f.used.tolist() == (ref["used"] or [])
    assert (f.running.tolist(), f.waiting.tolist()) == (ref["run"], ref["wait"])
    assert (f.tokens.tolist(), f.prefill_tokens.tolist()) == (ref["tok"], ref["pre"])
    assert f.width == (ref["width"] if steps else 1)
    assert f.pool_peak == tuple(max((s[1][i] for s in steps), default=0) for i in range(2))
    assert f.sums == (float(sum(sum(s[1]) for s in steps)), float(sum(s[2] for s in steps)),
                      float(sum(s[3] for s in steps)))


def test_memory_is_bounded_by_the_cap_not_the_steps():
    s = StepSeries(3, cap=64)
    for i in range(100_000):
        s.add(i, (i % 7, 1, 2), 1, 0, 1, 0)
    assert len(s.end_ns) <= 64 and len(s.used) <= 64 * 3 and s.steps == 100_000
    assert s.freeze().width == 2048  # 100,000 steps in at most 64 buckets


def _vllm(name: str, n: int, model: str, gib: int, caching: bool):
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.replay.trace import runtime_trace, slice_trace
    from csa_plan.planner.workloads.load import load_workload

    trace = slice_trace(runtime_trace(load_workload(str(ROOT / "examples" / "traces" / name))), 0, n)
    plan = get_engine("vllm-0.33").configure(load_model(model, max_seq_len=131072),
                                             EngineSettings(max_num_batched_tokens=2048, max_num_seqs=64), 131072)
    sizing = plan.size_pool(gib << 30)
    return trace, lambda: plan.runtime(sizing, trace, RuntimeOptions(enable_prefix_caching=caching))


def _sglang(name: str, n: int, model: str, gib: int, caching: bool):
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.replay.trace import runtime_trace, slice_trace
    from csa_plan.planner.workloads.load import load_workload

    trace = slice_trace(runtime_trace(load_workload(str(ROOT / "examples" / "traces" / name))), 0, n)
    plan = get_engine("sglang-0.5.23").configure(load_model(model), EngineSettings(max_running_requests=64,
                                                                                   chunked_prefill_size=2048), 131072)
    sizing = plan.size_pool(gib << 30)
    return trace, lambda: plan.runtime(sizing, trace, RuntimeOptions(enable_prefix_caching=caching))


def _compiled_or_skip(rt):
    if rt.compiled_replay() is None:
        pytest.skip("the compiled replay is not built (pip install -e . builds it; CI does)")


@pytest.mark.parametrize("build", [_vllm, _sglang], ids=["vllm", "sglang"])
@pytest.mark.parametrize("cap", [2, 8, 64])
def test_compiled_loops_keep_the_twins_buckets(monkeypatch, build, cap):
    trace, make = build("mooncake_conversation_head200.jsonl", 120, "deepseek-v4-flash", 6, True)
    _compiled_or_skip(make())
    full_py = replay(make(), trace, TIME, compiled=False)
    monkeypatch.setattr(result, "STEP_BUCKETS", cap)
    py = replay(make(), trace, TIME, compiled=False)
    c = replay(make(), trace, TIME, compiled=True)
    assert isinstance(c.admitted_ns, np.ndarray) and c.same_as(py)
    assert np.array_equal(c.series.prefill_tokens, py.series.prefill_tokens)
    assert c.series.buckets <= cap < c.series.steps == full_py.series.steps and c.series.width > 1
    # every figure of the report but the plot's points is exact whatever the cap
    a, b = runtime_report(full_py, caching=True).as_dict(), runtime_report(c, caching=True).as_dict()
    a.pop("series"), b.pop("series")
    assert a == b
