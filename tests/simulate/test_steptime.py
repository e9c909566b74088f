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
    assert c.comm_bytes_per_token == 0 and c.a2a_bytes_per_token == 0
    perf = CardPerf("hopper", 1e12, 1e15, 2e15, 0.0, 1e11, 8, "hand")
    rows = basis_rows(c, perf)  # no rules: one rank runs the whole model
    assert rows["weights"][0] == 1100 / 1e12 and rows["weights"][6] == 400 / 1e12
    assert rows["flops"][1] == c.token_gemm_flops / 2e15 + c.token_attn_flops / 1e15
    assert rows["prefill_flops"][2] == c.token_gemm_flops / 2e15
    assert rows["prefill_positions"][3] == c.position_flops / 1e15 and rows["prefill_positions"][5] == 0
    assert rows["state"][4] == c.request_read_bytes / 1e12 and rows["state"][5] == c.context_read_bytes / 1e12
    assert rows["comm"][1] == 0 and rows["a2a_decode"][1] == rows["a2a_prefill"][2] == 0  # one rank: nothing to reduce or dispatch
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


def _flash():
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.serving.step_source import model_inputs

    spec = load_model("deepseek-v4-flash")
    return (spec, *model_inputs(spec))


def test_a_rank_repeats_what_the_shard_rules_replicate():
    """Per-rank costs come from the weight budget's own shard rules: a TP8 rank holds less than a TP1
    rank, but far more than an eighth (the fused wq_a+wkv, compressors, indexers and router are whole
    on every rank), and the indexer's scoring over every position is not split at all."""
    from csa_plan.planner.placement import Placement
    from csa_plan.planner.steptime.physics import model_cost
    from csa_plan.planner.weights.rules import RULES
    from csa_plan.planner.weights.sharding import shard

    spec, data, inv = _flash()
    one = model_cost(spec, data, inv, RULES["vllm-0.33"], Placement(tp=1))
    eight = model_cost(spec, data, inv, RULES["vllm-0.33"], Placement(tp=8))
    assert one.dense_bytes / 8 < eight.dense_bytes < one.dense_bytes
    assert one.token_gemm_flops / 8 < eight.token_gemm_flops < one.token_gemm_flops / 2
    indexer = one.position_flops - 8 * (one.position_flops - eight.position_flops) / 7  # the replicated part
    assert indexer > 0 and eight.position_flops > one.position_flops / 8
    # the weights a rank reads are what the budget puts on it (experts: all of them, spread over the ranks)
    held = shard(inv, RULES["vllm-0.33"], Placement(tp=8), mtp=False).max_bytes
    embed = sum(w.nbytes for w in inv.weights if w.role.value == "embed") // 8
    assert abs(eight.dense_bytes + eight.expert_bytes + embed - held) / held < 0.02
    assert eight.shape.attn_tp == 8 and eight.shape.moe_tp == 8 and eight.a2a_bytes_per_token == 0


def test_dp_attention_and_expert_parallelism_are_shapes():
    """DP8 + EP8: a rank runs attention for its own tokens whole, holds E/8 experts that the tokens of all
    eight ranks touch, and pays the dispatch/combine all-to-all instead of the TP all-reduces."""
    from csa_plan.planner.cards import CARDS
    from csa_plan.planner.placement import Placement
    from csa_plan.planner.steptime.physics import basis_rows, model_cost
    from csa_plan.planner.weights.rules import RULES

    spec, data, inv = _flash()
    for rules in (RULES["vllm-0.33"], RULES["sglang-0.5.23"]):
        dep = model_cost(spec, data, inv, rules, Placement(tp=1, dp=8, ep=8))
        tp1 = model_cost(spec, data, inv, rules, Placement(tp=1))
        assert dep.shape.dp == 8 and dep.shape.moe_ep == 8 and dep.shape.attn_tp == 1, rules.name
        assert dep.expert_bytes * 8 == pytest.approx(tp1.expert_bytes, rel=0.01)
        assert dep.token_gemm_flops == pytest.approx(tp1.token_gemm_flops, rel=0.01)  # balanced: its share
        assert dep.position_flops == tp1.position_flops and dep.a2a_bytes_per_token > 0
        rows = basis_rows(dep, CARDS["b200"].perf)
        assert rows["step"][7] == pytest.approx(8 * math.log1p(-6 / 256))  # 8 ranks' tokens meet at the MoE


