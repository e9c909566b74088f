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
                                                     peak_with_hold, schedule_transfers)

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


class _Series:
    def __init__(self, end_ns, total):
        self.end_ns = np.array(end_ns, dtype=np.int64)
        self.total_used = np.array(total, dtype=np.int64)
        self.buckets = len(end_ns)


def test_held_blocks_add_to_the_peak_until_the_transfer_ends():
    s = _Series([10, 20, 30, 40], [5, 3, 8, 2])
    # request 0 holds 4 units from 20 to 35, request 1 holds 6 from 30 to 30 (released at once)
    assert peak_with_hold(s, [20, 30], [35, 30], [4, 6]) == 12  # at 30: 8 + 4
    assert peak_with_hold(s, [20, -1], [45, -1], [4, 6]) == 12
    assert peak_with_hold(s, [], [], []) == 8


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
    assert d["prefill"]["peak_units_with_transfer_hold"] >= d["prefill"]["peak_units"]
    assert d["prefill"]["transfer_hold_fits"] is (d["prefill"]["peak_units_with_transfer_hold"]
                                                   <= d["prefill"]["usable_units"])
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
