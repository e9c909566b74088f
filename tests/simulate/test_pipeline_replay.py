"""Pipeline stages in the engine replays (issue 46 item 2): each stage's pool from its own layers, the
scheduler in the smallest, and the one loop timing each step through the stages."""

from __future__ import annotations

import json
import math

import pytest

from csa_plan.planner.replay.pipeline import PipelineTiming
from csa_plan.planner.steptime.model import StepTime

TRACE = "examples/traces/mooncake_conversation_head200.jsonl"
PRO_H20 = ["--model", "deepseek-v4-pro", "--gpu", "h20", "--tp", "8", "--pp", "2"]


def _one_request(tmp_path, prompt: int = 300, output: int = 11) -> str:
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": prompt, "output_length": output}) + "\n")
    return str(path)


def test_pipeline_timing_interval_and_latency():
    t = PipelineTiming(stages=2, stage_time=StepTime(10.0, 1e6), activation_bytes_per_token=7168,
                       link_bytes_s=50e9, in_flight=2)
    assert t.transfer_ns(1) == 144  # ceil(7168 / 50e9 s) in ns
    assert t.timing(1000, 1) == (1000, 2 * 1000 + 144)  # the next batch enters when stage 0 is free
    serial = PipelineTiming(stages=3, stage_time=StepTime(10.0, 1e6), activation_bytes_per_token=7168,
                            link_bytes_s=50e9, in_flight=1)
    assert serial.timing(1000, 1) == (3 * 1000 + 2 * 144,) * 2  # one micro-batch round: every stage in turn
    with pytest.raises(ValueError):
        PipelineTiming(stages=1, stage_time=StepTime(10.0, 1e6), activation_bytes_per_token=1, link_bytes_s=1.0,
                       in_flight=1)


@pytest.mark.parametrize("engine,extra", [("sglang-0.5.23", ()), ("vllm-0.33", ("--no-async-scheduling",)),
                                          ("vllm-0.33", ("--async-scheduling",))])
