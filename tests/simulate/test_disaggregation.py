"""Prefill/decode disaggregation (issue 46): the transfer schedule, the prefill pool's hold, the decode side's
loaded prompt, the refusals, and whole replays of both engines whose figures are checked against the engine
plans' own per-request bytes and against each role replayed alone. Integers compare exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest

from csa_plan.planner.cards import CARDS, LINKS, link
from csa_plan.planner.errors import BadInput
from csa_plan.planner.replay.protocol import Completion, EngineRuntime, Step
from csa_plan.planner.serving.disaggregation import (RemoteKvRuntime, default_link, disaggregation_from,
                                                     schedule_transfers)

from helpers import EXAMPLES

TRACE = str(EXAMPLES / "traces" / "sample.jsonl")
FLASH = ("--model", "deepseek-v4-flash", "--device-memory", "h200")
ROLES = ("--prefill-workers", "1", "--prefill-tp", "2", "--decode-workers", "2", "--decode-tp", "2")


def test_transfers_queue_on_a_workers_links_by_hand():
    # 1 GB/s: 1,000 bytes last 1,000 ns. Requests 0 and 2 share prefill worker 0 and decode worker 0.
    ready = np.array([0, 100, 500, -1], dtype=np.int64)
    size = np.array([1000, 2000, 1000, 0], dtype=np.int64)
    start, end = schedule_transfers(ready, size, 1e9, np.array([0, 1, 0, 1]), np.array([0, 1, 0, 1]))
    assert start.tolist() == [0, 100, 1000, -1]  # request 2 waits for request 0 on both links
    assert end.tolist() == [1000, 2100, 2000, -1]
    # a shared decode link alone also queues
    start, end = schedule_transfers(ready[:2], size[:2], 1e9, np.array([0, 1]), np.array([0, 0]))
    assert start.tolist() == [0, 1000] and end.tolist() == [1000, 3000]


class _Inner(EngineRuntime):
    """Schedules request 0's prompt of 10 tokens in chunks of 4, then decodes (a scripted scheduler)."""

    pools = ("p",)
    usable_units = 100
    label = "inner"

    def __init__(self, preempt_at: int | None = None):
        self.k = 0
        self.preempt_at = preempt_at

    def refuse(self, r):
        return None

    def add(self, r):
        pass

    def schedule(self):
        s = Step()
        if self.k == self.preempt_at:
            s.preempted = [0]
            self.done = 0
        chunks = [(0, 4), (4, 4), (8, 2)]
        before, n = chunks[self.k % 3]
        s.requests, s.tokens = [0], [n]
        s.batch.add_prefill(before, n)
        s.prefill_tokens = n
        self.k += 1
        return s

    def complete(self, step):
        return Completion()

    def used_units(self):
        return (0,)

    def running(self):
        return 1

    def waiting(self):
        return 0


def test_the_decode_side_computes_only_the_last_prompt_token():
    rt = RemoteKvRuntime(_Inner(), [10])
    rt.add(0)
    steps = [rt.schedule() for _ in range(3)]
    # positions 1..9 arrive over the link; position 10 is computed (vLLM scheduler.py:3515-3516)
    assert [(s.batch.prefill, s.batch.prefill_pos, s.prefill_tokens) for s in steps] == \
        [(0, 0.0, 0), (0, 0.0, 0), (1, 10.0, 1)]
    assert rt.loaded_tokens == 9


def test_a_preempted_decode_request_recomputes_its_prompt():
    rt = RemoteKvRuntime(_Inner(preempt_at=1), [10])
    rt.add(0)
    steps = [rt.schedule() for _ in range(3)]
    assert steps[0].batch.prefill == 0  # loaded
    assert [s.batch.prefill for s in steps[1:]] == [4, 2]  # after the preemption: computed, as the engines do
    assert rt.loaded_tokens == 4


def test_roles_from_options_and_their_refusals():
    d = disaggregation_from(None, 8, 2, None, None)
    assert (d.prefill.workers, d.prefill.tp, d.decode.workers, d.decode.tp, d.gpus) == (1, 8, 2, 1, 10)
    assert disaggregation_from(None, None, None, None, None) is None
    for args, field in (((1, None, None, None, None), "--decode-workers"),
                        ((None, None, None, 8, None), "--prefill-workers"),
                        ((None, None, None, None, "nvlink"), "--transfer-link"),
                        ((0, 8, 1, 8, None), "--prefill-workers")):
        with pytest.raises(BadInput) as exc:
            disaggregation_from(*args)
        assert exc.value.field == field


