"""The step-time model (issue 35): the batch a step holds, the linear form, the physics terms, the
sources' selection, the compiled loops against their twins under a linear model, the closed loop
and the latency report. Arithmetic is checked against hand-computed cases, never a tolerance."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from csa_plan.planner.errors import BadInput
from csa_plan.planner.replay.loop import replay
from csa_plan.planner.replay.protocol import RuntimeTrace
from csa_plan.planner.steptime.model import StepBatch, StepSource, StepTime, batch_ns, linear_seconds
from csa_plan.planner.reserve.settings import merge
from csa_plan.planner.workloads import MixSettings


def test_batch_counts_positions_and_contexts():
    b = StepBatch()
    b.add_prefill(10, 3)  # positions 11, 12, 13
    b.add_prefill(0, 1)  # position 1
    b.add_decode(100, 1)
    b.add_decode(50, 3)  # a request with two drafts
    assert (b.prefill, b.prefill_pos, b.decode_reqs, b.decode_tokens, b.decode_ctx) == (4, 37.0, 2, 4, 150)


def test_linear_form_by_hand():
    c = (0.001, 1e-6, 3e-6, 1e-9, 2e-5, 1e-8, 0.004, math.log(0.5))
    b = StepBatch()
    b.add_prefill(0, 2)  # positions 1 + 2
    b.add_decode(1000, 1)
    tokens = 3
    want = 0.001 + 1e-6 * 3 + 3e-6 * 2 + 1e-9 * 3 + 2e-5 * 1 + 1e-8 * 1000 + 0.004 * (1 - 0.5 ** 3)
    assert linear_seconds(c, tokens, 2, 3.0, 1, 1000) == pytest.approx(want, rel=1e-15)
    t = StepTime(20.0, 10_000.0, linear=c, source=StepSource.PHYSICS)
    assert batch_ns(b, t) == math.ceil(linear_seconds(c, tokens, 2, 3.0, 1, 1000) * 1e9)
    assert batch_ns(StepBatch(), StepTime(20.0, 10_000.0, linear=(0.0,) * 7 + (-1.0,))) == 1  # never a 0 ns step
    with pytest.raises(ValueError):
        StepTime(20.0, 10_000.0, linear=(1.0, 2.0))


def test_fixed_constants_unchanged():
    t = StepTime(20.0, 10_000.0)
    b = StepBatch()
    b.add_prefill(0, 1000)
    assert batch_ns(b, t) == 100_000_000 and batch_ns(StepBatch(), t) == 20_000_000


def test_source_defaults_and_fixed_when_constants_given():
    none = MixSettings()
    assert merge(none, none).step_time == "physics"
    assert merge(MixSettings(tpot_ms=30.0), none).step_time == "fixed"
    assert merge(none, MixSettings(prefill_tok_s=5e4)).step_time == "fixed"
    assert merge(MixSettings(step_time="fixed"), none).step_time == "fixed"
    with pytest.raises(BadInput, match="constants of --step-time fixed"):
        merge(MixSettings(step_time="physics", tpot_ms=20.0), none)


def test_physics_terms_by_hand():
    """The model's costs from its layers and weights: one CSA, one HCA and one window-only layer."""
    from types import SimpleNamespace

    from csa_plan.planner.descriptor import Descriptor
    from csa_plan.planner.steptime.physics import basis_rows, model_cost
    from csa_plan.planner.steptime.hardware import CardPerf
    from csa_plan.planner.weights.tensors import Role

    d = dict(num_heads=8, head_dim=512, qk_rope_head_dim=64, window=128, max_seq_len=4096, cache_format="fp8_e4m3_block64")
    layers = (Descriptor(layer_id=0, compression_ratio=4, index_num_heads=4, index_head_dim=128, index_topk=16, **d),
              Descriptor(layer_id=1, compression_ratio=128, **d), Descriptor(layer_id=2, compression_ratio=1, **d))
    spec = SimpleNamespace(layers=layers, source="hand")
    w = lambda role, shape, nbytes, copies=1: SimpleNamespace(role=role, logical=shape, copies=copies, nbytes=nbytes,
                                                              is_mtp=False)
    inv = SimpleNamespace(weights=(w(Role.EMBED, (100, 10), 2000), w(Role.WQ_A, (10, 10), 100),
                                   w(Role.EXPERT_W13, (20, 10), 400, copies=4), w(Role.HEAD, (100, 10), 1000)))
    cfg = {"n_routed_experts": 4, "num_experts_per_tok": 2, "hidden_size": 10}
    c = model_cost(spec, cfg, inv)
    rec = 448 + 128 + 4 * 7  # latent fp8 + rope bf16 + one scale per 64
    assert c.layers == 3 and c.dense_bytes == 1100 and c.expert_bytes == 400
    assert c.token_gemm_flops == 2.0 * (100 + 1000 + 800 * 2 / 4)
    assert c.request_read_bytes == 3 * 128 * rec + 16 * rec
    assert c.context_read_bytes == (128 + 4) / 4 + rec / 128
    assert c.position_flops == 4 * 128 * 2 / 4 + 8 * 512 * 4 / 128
    assert c.token_attn_flops == 3 * 128 * 8 * 512 * 4 + 16 * 8 * 512 * 4
    assert c.comm_bytes_per_token == 2.0 * 3 * 10 * 2
    perf = CardPerf("x", "hopper", 1e12, 1e15, 2e15, 1e11, "hand")
    rows = basis_rows(c, perf, 2)
    assert rows["weights"][0] == 1100 / 2 / 1e12 and rows["weights"][6] == 400 / 2 / 1e12
    assert rows["flops"][1] == (c.token_gemm_flops / 2e15 + c.token_attn_flops / 1e15) / 2
    assert rows["prefill_flops"][2] == c.token_gemm_flops / 2e15 / 2
    assert rows["state"][4] == c.request_read_bytes / 1e12 and rows["state"][5] == c.context_read_bytes / 1e12
    assert rows["comm"][1] == c.comm_bytes_per_token * 1.0 / 1e11
    assert rows["step"][7] == math.log1p(-0.5)


