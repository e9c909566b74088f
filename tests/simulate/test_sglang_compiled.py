"""The compiled SGLang replay (``engines/sglang/csglang.c``) equals its Python twin (``loop.replay`` stepping
``SglangRuntime``): every per-request time, retraction count, refusal and per-step count (``RuntimeResult.same_as``).

Hypothesis draws traces and settings: retraction storms (tiny pools, long outputs), the radix cache on and
off with full prefix reuse, shared blocks and random ids, small and large chunked-prefill sizes and
max-running-requests, random small page / window / pool shapes and both V4 models' pools as
``check --engine sglang-0.5.23`` sizes them; plus fixed cases on the bundled traces.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from csa_plan.planner.engines.sglang.compiled import compiled_module
from csa_plan.planner.engines.sglang.runtime import SglangRuntime
from csa_plan.planner.engines.sglang.compiled import replay_for
from csa_plan.planner.engines.sglang.scheduler import SchedulerConfig
from csa_plan.planner.replay.loop import replay
from csa_plan.planner.replay.protocol import RuntimeOptions, RuntimeTrace
from csa_plan.planner.steptime.model import StepTime

pytestmark = pytest.mark.skipif(compiled_module() is None,
                                reason="the csglang extension is not built (pip install -e . builds it; CI does)")

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "examples" / "traces"
GiB = 1 << 30


def _twins(trace: RuntimeTrace, cfg: SchedulerConfig, time: StepTime) -> tuple:
    py_rt = SglangRuntime(cfg, trace, "sglang-0.5.23", compiled=replay_for)
    c_rt = SglangRuntime(cfg, trace, "sglang-0.5.23", compiled=replay_for)
    assert c_rt.compiled_replay() is not None
    py = replay(py_rt, trace, time, compiled=False)
    c = replay(c_rt, trace, time, compiled=True)
    return py, c, py_rt, c_rt


def _assert_twins(trace, cfg, time):
    py, c, py_rt, c_rt = _twins(trace, cfg, time)
    assert c.same_as(py), (cfg, len(trace))
    assert py.prefix_query_tokens == c.prefix_query_tokens
    assert np.array_equal(py.series.prefill_tokens, c.series.prefill_tokens)
    assert list(py.refused.items()) == list(c.refused.items())  # reasons and their order
    assert (py_rt.retractions, py_rt.retracted_requests, py_rt.aborted) == \
        (c_rt.retractions, c_rt.retracted_requests, c_rt.aborted)
    assert py.notes == c.notes
    return py, c


@st.composite
def traces(draw, storm: bool = False):
    n = draw(st.integers(1, 40))
    gaps = draw(st.lists(st.integers(0, 3_000_000_000), min_size=n, max_size=n))
    arrival = np.cumsum(gaps).astype(np.int64) - gaps[0]
    hi_out = 20_000 if storm else 3000
    prompt = draw(st.lists(st.integers(1, 12_000), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, hi_out), min_size=n, max_size=n))
    block = draw(st.sampled_from([64, 256, 512, 1000]))
    kind = draw(st.sampled_from(["none", "full-reuse", "shared", "random"]))
    ids = offsets = None
    if kind != "none":
        lists = []
        for i, p in enumerate(prompt):
            m = p // block + draw(st.integers(0, 1))
            if kind == "full-reuse":  # every request the same prefix ids (a system prompt / a conversation)
                lists.append(list(range(m)))
            elif kind == "shared":
                lists.append([draw(st.integers(0, 3)) for _ in range(m)])
            else:
                lists.append([draw(st.integers(-(1 << 62), 1 << 62)) for _ in range(m)])
        offsets = np.cumsum([0] + [len(x) for x in lists]).astype(np.int64)
        ids = np.array([v for x in lists for v in x], dtype=np.int64)
    return RuntimeTrace(arrival, np.array(prompt, dtype=np.int64), np.array(output, dtype=np.int64), ids, offsets,
                        block)


@st.composite
def configs(draw, storm: bool = False):
    page = draw(st.sampled_from([16, 64, 256]))
    window = draw(st.sampled_from([32, 128, 300, 1024]))
    full = draw(st.integers(4, 60) if storm else st.integers(8, 600))
    return SchedulerConfig(
        full_pages=full, swa_pages=draw(st.integers(2, 40) if storm else st.integers(4, 200)), page=page,
        window=window, max_running_requests=draw(st.sampled_from([1, 2, 3, 8, 64, 256])),
        chunked_prefill_size=draw(st.sampled_from([page, 512, 2048, 8192, 65536])),
        max_prefill_tokens=draw(st.sampled_from([1024, 16384])),
        context_len=draw(st.sampled_from([4096, 1 << 20])), radix_cache=draw(st.booleans()),
        schedule_conservativeness=draw(st.sampled_from([0.3, 1.0, 1.7])))


TIMES = st.sampled_from([StepTime(20.0, 10_000.0), StepTime(0.5, 1e9), StepTime(33.3, 777.7)])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(traces(), configs(), TIMES)
def test_compiled_equals_python_twin(trace, cfg, time):
    _assert_twins(trace, cfg, time)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(traces(storm=True), configs(storm=True), TIMES)
def test_compiled_equals_python_twin_in_retraction_storms(trace, cfg, time):
    """Tiny pools and long outputs: retraction after retraction, aborts, stranded requests, evictions."""
    _assert_twins(trace, cfg, time)


def _plan(model: str, gib: float, mrr: int, chunk: int):
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.loaders.model_files import load_model

    plan = get_engine("sglang-0.5.23").configure(
        load_model(model), EngineSettings(max_running_requests=mrr, chunked_prefill_size=chunk), 131072)
    return plan, plan.size_pool(int(gib * GiB))


@pytest.fixture(scope="module")
def v4_pools():
    return {(m, g): _plan(m, g, 64, 8192) for m, g in
            (("deepseek-v4-flash", 6), ("deepseek-v4-flash", 30), ("deepseek-v4-pro", 8), ("deepseek-v4-pro", 12))}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                 HealthCheck.function_scoped_fixture])
@given(traces(storm=True), st.sampled_from([("deepseek-v4-flash", 6), ("deepseek-v4-flash", 30),
                                            ("deepseek-v4-pro", 8), ("deepseek-v4-pro", 12)]), st.booleans())
def test_compiled_equals_python_twin_on_v4_pools(v4_pools, trace, key, radix):
    plan, sizing = v4_pools[key]
    cfg = plan.runtime(sizing, trace, RuntimeOptions(enable_prefix_caching=radix)).cfg
    _assert_twins(trace, cfg, StepTime(20.0, 10_000.0))


def _bundled(name: str, n: int) -> RuntimeTrace:
    from csa_plan.planner.replay.trace import runtime_trace, slice_trace
    from csa_plan.planner.workloads import load_workload

    return slice_trace(runtime_trace(load_workload(str(TRACES / name))), 0, n)


@pytest.mark.parametrize("name,n,model,gib,mrr,chunk", [
    ("mooncake_conversation_head200.jsonl", 200, "deepseek-v4-flash", 8, 64, 8192),  # shared prefixes, one retraction
    ("mooncake_conversation_head200.jsonl", 200, "deepseek-v4-flash", 6, 64, 1024),
    ("mooncake_synthetic_head100.jsonl", 100, "deepseek-v4-pro", 12, 32, 2048),
    ("azure_llm_inference_2023_conv.csv", 1000, "deepseek-v4-pro", 8, 64, 8192),  # retracts on a real trace
])
@pytest.mark.parametrize("radix", [True, False])
def test_compiled_equals_python_twin_on_bundled_traces(name, n, model, gib, mrr, chunk, radix):
    plan, sizing = _plan(model, gib, mrr, chunk)
    trace = _bundled(name, n)
    cfg = plan.runtime(sizing, trace, RuntimeOptions(enable_prefix_caching=radix)).cfg
    py, c = _assert_twins(trace, cfg, StepTime(20.0, 10_000.0))
    assert c.series.steps > 0 and isinstance(c.finished_ns, np.ndarray)


def test_settings_out_of_range_run_the_python_twin():
    """A setting the compiled loop does not take: no compiled loop (the Python one runs); a trace it does not
    take (a count past 2^40) runs the twin through the compiled entry point."""
    trace = RuntimeTrace(np.array([0, 5], dtype=np.int64), np.array([300, 2], dtype=np.int64),
                         np.array([3, 1 << 41], dtype=np.int64))
    big = SglangRuntime(SchedulerConfig(full_pages=1 << 41, swa_pages=40), trace, "sglang-0.5.23", compiled=replay_for)
    assert big.compiled_replay() is None
    rt = SglangRuntime(SchedulerConfig(full_pages=40, swa_pages=40), trace, "sglang-0.5.23", compiled=replay_for)
    res = replay(rt, trace, StepTime(20.0, 10_000.0))
    twin = replay(SglangRuntime(rt.cfg, trace, "sglang-0.5.23", compiled=replay_for), trace, StepTime(20.0, 10_000.0), compiled=False)
    assert res.same_as(twin) and isinstance(res.finished_ns, list)


def test_a_step_past_the_clock_is_the_twins_error():
    from csa_plan.planner.errors import BadInput

    trace = RuntimeTrace(np.array([0], dtype=np.int64), np.array([300], dtype=np.int64), np.array([5], dtype=np.int64))
    rt = SglangRuntime(SchedulerConfig(full_pages=40, swa_pages=40), trace, "sglang-0.5.23", compiled=replay_for)
    with pytest.raises(BadInput, match="int64"):
        replay(rt, trace, StepTime(4e12, 10_000.0), compiled=True)


def test_an_extension_of_another_abi_is_set_aside(monkeypatch):
    """An editable install not rebuilt since csglang.c changed: its ABI differs and it is never called."""
    from csa_plan.planner.engines.sglang import compiled

    class Stale:
        ABI = compiled.CSGLANG_ABI + 1

    import csa_plan.planner.engines.sglang as package

    monkeypatch.setattr(compiled.CSGLANG, "_module", False)
    monkeypatch.setattr(package, "csglang", Stale, raising=False)  # (a sanitized build is in sys.modules only)
    assert compiled.compiled_module() is None
    trace = RuntimeTrace(np.array([0], dtype=np.int64), np.array([300], dtype=np.int64), np.array([5], dtype=np.int64))
    assert SglangRuntime(SchedulerConfig(full_pages=40, swa_pages=40), trace, "x", compiled=replay_for).compiled_replay() is None