def test_links_from_the_card_table():
    h200, gb200 = CARDS["h200"], CARDS["gb200"]
    assert link("nvlink", h200, 8) == (LINKS["nvlink"], h200.perf.link_bytes_s)
    assert link("ib-ndr", h200, 16)[1] == 50e9
    with pytest.raises(BadInput, match="at most 8"):
        link("nvlink", h200, 16)
    assert link("nvlink", gb200, 16)[1] == gb200.perf.link_bytes_s  # one NVL72 domain
    with pytest.raises(BadInput, match="no NVLink domain"):
        link("nvlink", CARDS["l40s"], 2)
    with pytest.raises(BadInput, match="unknown link"):
        link("pcie", h200, 2)
    assert default_link(16, 8) == "ib-ndr" and default_link(8, 8) == "nvlink"


@pytest.mark.parametrize("args, field", [
    ((*FLASH, *ROLES), "--engine"),
    ((*FLASH, *ROLES, "--engine", "vllm-0.33", "--tp", "2"), "--tp"),
    ((*FLASH, *ROLES, "--engine", "vllm-0.33", "--find-capacity", "--max-wait", "5"), "--find-capacity"),
    ((*FLASH, *ROLES, "--engine", "vllm-0.33", "--transfer-link", "nvlink", "--decode-workers", "4"),
     "--transfer-link"),
    ((*FLASH, *ROLES, "--engine", "vllm-0.33", "--engine", "sglang-0.5.23"), "--engine"),
    ((*FLASH, *ROLES, "--engine", "sglang-0.5.23", "--disaggregation-decode-enable-radix-cache"),
     "--disaggregation-decode-enable-radix-cache"),
])
def test_bad_disaggregated_input_is_one_line(csa, args, field):
    r = csa("simulate", TRACE, *args)
    assert r.code == 2 and field in r.err and len(r.err.strip().splitlines()) == 1, (r.code, r.err)


@pytest.fixture(scope="module")
def docs():
    from csa_plan.cli.main import main
    import contextlib
    import io

    out = {}
    for engine in ("vllm-0.33", "sglang-0.5.23"):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), pytest.raises(SystemExit) as exc:
            main(["simulate", TRACE, *FLASH, *ROLES, "--engine", engine, "--json"])
        assert exc.value.code == 0
        out[engine] = json.loads(buf.getvalue())
    return out


@pytest.mark.parametrize("engine", ["vllm-0.33", "sglang-0.5.23"])
def test_transfer_bytes_are_the_decode_plans_own(docs, engine):
    from csa_plan.planner.engines.engine import Phase
    from csa_plan.planner.engines.registry import get_engine
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.workloads import load_workload

    doc = docs[engine]
    d = doc["runtime"]["disaggregation"]
    wl = load_workload(TRACE)
    spec = load_model("deepseek-v4-flash")
    plan = get_engine(engine).configure(spec, _settings(engine),
                                        max(x.max_seq_len for x in spec.layers))
    per_gpu = [plan.footprint(int(p), Phase.DECODE).total_bytes for p in wl.prompt_tokens]
    assert d["transfer"]["requests"] == len(wl)
    assert d["transfer"]["bytes_total"] == sum(per_gpu) * 2  # every decode rank pulls its share
    assert d["transfer"]["bytes_per_gpu"]["max"] == max(per_gpu)
    assert d["link"]["name"] == "nvlink"  # 2 + 4 GPUs: one HGX board
    assert d["prefill"]["gpus"] == 2 and d["decode"]["gpus"] == 4 and doc["deployment"]["devices"] == 6
    hold = d["prefill"]["transfer_hold"]
    assert d["prefill"]["peak_units_with_transfer_hold"] == d["prefill"]["peak_units"]  # the holds are in the replay
    assert d["prefill"]["peak_units"] >= hold["peak_units_without_hold"]
    assert hold["in_admission"] and hold["converged"] and hold["rounds"] >= 1
    assert d["decode"]["loaded_prompt_tokens"] > 0


