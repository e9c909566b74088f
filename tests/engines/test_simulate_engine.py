"""simulate --engine: the engine's charges through the one ledger, in its own units, with its caps."""

from __future__ import annotations

import pytest

from csa_plan.planner.engines.engine import Phase
from csa_plan.planner.engines.registry import get_engine
from csa_plan.planner.engines.settings import EngineSettings
from csa_plan.planner.reserve.engine_run import EngineRun
from csa_plan.planner.loaders.model_files import load_model
from csa_plan.planner.reserve import Outcome, Policy, Reserve, SimConfig, prepare, simulate
from csa_plan.planner.reserve.replay import replay
from csa_plan.planner.units import GiB
from csa_plan.planner.workloads import load_workload

from helpers import EXAMPLES

AZURE = str(EXAMPLES / "traces" / "azure_conv_sample_200.csv")
PRO = load_model("deepseek-v4-pro")


def run(engine: str, kv: int, reserve=Reserve.FIT, policy=Policy.REFUSE, **settings):
    config = SimConfig(reserve=reserve, policy=policy, max_seq_len=65_536,
                       engine=EngineRun(engine, EngineSettings(**settings), kv))
    scn = prepare(PRO, load_workload(AZURE), config)
    fast = simulate(scn)
    ref, ledger = replay(scn)
    assert fast == ref and fast.decisions.same_as(ref.decisions)
    assert ledger.at_baseline and fast.baseline_ok
    return scn, fast


@pytest.mark.parametrize("policy", [Policy.REFUSE, Policy.QUEUE])
def test_vllm_on_the_azure_trace_equals_the_ledger_replay_in_blocks(policy):
    scn, result = run("vllm-0.33", 40 * GiB, policy=policy)
    plan = get_engine("vllm-0.33").configure(PRO, EngineSettings(), 65_536)
    bpb = plan.block_bytes
    assert scn.config.limit_bytes == (40 * GiB // bpb - 1) * bpb  # the null block held back
    assert scn.config.max_running == 1024
    for tokens, (bundle,) in zip(scn.tier_tokens, scn.bundles):
        assert bundle.total_bytes == plan.footprint(tokens, Phase.PREFILL).units * bpb
        assert bundle.total_bytes % bpb == 0
    assert result.peak_bytes % bpb == 0 and result.peak_bytes <= scn.config.limit_bytes
    if policy is Policy.REFUSE:
        assert result.refusal_count(Outcome.OUT_OF_MEMORY) > 0  # 40 GiB holds only a few 64K budgets


def test_running_request_cap_refuses_and_is_replayed_identically():
    scn, result = run("vllm-0.33", 40 * GiB, max_num_seqs=2)
    assert scn.config.max_running == 2
    assert result.refusal_count(Outcome.RUNNING_CAP) > 0 and result.peak_in_flight <= 2


def test_sglang_charges_full_pages_under_its_cap():
    scn, result = run("sglang-0.5.23", 60 * GiB, max_running_requests=16)
    plan = get_engine("sglang-0.5.23").configure(PRO, EngineSettings(max_running_requests=16), 65_536)
    page = plan.full_page_bytes
    assert all(b.total_bytes % page == 0 for (b,) in scn.bundles)
    assert scn.config.limit_bytes == plan.pool_config(60 * GiB)["full"] // 256 * page
    assert result.peak_in_flight <= 16


def test_cli_names_the_engine(csa):
    """vLLM's runtime is replayed step by step (issue 25): a reservation option is refused, saying why."""
    r = csa("simulate", AZURE, "--model", "deepseek-v4-pro", "--engine", "vllm-0.33", "--kv-memory", "40GiB",
            "--max-seq-len", "65536", "--json")
    doc = r.json()
    assert doc["engine"]["name"] == "vllm-0.33" and doc["engine"]["version"] == "0.33.0"
    assert doc["engine"]["pool"]["num_blocks"] == 40 * GiB // 1_435_968
    assert doc["runtime"]["engine"] == "vLLM 0.33.0" and r.code in (0, 3)
    refused = csa("simulate", AZURE, "--model", "deepseek-v4-pro", "--engine", "vllm-0.33", "--kv-memory", "40GiB",
                  "--max-seq-len", "65536", "--reserve", "fit")
    assert refused.code == 2 and "reserves nothing per request" in refused.err
    assert csa("simulate", AZURE, "--model", "deepseek-v4-pro", "--layout", "vllm").code == 2


def test_sweep_engine_axis(csa, tmp_path):
    # the shipped example names deployable engines only (issue 48 item 8); null adds csa-plan's own layout
    text = (EXAMPLES / "sweeps" / "engines.yaml").read_text()
    spec = tmp_path / "engines.yaml"
    spec.write_text(text.replace("../traces/azure_conv_sample_200.csv", AZURE)
                    .replace("engine: [vllm-0.33, sglang-0.5.23]", "engine: [null, vllm-0.33, sglang-0.5.23]"))
    r = csa("sweep", str(spec), "--json")
    assert r.code == 0, r.err
    doc = r.json()
    results = doc["results"]
    assert {res["point"]["engine"] for res in results} == {None, "vllm-0.33", "sglang-0.5.23"}
    vllm = [res for res in results if res["point"]["engine"] == "vllm-0.33"]
    assert all(res["key"].endswith(",engine=vllm-0.33") for res in vllm)
    # an engine point replays the engine's own scheduler (it queues, never refuses for memory): all
    # 200 served on one H200, where the old reservation model of vLLM's in-flight budget refused some
    one = {res["point"]["engine"]: res for res in results if res["point"]["dp"] == 1}
    assert one[None]["refused"] == 0 and one[None]["model"] == "reservation" and one[None]["runtime"] is None
    for engine in ("vllm-0.33", "sglang-0.5.23"):
        assert one[engine]["model"] == "runtime" and one[engine]["refused"] == 0
        assert one[engine]["runtime"]["served"] == 200 and one[engine]["wait_p99_ns"] > 0


def test_sweep_engine_axis_rejects_unknown_and_retired(tmp_path):
    from csa_plan.planner.errors import BadInput
    from csa_plan.planner.sweep.spec import parse_spec

    base = {"workload": AZURE, "grid": {"model": "deepseek-v4-pro", "device": "h200"}}
    for bad, needle in (("tpu", "unknown engine 'tpu'"), ("vllm-fp4", "use --engine vllm-0.33")):
        spec = {**base, "grid": {**base["grid"], "engine": bad}}
        with pytest.raises(BadInput, match=needle):
            parse_spec(spec, str(tmp_path / "s.yaml"))
    # a bare engine name is its newest modelled release, named as such in the sweep's points
    parsed = parse_spec({**base, "grid": {**base["grid"], "engine": "vllm"}}, str(tmp_path / "s.yaml"))
    assert "vllm-0.33" in repr(parsed) and "'vllm'" not in repr(parsed)