def test_unknown_card_refuses_physics():
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.steptime.physics import physics_step_time
    from csa_plan.planner.serving.step_source import model_inputs

    spec = load_model("deepseek-v4-flash")
    data, inv = model_inputs(spec)
    with pytest.raises(BadInput, match="--step-time fixed"):
        physics_step_time(spec, data, inv, "mi300x", 8, "vllm", "vLLM 0.33.0")
    t = physics_step_time(spec, data, inv, "h200", 4, "vllm", "vLLM 0.33.0")
    assert t.source is StepSource.PHYSICS and "h200" in t.label and "vLLM 0.33.0" in t.label and t.band


def _linear_times():
    return st.builds(lambda c0, tok, pre, pos, req, ctx, exp: StepTime(
        20.0, 10_000.0, linear=(c0, tok, pre, pos, req, ctx, exp, math.log1p(-6 / 256)), source=StepSource.PHYSICS),
        st.floats(1e-4, 0.02), st.floats(0, 1e-5), st.floats(0, 1e-5), st.floats(0, 1e-11), st.floats(0, 1e-4),
        st.floats(0, 1e-8), st.floats(0, 0.05))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data(), _linear_times())
def test_compiled_loops_equal_twins_under_a_linear_model(data, time):
    """Both compiled loops time each step from its batch exactly as their Python twins do."""
    from csa_plan.planner.engines.sglang.compiled import compiled_module as sglang_module
    from csa_plan.planner.engines.vllm.compiled import compiled_module as vllm_module

    n = data.draw(st.integers(1, 12))
    arrival = np.cumsum(data.draw(st.lists(st.integers(0, 50_000_000), min_size=n, max_size=n)))
    prompts = np.array(data.draw(st.lists(st.integers(1, 3000), min_size=n, max_size=n)))
    outputs = np.array(data.draw(st.lists(st.integers(1, 200), min_size=n, max_size=n)))
    trace = RuntimeTrace(arrival.astype(np.int64), prompts.astype(np.int64), outputs.astype(np.int64))
    for engine, module in (("vllm-0.33", vllm_module), ("sglang-0.5.23", sglang_module)):
        if module() is None:
            continue
        make = lambda: _runtime(engine, trace)
        a = replay(make(), trace, time, compiled=False)
        b = replay(make(), trace, time, compiled=True) if engine == "vllm-0.33" else \
            make().compiled_replay()(trace, time)
        assert a.same_as(b), engine
        assert np.array_equal(np.asarray(a.series.end_ns), np.asarray(b.series.end_ns)), engine


_PLANS = {}