def _settings(engine):
    from csa_plan.planner.budget.deployment import Deployment, card_settings, engine_settings_for
    from csa_plan.planner.cards import CardBytes
    from csa_plan.planner.engines.settings import EngineSettings

    es = card_settings(EngineSettings(), CardBytes(CARDS["h200"]), engine)
    return engine_settings_for(engine, es, Deployment(dp=1))


@pytest.mark.parametrize("engine", ["vllm-0.33", "sglang-0.5.23"])
def test_each_request_is_prefilled_then_moved_then_decoded(engine):
    import math

    from csa_plan.planner.commands.disaggregated import role_setup
    from csa_plan.planner.commands.simulate import SimulateRequest
    from csa_plan.planner.reserve.settings import merge
    from csa_plan.planner.serving.disaggregation import serve_disaggregated
    from csa_plan.planner.workloads import MixSettings, load_workload

    wl = load_workload(TRACE)
    given = MixSettings(model="deepseek-v4-flash", device_memory_bytes=_card_bytes())
    settings = merge(given, wl.settings, wl.source)
    d = disaggregation_from(1, 2, 2, 2, None)
    req = SimulateRequest(TRACE, given, engine=engine, engine_settings=None, disaggregation=d)
    p, *_ = role_setup(req, wl, settings, d.prefill, None, "--prefill-tp")
    q, *_ = role_setup(req, wl, settings, d.decode, False, "--decode-tp")
    run = serve_disaggregated(p, q, wl, 1.0, 100e9)
    arrival = np.asarray(run.result.arrival_ns)
    padm, pdone = np.asarray(run.prefill.admitted_ns), np.asarray(run.prefill.finished_ns)
    t = run.transfers
    dadm = np.asarray(run.decode.admitted_ns)
    first, done = np.asarray(run.result.first_token_ns), np.asarray(run.result.finished_ns)
    assert (done >= 0).all() and not run.result.refused
    assert (arrival <= padm).all() and (padm < pdone).all() and (pdone <= t.start_ns).all()
    assert (t.start_ns < t.end_ns).all() and (t.end_ns <= dadm).all() and (dadm < first).all()
    assert [int(e - s) for s, e in zip(t.start_ns, t.end_ns)] == [math.ceil(int(b) / 100e9 * 1e9)
                                                                 for b in t.bytes_per_gpu]
    # the prefill side served each prompt with one output token: its first token is its end
    assert (np.asarray(run.prefill.first_token_ns) == pdone).all()
    # the decode side computed one token of each prompt (none preempted): the rest came over the link
    if not np.asarray(run.decode.preemptions).any():
        assert run.loaded_tokens == int((wl.prompt_tokens - 1).sum())


def _card_bytes():
    from csa_plan.planner.cards import CardBytes

    return CardBytes(CARDS["h200"])


def test_check_answers_per_role_from_its_own_deployment(csa):
    r = csa("check", "deepseek-v4-flash", "--engine", "vllm-0.33", "--device-memory", "h200", "--prefill-tp", "2",
            "--decode-workers", "2", "--decode-tp", "4", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)["disaggregation"]
    for name, tp in (("prefill", 2), ("decode", 4)):
        alone = csa("check", "deepseek-v4-flash", "--engine", "vllm-0.33", "--device-memory", "h200", "--tp", str(tp),
                    "--json")
        assert json.loads(alone.out)["budget"] == doc[name]["check"]["budget"]
    assert doc["prefill"]["check"]["budget"] != doc["decode"]["check"]["budget"]
    assert (doc["decode"]["workers"], doc["decode"]["gpus"]) == (2, 8)


@pytest.mark.parametrize("extra, field", [((), "--engine"), (("--engine", "vllm-0.33", "--tp", "2"), "--tp")])
def test_check_roles_refuse_what_cannot_apply(csa, extra, field):
    r = csa("check", "deepseek-v4-flash", "--device-memory", "h200", "--prefill-tp", "1", "--decode-tp", "1", *extra)
    assert r.code == 2 and field in r.err and len(r.err.strip().splitlines()) == 1, r.err