def test_tp_scaling_of_a_long_prefill_is_far_from_linear():
    """One 128K prompt on 8 B200s under the shipped vLLM coefficients (fitted on vLLM rows): TP8+EP8 prefills it
    only a little faster than one DP8+EP8 rank or one TP2xDP4 replica, as vLLM's published ladder measures
    (vllm-project/vllm#51454, cold topology at 128K, concurrency 4: TP8 about 4.5 s a prompt, four in turn;
    a DP8 rank 5.3 s and a TP2xDP4 replica 5.6 s, one prompt each; the 1M follow-up 1.45x): not the ~7x of a
    clock dividing all by TP."""
    from csa_plan.planner.placement import Placement
    from csa_plan.planner.steptime.model import StepBatch, batch_ns
    from csa_plan.planner.steptime.physics import physics_step_time

    spec, data, inv = _flash()

    def prefill_ns(placement):
        t = physics_step_time(spec, data, inv, "b200", placement, "vllm", "vLLM 0.33.0")
        ns = 0
        for start in range(0, 131072, 8192):
            b = StepBatch()
            b.add_prefill(start, 8192)
            ns += batch_ns(b, t)
        return ns

    tp8, tp2, dp_rank = (prefill_ns(p) for p in (Placement(tp=8, ep=8), Placement(tp=2, dp=4, ep=8),
                                                 Placement(tp=1, dp=8, ep=8)))
    assert 1.0 < dp_rank / tp8 < 1.5 and 1.0 < tp2 / tp8 < 1.5
    assert 3e9 < tp8 < 6e9  # published: about 4.5 s a prompt


def test_blackwell_ultra_and_nvl72_cards_have_figures():
    from csa_plan.planner.cards import CARDS, card
    from csa_plan.planner.steptime.hardware import card_perf

    for name in ("b300", "gb200", "gb300", "rtx-pro-6000"):
        c = card(name)
        assert c.perf is not None and c.perf.source and card_perf(name) is c.perf, name
        assert c.perf.hbm_bytes_s > 1e12 and c.perf.fp8_flops > c.perf.bf16_flops > 0 and c.perf.link_bytes_s > 0
    assert CARDS["gb200"].perf.link_domain == CARDS["gb300"].perf.link_domain == 72
    assert CARDS["b300"].sm == CARDS["gb300"].sm == "sm_103"
    assert CARDS["rtx-pro-6000"].perf.link_domain == 1


def test_a_raw_size_is_no_card_for_physics(tmp_path):
    from csa_plan.planner.serving.step_source import step_time_for

    from types import SimpleNamespace
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.placement import Placement

    spec, _, _ = _flash()
    for source in ("physics", "measured"):
        config = SimpleNamespace(time=SimpleNamespace(step_time=source),
                                 engine=SimpleNamespace(settings=EngineSettings(gpu_memory_bytes=288 * 10**9)),
                                 placement=Placement(tp=4))
        with pytest.raises(BadInput, match="--gpu NAME"):
            step_time_for(spec, config, None)


def test_closed_loop_replicas_time_ttft_from_each_send():
    """dp replicas under a closed-loop client: a request's TTFT runs from when its replica's client sent it,
    not from the trace's time (all zero here): the merged result is each replica's own, request by request."""
    from csa_plan.planner.serving.replicas import replay_replicas, split_round_robin

    n, dp, c = 12, 2, 2
    trace = RuntimeTrace(np.zeros(n, dtype=np.int64), np.full(n, 300, dtype=np.int64), np.full(n, 6, dtype=np.int64))
    time = StepTime(20.0, 10_000.0)
    run = lambda t: replay(_runtime("sglang-0.5.23", t), t, time, max_concurrency=c)
    merged = replay_replicas(run, trace, dp)
    for sub, idx in split_round_robin(trace, dp):
        own = run(sub)
        assert list(np.asarray(merged.arrival_ns)[idx]) == list(np.asarray(own.arrival_ns))
        ttft = np.asarray(merged.first_token_ns)[idx] - np.asarray(merged.arrival_ns)[idx]
        assert list(ttft) == list(np.asarray(own.first_token_ns) - np.asarray(own.arrival_ns))
    assert np.asarray(merged.arrival_ns).max() > 0  # the later requests were sent when earlier ones ended