def _runtime(engine: str, trace):
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.replay.protocol import RuntimeOptions

    if engine not in _PLANS:
        settings_ = EngineSettings(max_num_seqs=8) if engine.startswith("vllm") else EngineSettings(max_running_requests=8)
        plan = get_engine(engine).configure(load_model("deepseek-v4-flash"), settings_, 8192)
        _PLANS[engine] = (plan, plan.size_pool(6 << 30))
    plan, sizing = _PLANS[engine]
    return plan.runtime(sizing, trace, RuntimeOptions())


def test_closed_loop_sends_the_next_request_when_one_ends():
    """At most C in flight: request C is sent exactly when the first request ends."""
    n, c = 6, 2
    trace = RuntimeTrace(np.arange(n, dtype=np.int64) * 10**12, np.full(n, 100, dtype=np.int64),
                         np.full(n, 5, dtype=np.int64))
    time = StepTime(20.0, 10_000.0)
    res = replay(_runtime("sglang-0.5.23", trace), trace, time, max_concurrency=c)
    arrival, fin = np.asarray(res.arrival_ns), np.asarray(res.finished_ns)
    assert list(arrival[:c]) == [0, 0]  # the trace's times are not kept
    ends = sorted(fin)
    assert sorted(arrival[c:]) == ends[:n - c]
    assert (fin >= 0).all()
    for t in sorted(set(arrival) | set(fin)):
        assert ((arrival <= t) & (fin > t)).sum() <= c


def test_report_tpot_and_throughput():
    from csa_plan.planner.serving.report import runtime_report

    n = 4
    trace = RuntimeTrace(np.zeros(n, dtype=np.int64), np.full(n, 100, dtype=np.int64), np.full(n, 11, dtype=np.int64))
    res = replay(_runtime("sglang-0.5.23", trace), trace, StepTime(20.0, 10_000.0))
    rep = runtime_report(res, caching=True, output_tokens=trace.output_tokens, devices=4)
    first, fin = np.asarray(res.first_token_ns), np.asarray(res.finished_ns)
    want = np.round((fin - first) / 10).astype(np.int64)
    assert rep.tpot.count == n and rep.tpot.max_s == want.max() / 1e9
    assert rep.output_tokens == 44
    assert rep.output_tok_s_per_gpu == 44 / rep.makespan_s / 4


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data(), st.integers(1, 6), st.one_of(st.just(StepTime(20.0, 10_000.0)), _linear_times()))
def test_compiled_closed_loop_equals_twin(data, conc, time):
    """A closed-loop client in the compiled loops sends each request exactly when the twin does."""
    from csa_plan.planner.engines.sglang.compiled import compiled_module as sglang_module
    from csa_plan.planner.engines.vllm.compiled import compiled_module as vllm_module

    n = data.draw(st.integers(1, 14))
    prompts = np.array(data.draw(st.lists(st.one_of(st.integers(1, 3000), st.integers(9000, 9100)),
                                          min_size=n, max_size=n)))  # some beyond max_model_len: refused
    outputs = np.array(data.draw(st.lists(st.integers(1, 120), min_size=n, max_size=n)))
    trace = RuntimeTrace(np.zeros(n, dtype=np.int64), prompts.astype(np.int64), outputs.astype(np.int64))
    for engine, module in (("vllm-0.33", vllm_module), ("sglang-0.5.23", sglang_module)):
        if module() is None:
            continue
        a = replay(_runtime(engine, trace), trace, time, compiled=False, max_concurrency=conc)
        b = replay(_runtime(engine, trace), trace, time, compiled=True, max_concurrency=conc) \
            if engine == "vllm-0.33" else _runtime(engine, trace).compiled_replay()(trace, time, max_concurrency=conc)
        assert a.same_as(b), engine
        assert np.array_equal(np.asarray(a.arrival_ns), np.asarray(b.arrival_ns)), engine
        assert list(a.refused.items()) == list(b.refused.items()), engine


def test_docs_fit_table_is_the_shipped_fit():
    """docs/steptime.md's row-by-row table is generated from steptime_fit.json (one fact, one place)."""
    from pathlib import Path

    from csa_plan.planner.steptime.physics import fit_table_markdown, shipped_fit

    doc = (Path(__file__).resolve().parents[2] / "docs" / "steptime.md").read_text(encoding="utf-8")
    block = doc.split("<!-- fit-table: tools/fit_steptime.py --write -->\n", 1)[1].split("<!-- /fit-table -->", 1)[0]
    assert block == fit_table_markdown(shipped_fit())
    for name, fit in shipped_fit()["fits"].items():
        assert fit["band"] and fit["data"] and all(v >= 0 for v in fit["beta"].values()), name