def test_a_role_whose_weights_do_not_fit_is_refused_with_its_budget(csa):
    r = csa("simulate", TRACE, "--model", "deepseek-v4-pro", "--device-memory", "h100", "--engine", "vllm-0.33",
            "--prefill-tp", "1", "--decode-tp", "8", "--json")
    assert r.code == 3, r.err
    doc = json.loads(r.out)
    assert doc["refused_role"] == "prefill" and doc["budget"]["weights_fit"] is False and doc["exit_code"] == 3


def test_a_mix_that_sizes_an_aggregated_deployment_is_refused_with_roles(csa):
    r = csa("simulate", str(EXAMPLES / "mixes" / "chat-h200.yaml"), "--engine", "vllm-0.33", "--prefill-tp", "8",
            "--decode-tp", "8")
    assert r.code == 2 and "chat-h200.yaml: tp" in r.err and len(r.err.strip().splitlines()) == 1, r.err


def _tiny_roles(engine, kv_memory_bytes, decode_caching=False):
    """Two V4-Flash roles of one GPU each, a prefill pool of ``kv_memory_bytes`` for 8,192-token contexts (SGLang
    with one request row: its inflight request keeps it); the decode side's prefix cache as ``decode_caching``."""
    from csa_plan.planner.commands.disaggregated import role_setup
    from csa_plan.planner.commands.simulate import SimulateRequest
    from csa_plan.planner.engines.settings import EngineSettings
    from csa_plan.planner.reserve.settings import merge
    from csa_plan.planner.workloads import MixSettings, load_workload

    wl = load_workload(TRACE)
    given = MixSettings(model="deepseek-v4-flash", max_seq_len=8192)
    settings = merge(given, wl.settings, wl.source)
    d = disaggregation_from(1, 1, 1, 1, None)
    es = EngineSettings(max_running_requests=1) if engine.startswith("sglang") else None
    req = SimulateRequest(TRACE, given, engine=engine, engine_settings=es, disaggregation=d,
                          kv_memory_bytes=kv_memory_bytes)
    p, *_ = role_setup(req, wl, settings, d.prefill, None, "--prefill-tp")
    q, *_ = role_setup(req, wl, settings, d.decode, decode_caching, "--decode-tp")
    return p, q


@pytest.mark.parametrize("engine", ["vllm-0.33", "sglang-0.5.23"])
def test_held_blocks_delay_the_next_prefill_admission_until_the_transfer_ends(engine):
    """issue 46 item 2, by hand: two 6,000-token prompts 1 ns apart. vLLM's pool (3.5 GB: 8,503 tokens) holds
    one of them; SGLang's one request row is kept by the first while it is in flight. Freed at the finish (the
    old replay, round 0) the second is admitted when the first's prefill ends; held until the transfer ends
    (100 MB/s: about half a second) it is admitted at that transfer's end exactly: the loop waits for the
    release as for an arrival. Two rounds: the second reproduces its own release times."""
    from csa_plan.planner.replay.protocol import RuntimeTrace
    from csa_plan.planner.serving.disaggregation import serve_disaggregated_trace

    p, q = _tiny_roles(engine, 3_500_000_000)
    two = RuntimeTrace(np.array([0, 1], dtype=np.int64), np.array([6000, 6000], dtype=np.int64),
                       np.array([2, 2], dtype=np.int64))
    run = serve_disaggregated_trace(p, q, two, 1e8)
    unheld, held = run.hold.unheld, run.prefill
    end = np.asarray(run.transfers.end_ns, dtype=np.int64)
    assert int(unheld.admitted_ns[1]) == int(unheld.finished_ns[0])  # the old behaviour: no hold in admission
    assert int(held.admitted_ns[1]) == int(end[0]) > int(held.finished_ns[0])
    assert int(held.finished_ns[0]) == int(unheld.finished_ns[0])  # the first request is not touched
    assert (run.hold.rounds, run.hold.converged, run.hold.admitted_later()) == (2, True, 1)
    # the transfer of the second starts when its own prefill ends, and lasts its bytes over the link
    assert int(run.transfers.start_ns[1]) == int(held.finished_ns[1])
    assert int(end[1] - run.transfers.start_ns[1]) == int(np.ceil(int(run.transfers.bytes_per_gpu[1]) / 1e8 * 1e9))
    assert not run.result.refused and (np.asarray(run.result.first_token_ns) > end).all()


