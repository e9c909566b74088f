"""The replay's early exit (``planner/replay/early_exit.py``, issue 45 item 5).

* the count that decides a p99 is exact for ``np.quantile``'s linear interpolation (the report's), and
  one fewer does not decide it;
* a replay whose bounds hold is not stopped: with the rule it is the full replay, figure for figure,
  in the Python loop and in both compiled loops;
* a replay stopped early gives the full replay's verdict (the bound it stops on is broken in the full
  replay), in the Python loop and in both compiled loops, and stops before the end;
* the Python and compiled loops stop on the same verdict; a closed loop refuses the rule.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from csa_plan.planner.engines.sglang.compiled import compiled_module as sglang_module
from csa_plan.planner.engines.vllm.compiled import compiled_module as vllm_module
from csa_plan.planner.replay.early_exit import ReplayStopped, StopRule, over_needed
from csa_plan.planner.replay.loop import replay
from csa_plan.planner.replay.protocol import RuntimeOptions
from csa_plan.planner.serving.report import runtime_report
from csa_plan.planner.steptime.model import StepTime
from csa_plan.planner.units import GiB

ROOT = Path(__file__).resolve().parents[2]
TIME = StepTime(20.0, 10_000.0)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 10**10), min_size=1, max_size=400), st.integers(0, 10**10))
def test_the_deciding_count_is_exact_for_the_reports_p99(values, limit_ns):
    v = np.array(values, dtype=np.int64)
    limit = limit_ns / 1e9
    over = int(np.count_nonzero(v / 1e9 > limit))
    p99 = float(np.quantile(v, 0.99)) / 1e9  # serving/report.py _quantiles
    if over >= over_needed(len(v)):
        assert p99 > limit
    if over < over_needed(len(v)):  # one fewer: the smallest of the top values may sit at or below the limit
        below = np.sort(v)
        assert below[len(v) - over_needed(len(v))] / 1e9 <= limit


def _trace(n: int, scale: float):
    from csa_plan.planner.replay.trace import runtime_trace, slice_trace
    from csa_plan.planner.workloads import load_workload

    return slice_trace(runtime_trace(load_workload(str(ROOT / "examples" / "traces" /
                                                       "azure_llm_inference_2023_conv.csv")), scale), 0, n)


def _sglang(trace):
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.loaders.model_files import load_model

    plan = get_engine("sglang-0.5.23").configure(
        load_model("deepseek-v4-flash"), EngineSettings(max_running_requests=64, chunked_prefill_size=8192), 131072)
    sizing = plan.size_pool(int(8 * GiB))
    return lambda: plan.runtime(sizing, trace, RuntimeOptions())


def _vllm(trace):
    from helpers.vllm_runtimes import vllm_runtime_factory

    return vllm_runtime_factory("deepseek-v4-flash", trace, 8192, 64, True, True, 0, 20_000, 16384)


ENGINES = [pytest.param(_vllm, vllm_module, id="vllm"), pytest.param(_sglang, sglang_module, id="sglang")]


def _rule(trace, **limits) -> StopRule:
    out = np.asarray(trace.output_tokens)
    return StopRule(requests=len(trace), multi_token=int((out >= 2).sum()), **limits)


def _figures(result, trace):
    rep = runtime_report(result, caching=True, unit="unit", output_tokens=trace.output_tokens, devices=1)
    return rep.ttft.p99_s, rep.tpot.p99_s, len(rep.refused)


@pytest.mark.parametrize("make,module", ENGINES)
def test_a_replay_within_its_bounds_is_the_full_replay(make, module):
    trace = _trace(1500, 1.0)
    runtime = make(trace)
    full = replay(runtime(), trace, TIME, compiled=False)
    ttft, tpot, refused = _figures(full, trace)
    assert refused == 0
    rule = _rule(trace, ttft_max_s=ttft * 1.01, tpot_max_s=tpot * 1.01)  # the p99s hold: nothing decided
    for compiled in ([False, True] if module() is not None else [False]):
        got = replay(runtime(), trace, TIME, compiled=compiled, stop=rule.watch())
        assert got.same_as(full)


@pytest.mark.parametrize("make,module", ENGINES)
@pytest.mark.parametrize("bound", ["ttft", "tpot"])
def test_an_early_exit_gives_the_full_replays_verdict(make, module, bound):
    trace = _trace(3000, 30.0)  # thirty times the trace's rate on one small server: the queue grows
    runtime = make(trace)
    full = replay(runtime(), trace, TIME, compiled=False)
    ttft, tpot, _ = _figures(full, trace)
    limits = {"ttft_max_s": ttft / 2} if bound == "ttft" else {"tpot_max_s": tpot / 2}
    rule = _rule(trace, **limits)
    stops = []
    for compiled in ([False, True] if module() is not None else [False]):
        with pytest.raises(ReplayStopped) as e:
            replay(runtime(), trace, TIME, compiled=compiled, stop=rule.watch())
        assert e.value.verdict is False and e.value.done < len(trace)  # stopped before the end
        stops.append(e.value.reason.split(" after ")[0].split(" requests'")[1])
    assert len(set(stops)) == 1  # both loops stop on the same bound
    assert (ttft if bound == "ttft" else tpot) > (ttft if bound == "ttft" else tpot) / 2  # the full replay breaks it


def test_a_found_shape_to_beat_stops_without_a_verdict():
    trace = _trace(3000, 30.0)
    runtime = _sglang(trace)
    full = replay(runtime(), trace, TIME, compiled=False)
    _, tpot, _ = _figures(full, trace)
    with pytest.raises(ReplayStopped) as e:
        replay(runtime(), trace, TIME, compiled=False, stop=_rule(trace, beat_tpot_s=tpot / 2).watch())
    assert e.value.verdict is None and "cannot be preferred" in e.value.reason


def test_a_closed_loop_refuses_the_rule():
    trace = _trace(50, 1.0)
    with pytest.raises(RuntimeError, match="closed-loop"):
        replay(_sglang(trace)(), trace, TIME, max_concurrency=4, stop=_rule(trace, ttft_max_s=1.0).watch())


def test_a_compiled_loop_without_the_hook_leaves_the_rule_to_the_python_loop():
    trace = _trace(3000, 30.0)
    runtime = _sglang(trace)
    rt = runtime()
    if rt.compiled_replay() is None:
        pytest.skip("the csglang extension is not built")
    inner = rt.compiled_replay()
    rt.compiled_replay = lambda: (lambda t, time, progress=None, max_concurrency=None: inner(t, time, progress,
                                                                                              max_concurrency))
    full = replay(runtime(), trace, TIME, compiled=False)
    _, tpot, _ = _figures(full, trace)
    with pytest.raises(ReplayStopped):  # the Python loop ran and took the rule
        replay(rt, trace, TIME, stop=_rule(trace, tpot_max_s=tpot / 2).watch())
    rt2 = runtime()
    rt2.compiled_replay = rt.compiled_replay
    with pytest.raises(RuntimeError, match="does not take the early-exit rule"):  # compiled required: refused
        replay(rt2, trace, TIME, compiled=True, stop=_rule(trace, tpot_max_s=tpot / 2).watch())


def test_a_replica_that_decides_the_bound_stops_the_next_one_from_being_replayed():
    """dp replicas in turn: the finished ones' counts carry; once they decide a bound, the next replica is
    not replayed (the last one's counts need no decision: its replay is already whole)."""
    n = 400  # the deployment's requests; 200 each on two replicas
    rule = StopRule(requests=n, multi_token=n, ttft_max_s=1.0)
    arrival = np.arange(200, dtype=np.int64) * 10**9
    out = np.full(200, 8, dtype=np.int64)
    first = arrival + np.where(np.arange(200) < over_needed(n), 2 * 10**9, 10**8)  # just enough over 1 s
    done = first + 10**9
    w = rule.watch()
    w.carry(arrival, out, arrival, first, done, 0, more=False)  # no raise: nothing follows
    w = rule.watch()
    with pytest.raises(ReplayStopped) as e:
        w.carry(arrival, out, arrival, first, done, 0, more=True)
    assert e.value.verdict is False and f"{over_needed(n)} of {n} requests' TTFT" in e.value.reason
    w = rule.watch()
    fewer = arrival + np.where(np.arange(200) < over_needed(n) - 1, 2 * 10**9, 10**8)
    w.carry(arrival, out, arrival, fewer, fewer + 10**9, 0, more=True)  # one short of deciding: goes on