def test_a_lone_request_waits_for_its_batch_through_every_stage(csa, tmp_path, engine, extra):
    """Nothing else to schedule: each token is one batch through both stages and the boundary (2 S + X),
    not one stage's time — the scheduler cannot take the request again until its batch returns (vLLM
    without async scheduling: no placeholder; with it, on Model Runner V2: AsyncScheduler.decode_stagger =
    pp_size steps between a request's decodes, async_scheduler.py :18-22, :51-56)."""
    r = csa("simulate", _one_request(tmp_path), *PRO_H20, "--engine", engine, *extra, "--step-time", "fixed",
            "--tpot-ms", "10", "--prefill-tok-s", "1000000", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    pipe = doc["runtime"]["pipeline"]
    layers = [p["layers"] for p in pipe["peaks"]]
    largest = max(min(last, 60) - first + 1 for first, last in layers)  # decoder layers 0-60; 61 is MTP
    stage_ns = max(1, math.ceil(10.0 * largest / 61 * 1_000_000))  # the fixed clock scaled to the stage, rounded up
    x = -(-1 * pipe["activation_bytes_per_token"] * 10**9 // int(pipe["link_bytes_s"]))
    tpot_ns = doc["runtime"]["tpot"]["p50_s"] * 1e9
    assert tpot_ns == pytest.approx(2 * stage_ns + x, abs=2)
    assert pipe["in_flight"] == (3 if "--async-scheduling" in extra else 2)  # SGLang: pp_loop_size = pp micro-batches
    assert pipe["micro_batch_turns"] is engine.startswith("sglang")


@pytest.mark.parametrize("engine", ["vllm-0.33", "sglang-0.5.23"])
def test_pp2_replay_peaks_stay_within_every_stage_pool(csa, engine):
    r = csa("simulate", TRACE, *PRO_H20, "--engine", engine, "--json")
    assert r.code == 0, r.err
    doc = r.json()
    rt, pipe = doc["runtime"], doc["runtime"]["pipeline"]
    assert rt["served"] == rt["requests"] == 200
    units = [s["total_units"] for s in pipe["stages"]]
    assert pipe["binding_stage"] == units.index(min(units))
    assert pipe["link"] == "ib-ndr"  # 16 GPUs: two NVLink domains of 8
    for st in pipe["peaks"]:
        assert st["within_pool"] and st["peak_bytes"] <= st["usable_bytes"]
        assert st["peak_units"] <= st["usable_units"]


def test_pp1_has_no_pipeline_and_is_todays_replay(csa, tmp_path):
    """--pp 1 builds no PipelineTiming: the loop's own path (its compiled twin equal, tests/simulate/
    test_vllm_compiled.py); the document says pipeline null."""
    args = (_one_request(tmp_path), "--model", "deepseek-v4-flash", "--gpu", "h200", "--tp", "4", "--engine",
            "vllm-0.33", "--json")
    one = csa("simulate", *args, "--pp", "1").json()
    plain = csa("simulate", *args).json()
    assert one["runtime"]["pipeline"] is None
    assert one["runtime"]["ttft"] == plain["runtime"]["ttft"] and one["runtime"]["tpot"] == plain["runtime"]["tpot"]


def test_pp_with_an_engine_needs_a_device(csa):
    r = csa("simulate", TRACE, "--model", "deepseek-v4-pro", "--tp", "8", "--pp", "2", "--engine", "vllm-0.33",
            "--kv-memory", "30GB")
    assert r.code == 2 and "--pp" in r.err and "--device-memory" in r.err and len(r.err.strip().splitlines()) == 1


def test_the_loop_refuses_a_compiled_pipeline():
    from csa_plan.planner.replay.loop import replay

    class Rt:
        label = "x"

    t = PipelineTiming(stages=2, stage_time=StepTime(10.0, 1e6), activation_bytes_per_token=1, link_bytes_s=1.0,
                       in_flight=2)
    with pytest.raises(RuntimeError, match="pipeline"):
        replay(Rt(), None, StepTime(10.0, 1e6), compiled=True, pipeline=t)


def test_sglang_refuses_deepseek_v41_with_stages_and_a_split_inside_a_group_is_refused():
    """SGLang 0.5.23 refuses V4.1 with PP (its own check); a boundary inside a sharing group is refused for
    every engine (planner/sharing.py, the rule the ledger's per-stage answer applies)."""
    from types import SimpleNamespace

    from csa_plan.planner.engines.engine import EngineRefused
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.serving.pipeline import pipeline_pools
    from csa_plan.planner.sharing import SharingGroupSplitError

    spec = load_model("deepseek-v4.1-flash", max_seq_len=131072)
    main = spec.num_main_layers
    clean = SimpleNamespace(stages=(SimpleNamespace(layers=tuple(range(0, 20)), kv_memory_bytes=1 << 34),
                                    SimpleNamespace(layers=tuple(range(20, main)), kv_memory_bytes=1 << 34)))
    with pytest.raises(EngineRefused, match="does not support pipeline parallelism"):
        pipeline_pools(spec, "sglang-0.5.23", None, 131072, clean)
    inside = SimpleNamespace(stages=(SimpleNamespace(layers=tuple(range(0, 21)), kv_memory_bytes=1 << 34),
                                     SimpleNamespace(layers=tuple(range(21, main)), kv_memory_bytes=1 << 34)))
    with pytest.raises(SharingGroupSplitError):
        pipeline_pools(spec, "vllm-0.33", None, 131072, inside)


@pytest.mark.parametrize("command", ["check", "simulate"])
def test_a_stage_pool_the_engine_refuses_is_a_typed_refusal(csa, command):
    """A stage too small for one request of max_seq_len: vLLM's own start-up check on that worker
    (_check_enough_kv_cache_memory per projected worker), exit 3 with the refusal typed, nothing replayed."""
    args = (["deepseek-v4-pro"] if command == "check" else [TRACE, "--model", "deepseek-v4-pro"])
    r = csa(command, *args, "--gpu", "h20", "--tp", "8", "--pp", "2", "--engine", "vllm-0.33",
            "--gpu-memory-utilization", "0.64", "--json")
    assert r.code == 3, r.err
    doc = r.json()
    assert doc["all_refusals"][0]["type"] == "EngineRefused" and doc["fit"]["requests_that_fit"] is None


def _sglang_two(arrival_ns: list[int], max_running: int = 8, in_flight: int = 2, turns: bool = True):
    """Two requests (prompt 100, output 3) through SGLang's scheduler under a 2-stage pipeline whose stage lasts
    1 ms for a decode step and for a 100-token prefill (fixed clock: 1 ms, 1e6 tok/s), with a free boundary."""
    import numpy as np

    from csa_plan.planner.engines.sglang.runtime import SglangRuntime
    from csa_plan.planner.engines.sglang.scheduler import SchedulerConfig
    from csa_plan.planner.replay.loop import replay
    from csa_plan.planner.replay.protocol import RuntimeTrace

    trace = RuntimeTrace(np.array(arrival_ns, dtype=np.int64), np.full(2, 100, dtype=np.int64),
                         np.full(2, 3, dtype=np.int64))
    cfg = SchedulerConfig(full_pages=64, swa_pages=64, max_running_requests=max_running, radix_cache=False)
    rt = SglangRuntime(cfg, trace, "sglang")
    timing = PipelineTiming(stages=2, stage_time=StepTime(1.0, 1e6), activation_bytes_per_token=0, link_bytes_s=1.0,
                            in_flight=in_flight, micro_batch_turns=turns)
    if turns:
        rt.use_micro_batches(in_flight, 2)
    return replay(rt, trace, StepTime(2.0, 5e5), pipeline=timing)


MS = 1_000_000


def test_sglang_micro_batches_each_schedule_their_own_running_requests():
    """event_loop_pp (scheduler_pp_mixin.py :104-215), worked by hand. A arrives at 0, B at 0.5 ms. Turn 0 (mb 0):
    A's prefill enters stage 0 at 0 (back at 2 ms). Turn 1 (mb 1) at 1 ms, stage 0 free: B's prefill in its own
    micro-batch; then mb 0's result (A's first token, 2 ms). Turn 2 (mb 0) at 2 ms: A decodes alone (back 4);
    then mb 1's result (B's first token, 3 ms). Turns alternate: A's tokens at 2, 4, 6 ms, B's at 3, 5, 7 ms.
    Whole-batch rounds (every stage in turn, one batch) give B's prefill only at 2 ms, both decoding together:
    B's first token at 4 ms, both done at 8 ms."""
    r = _sglang_two([0, MS // 2])
    assert list(r.admitted_ns) == [0, 1 * MS]
    assert list(r.first_token_ns) == [2 * MS, 3 * MS]
    assert list(r.finished_ns) == [6 * MS, 7 * MS]
    rounds = _sglang_two([0, MS // 2], in_flight=1, turns=False)  # the replay before micro-batches
    assert list(rounds.admitted_ns) == [0, 2 * MS]
    assert list(rounds.first_token_ns) == [2 * MS, 4 * MS]
    assert list(rounds.finished_ns) == [8 * MS, 8 * MS]


def test_sglang_micro_batch_size_caps_each_micro_batch():
    """pp_max_micro_batch_size = max_running_requests // pp_size (scheduler.py :1237-1243) bounds a micro-batch's
    admissions (get_num_allocatable_reqs :4034): with 2 running requests and 2 stages, one each. Both arrive at
    0; mb 0 takes A, mb 1 takes B one turn (1 ms) later; with micro-batches of 4, mb 0 takes both."""
    capped = _sglang_two([0, 0], max_running=2)
    assert list(capped.admitted_ns) == [0, 1 * MS]
    assert list(capped.first_token_ns) == [2 * MS, 3 * MS]
    assert list(capped.finished_ns) == [6 * MS, 7 * MS]
    wide = _sglang_two([0, 0], max_running=8)
    assert list(wide.admitted_ns) == [0, 0]
    assert list(wide.first_token_ns) == [2 * MS, 2 * MS]  # one micro-batch: every token a full pass, 2 ms
    assert list(wide.finished_ns) == [6 * MS, 6 * MS]


@pytest.mark.parametrize("seed", range(6))
def test_sglang_micro_batches_never_schedule_a_request_in_flight_and_free_every_page(seed):
    """Random traces through small pools (retractions happen) and 2-3 stages: no request decodes while a batch
    holding it is in flight (each micro-batch owns its running requests until its result is processed; only a
    chunked prompt's next chunk follows its last one before that one's result, as SGLang's shared chunked_req
    does), every request ends served or refused, and every page a request held is back when the replay ends."""
    import numpy as np

    from csa_plan.planner.engines.sglang.runtime import SglangRuntime
    from csa_plan.planner.engines.sglang.scheduler import SchedulerConfig
    from csa_plan.planner.replay.loop import replay
    from csa_plan.planner.replay.protocol import RuntimeTrace

    rng = np.random.default_rng(seed)
    n, stages = 60, 2 + seed % 2
    trace = RuntimeTrace(np.sort(rng.integers(0, 200 * MS, n)).astype(np.int64), rng.integers(1, 3000, n),
                         rng.integers(1, 400, n))
    cfg = SchedulerConfig(full_pages=40, swa_pages=24, max_running_requests=12, chunked_prefill_size=1024,
                          max_prefill_tokens=2048, radix_cache=seed % 3 != 0)
    rt = SglangRuntime(cfg, trace, "sglang")
    rt.use_micro_batches(stages, stages)
    flying: dict[int, tuple[str, set[int]]] = {}
    schedule, complete = rt.schedule, rt.complete
    chunks_in_flight = [0]

    def checked_schedule():
        s = schedule()
        ids, kind = set(s.requests), getattr(s.payload, "kind", "idle")
        for other_kind, other in flying.values():
            if ids & other:
                assert kind == other_kind == "prefill", "a request scheduled while a batch holding it is in flight"
                chunks_in_flight[0] += 1
        if s.tokens:  # a step with tokens is in flight until its result is applied
            flying[id(s)] = (kind, ids)
        return s

    def checked_complete(step):
        flying.pop(id(step))
        return complete(step)

    rt.schedule, rt.complete = checked_schedule, checked_complete
    timing = PipelineTiming(stages=stages, stage_time=StepTime(1.0, 1e6), activation_bytes_per_token=64,
                            link_bytes_s=1e9, in_flight=stages, micro_batch_turns=True)
    r = replay(rt, trace, StepTime(2.0, 5e5), pipeline=timing)
    assert len(r.refused) + sum(1 for f in r.finished_ns if f >= 0) == n
    assert not flying and rt.sched.pending == 0 and rt.running() == 0
    assert rt.sched.req_full == 0 and rt.sched.req_swa == 0 and rt.sched.tree.locked == 0
    assert chunks_in_flight[0] > 0  # prompts over the 1,024-token chunk: chunks follow each other in flight
    if seed in (1, 2):
        assert rt.retractions > 0  # the pools are small enough that decode retracts