def test_the_pool_s_units_count_the_held_blocks_exactly():
    """vLLM: the request's blocks stay allocated while held (the pool's units in use at the first request's
    finish are its own blocks, an integer of the engine plan), and are back in the free pool when freed."""
    from csa_plan.planner.engines.engine import Phase
    from csa_plan.planner.replay.protocol import RuntimeTrace
    from csa_plan.planner.serving.transfer_hold import TransferHoldRuntime

    p, _ = _tiny_roles("vllm-0.33", 3_500_000_000)
    one = RuntimeTrace(np.array([0], dtype=np.int64), np.array([6000], dtype=np.int64), np.array([1], dtype=np.int64))
    rt = TransferHoldRuntime(p.plan.runtime(p.sizing, one, p.options), [10**9])
    rt.add(0)
    step = rt.schedule()
    assert rt.complete(step).finished == [0]
    held = p.plan.footprint(6000, Phase.PREFILL).units  # 2,462 blocks over its KV cache groups
    assert sum(rt.used_units()) == held
    assert rt.release_due(10**9 - 1) == 10**9 and sum(rt.used_units()) == held
    assert rt.release_due(10**9) is None and sum(rt.used_units()) == 0


def test_role_dp_and_ep_shape_each_rank_s_pool_as_the_aggregated_run(csa):
    """issue 46 item 1: a role's dp ranks each get the pool an aggregated --tp/--dp/--ep run gives a rank (the
    device budget per rank; SGLang's --max-running-requests per DP-attention rank); JSON names each role's shape."""
    roles = ("--prefill-tp", "1", "--prefill-dp", "2", "--prefill-ep", "2", "--decode-workers", "2", "--decode-tp", "2")
    r = csa("simulate", TRACE, *FLASH, "--engine", "sglang-0.5.23", *roles, "--json")
    assert r.code == 0, r.err
    d = json.loads(r.out)["runtime"]["disaggregation"]
    assert (d["prefill"]["tp"], d["prefill"]["dp"], d["prefill"]["ep"], d["prefill"]["ranks"]) == (1, 2, 2, 2)
    assert (d["decode"]["dp"], d["decode"]["ep"], d["decode"]["ranks"], d["decode"]["gpus"]) == (1, None, 2, 4)
    assert d["prefill"]["shape"] == "tp1 dp2 ep2" and d["prefill"]["gpus"] == 2
    shape = ("--tp", "1", "--dp", "2", "--ep", "2")
    agg = json.loads(csa("simulate", TRACE, *FLASH, "--engine", "sglang-0.5.23", *shape, "--json").out)
    agg_check = json.loads(csa("check", "deepseek-v4-flash", "--engine", "sglang-0.5.23", "--device-memory", "h200",
                               *shape, "--json").out)
    roles_check = json.loads(csa("check", "deepseek-v4-flash", "--engine", "sglang-0.5.23", "--device-memory", "h200",
                                 *roles, "--json").out)["disaggregation"]
    assert roles_check["prefill"]["check"]["budget"] == agg_check["budget"] == agg["budget"]
    assert roles_check["prefill"]["shape"] == "tp1 dp2 ep2" and roles_check["decode"]["ranks"] == 2
    # two ranks, one pool each (81,234 pages in all), and each rank's KV memory the aggregated run's
    assert d["prefill"]["usable_units"] == agg["runtime"]["occupancy"]["usable_units"]
    assert d["prefill"]["kv_memory_bytes"] == agg["budget"]["kv_memory_bytes"]


@pytest.mark.parametrize("extra, field", [
    (("--prefill-tp", "1", "--prefill-dp", "2", "--prefill-ep", "3", "--decode-tp", "2"), "--prefill-ep"),
    (("--prefill-tp", "2", "--decode-tp", "2", "--decode-dp", "0"), "--decode-dp"),
    (("--prefill-dp", "2", "--decode-tp", "2"), "--prefill-dp"),
    (("--prefill-tp", "2", "--decode-ep", "2"), "--decode-ep"),
    (("--prefill-tp", "2", "--decode-tp", "2", "--ep", "2"), "--ep"),
])
def test_bad_role_shapes_are_one_line(csa, extra, field):
    for command in (("simulate", TRACE, "--model", "deepseek-v4-flash"), ("check", "deepseek-v4-flash")):
        r = csa(*command, "--engine", "vllm-0.33", "--device-memory", "h200", *extra)
        assert r.code == 2 and field in r.err and len(r.err.strip().splitlines()) == 1, (command, r.code, r.err)


def test_the_rounds_end_at_release_times_that_reproduce_themselves_over_several_ranks():
    """Two prefill ranks share one decode rank's link (the coupling that keeps the link out of one replay):
    the last round's transfer ends are the very release times it held the blocks to, and recomputing the
    transfers from its prefill ends gives them again; the hold delayed admissions on both ranks. (Here one
    round does it: the shared link, not the prefill ends, sets every transfer's end, so delaying the prefills
    moves no release.)"""
    from csa_plan.planner.replay.protocol import RuntimeTrace
    from csa_plan.planner.serving.disaggregation import Role, footprint_of, serve_disaggregated_trace
    from dataclasses import replace as dc_replace

    p, q = _tiny_roles("vllm-0.33", 3_500_000_000)
    p = dc_replace(p, dp=Role(1, 1, 2).ranks)  # one worker of two DP ranks: requests 0, 2, 4 and 1, 3, 5
    n = 6
    trace = RuntimeTrace(np.arange(n, dtype=np.int64), np.full(n, 6000, dtype=np.int64), np.full(n, 2, dtype=np.int64))
    run = serve_disaggregated_trace(p, q, trace, 1e8)
    assert run.hold.converged and run.hold.rounds >= 1 and not run.result.refused
    done = np.asarray(run.prefill.finished_ns, dtype=np.int64)
    size = np.array([footprint_of(q.plan, 6000, {}).total_bytes] * n, dtype=np.int64)
    idx = np.arange(n)
    start, end = schedule_transfers(done, size, 1e8, idx % 2, idx % 1)
    assert start.tolist() == np.asarray(run.transfers.start_ns).tolist()
    assert end.tolist() == np.asarray(run.transfers.end_ns).tolist()
    # held to exactly those ends, the prefill pool replays to the same prefill ends: a fixed point
    from csa_plan.planner.replay.protocol import RuntimeTrace as RT
    from csa_plan.planner.serving.serve import serve_trace
    from csa_plan.planner.serving.transfer_hold import TransferHoldRuntime

    ptrace = RT(trace.arrival_ns, trace.prompt_tokens, np.ones(n, dtype=np.int64))
    again = serve_trace(p, ptrace, layer=lambda rt, k: TransferHoldRuntime(rt, end[idx % 2 == k].tolist()))
    assert np.asarray(again.finished_ns).tolist() == done.tolist()
    adm = np.asarray(run.prefill.admitted_ns, dtype=np.int64)
    # on each rank the next prompt waits for the one before it to finish its transfer (the pool holds one)
    for k in (0, 1):
        mine = idx[idx % 2 == k]
        assert all(adm[b] >= end[a] for a, b in zip(mine, mine[1:]))
    assert run.hold.admitted_later() >= 4


def test_a_run_short_of_its_fixed_point_says_so(monkeypatch):
    """HOLD_ROUNDS bounds the rounds: the two-prompt case needs two, so with one the run is flagged (JSON
    ``converged`` false, and the notes), never passed off as the answer."""
    import csa_plan.planner.serving.transfer_hold as th
    from csa_plan.planner.replay.protocol import RuntimeTrace
    from csa_plan.planner.serving.disaggregation import serve_disaggregated_trace

    monkeypatch.setattr(th, "HOLD_ROUNDS", 1)
    p, q = _tiny_roles("vllm-0.33", 3_500_000_000)
    two = RuntimeTrace(np.array([0, 1], dtype=np.int64), np.array([6000, 6000], dtype=np.int64),
                       np.array([2, 2], dtype=np.int64))
    run = serve_disaggregated_trace(p, q, two, 1e8)
    assert (run.hold.rounds, run.hold.converged) == (1, False)
    assert any("NOT converged after 1 rounds" in n for n in run.result.notes)


def test_the_hold_applies_where_the_ranks_are_replayed_together_under_vllm_s_balancer():
    """A pool of two vLLM DP ranks replayed together under vLLM's own balancer (serving/balanced.py) takes the
    transfer hold too: each rank's runtime is wrapped, and the shared clock waits for a held release as for an
    arrival. Without it the rounds would reproduce the unheld replay (no admission later). A disaggregated
    run itself deals a role's requests round-robin (its link queues are keyed by that deal) and says so."""
    from dataclasses import replace as dc_replace

    from csa_plan.planner.replay.protocol import RuntimeTrace
    from csa_plan.planner.serving.disaggregation import serve_disaggregated_trace
    from csa_plan.planner.serving.serve import dp_balancer, together
    from csa_plan.planner.serving.transfer_hold import prefill_with_holds

    p, q = _tiny_roles("vllm-0.33", 3_500_000_000)
    p = dc_replace(p, dp=2, balancer=dp_balancer("vllm-0.33", p.plan.settings, 2))
    assert together(p)
    n = 6
    trace = RuntimeTrace(np.arange(n, dtype=np.int64), np.full(n, 6000, dtype=np.int64), np.ones(n, dtype=np.int64))

    def transfers_of(done):  # each transfer lasts 50 ms from its prefill's end
        return done, np.where(done >= 0, done + 50_000_000, -1)

    held = prefill_with_holds(p, trace, transfers_of)
    assert held.converged and held.rounds >= 1 and held.admitted_later() >= 1
    adm = np.asarray(held.result.admitted_ns, dtype=np.int64)
    end = np.asarray(held.end_ns, dtype=np.int64)
    # each rank's pool holds one 6,000-token prompt: a later prompt is admitted only once some transfer ended
    assert all(any(adm[b] >= end[a] for a in range(b)) for b in range(2, n))
    run = serve_disaggregated_trace(p, q, RuntimeTrace(trace.arrival_ns, trace.prompt_tokens,
                                                       np.full(n, 2, dtype=np.int64)), 1e8)
    assert any("dealt round-robin over its data-parallel ranks" in line for line in run.result.notes)


class _HitInner(_Inner):
    """Request 0's prompt of 10 tokens admitted with a prefix-cache hit of 6: one step schedules positions 6..9."""

    def schedule(self):
        s = Step()
        if self.k == 0:
            s.admitted, s.requests, s.tokens = [0], [0], [4]
            s.prefix_hit_tokens, s.prefix_query_tokens = 6, 10
            s.batch.add_prefill(6, 4)
            s.prefill_tokens = 4
        self.k += 1
        return s


def test_a_decode_side_prefix_hit_is_neither_computed_nor_loaded():
    rt = RemoteKvRuntime(_HitInner(), [10], cached=True)
    rt.add(0)
    s = rt.schedule()
    # the hit (6 tokens) was never scheduled; positions 7..9 arrive over the link; position 10 is computed
    assert (s.batch.prefill, s.batch.prefill_pos, s.prefill_tokens) == (1, 10.0, 1)
    assert rt.loaded_tokens == 3 and rt.hit_tokens == {0: 6}


def _shared_prefix_trace(gap_ns):
    """Two requests sharing their first 4,096 tokens (8 Mooncake ids of 512): 4,096 and 5,096 tokens."""
    from csa_plan.planner.replay.protocol import RuntimeTrace

    ids = np.array(list(range(1, 9)) + list(range(1, 11)), dtype=np.int64)
    return RuntimeTrace(np.array([0, gap_ns], dtype=np.int64), np.array([4096, 5096], dtype=np.int64),
                        np.array([2, 2], dtype=np.int64), ids, np.array([0, 8, 18], dtype=np.int64), 512)


def test_the_decode_side_s_prefix_cache_spares_the_transfer_exactly_the_blocks_it_holds():
    """vLLM's decode instance looks up its own prefix cache and the NIXL consumer pulls only the rest
    (scheduler.py:1122-1141, nixl/pull_scheduler.py:34-65). The second request arrives 10 s after the first:
    the decode side still caches the first's blocks, so it hits 3,840 tokens there (the hybrid lookup's sliding
    window below the first prompt's boundary 4,095: the same hit the decode plan's aggregated replay finds), and
    its transfer moves the decode plan's footprint of the 1,256 tokens past the hit: 31,069,440 B, not the
    whole prompt's 46,103,040 B (what it moved before). The first moves its whole prompt."""
    from csa_plan.planner.serving.disaggregation import (decode_cache_figures, disagg_decode_caching,
                                                         footprint_of, serve_disaggregated_trace)
    from csa_plan.planner.serving.serve import serve_trace

    assert disagg_decode_caching("vllm-0.33", None) and not disagg_decode_caching("vllm-0.33", False)
    assert not disagg_decode_caching("sglang-0.5.23", None)  # its decode radix cache is off by default
    p, q = _tiny_roles("vllm-0.33", 3_500_000_000, decode_caching=True)
    two = _shared_prefix_trace(10**10)
    run = serve_disaggregated_trace(p, q, two, 1e8)
    assert run.decode_cache.hit_tokens.tolist() == [0, 3840]
    assert serve_trace(q, two).prefix_hit_tokens == 3840  # the decode plan's own prefix cache, aggregated
    whole = [footprint_of(q.plan, n, {}).total_bytes for n in (4096, 5096)]
    assert whole == [42_094_080, 46_103_040]
    assert np.asarray(run.transfers.bytes_per_gpu).tolist() == [42_094_080, 31_069_440]
    assert footprint_of(q.plan, 5096 - 3840, {}).total_bytes == 31_069_440
    assert np.asarray(run.transfers.saved_bytes_per_gpu).tolist() == [0, 15_033_600]
    assert (run.decode_cache.rounds, run.decode_cache.converged) == (2, True)
    t = run.transfers
    assert int(t.end_ns[1] - t.start_ns[1]) == int(np.ceil(31_069_440 / 1e8 * 1e9))  # the shorter transfer
    assert run.loaded_tokens == (4096 - 1) + (5096 - 3840 - 1)  # the hit is neither moved nor computed
    f = decode_cache_figures(run)
    assert (f["hit_tokens"], f["requests_hit"], f["bytes_saved_per_gpu"], f["bytes_saved"]) == (3840, 1, 15_033_600,
                                                                                             15_033_600)
    # without the decode side's cache (SGLang's default; --no-enable-prefix-caching): the whole prompt moves
    _, q0 = _tiny_roles("vllm-0.33", 3_500_000_000, decode_caching=False)
    old = serve_disaggregated_trace(p, q0, two, 1e8)
    assert np.asarray(old.transfers.bytes_per_gpu).tolist() == whole and not old.decode_cache.enabled
    assert int(old.result.first_token_ns[1]) > int(run.result.first_token_ns[1])  # TTFT shrinks with the transfer


def test_a_run_whose_decode_hits_did_not_settle_says_so(monkeypatch):
    """One round allowed: the transfers moved whole prompts while the decode replay hit 3,840 tokens, so the run
    reports that it did not reach hits that reproduce themselves (and its notes say so), never a silent figure."""
    import csa_plan.planner.serving.disaggregation as dis

    monkeypatch.setattr(dis, "DECODE_CACHE_ROUNDS", 1)
    p, q = _tiny_roles("vllm-0.33", 3_500_000_000, decode_caching=True)
    run = dis.serve_disaggregated_trace(p, q, _shared_prefix_trace(10**10), 1e8)
    assert (run.decode_cache.rounds, run.decode_cache.converged) == (1, False)
    assert np.asarray(run.transfers.bytes_per_gpu).tolist() == [42_094_080, 46_103_040]
    assert any("NOT settled" in n for n in run.result.notes)
    assert dis.decode_cache_figures(run)["converged"] is False


def test_each_admission_s_own_hit_is_the_runtime_s_where_it_reports_it():
    """A step that resumes request 5 (seen before, its hit 256 in the step's total) and admits request 7 fresh,
    chunked to 100 of its 1,000 tokens with no hit: from the total alone 7's hit reads as 900 (its prompt less
    its chunk); the runtime's own report (vLLM's and SGLang's schedulers fill ``Step.admission_hit``) says 0."""
    from csa_plan.planner.replay.protocol import admission_hits

    step = Step(requests=[5, 7], tokens=[44, 100], admitted=[5, 7], prefix_hit_tokens=256)
    prompts = {5: 300, 7: 1000}
    assert admission_hits(step, prompts, {5}) == {7: 900}  # the step's total alone cannot tell
    step.admission_hit = {5: 256, 7: 0}
    assert admission_hits(step, prompts, {5}) == {7: 0}
