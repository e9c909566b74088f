"""csa-plan sweep: static skips, ranking against hand-run points, executors, resume, exit codes."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from helpers import EXAMPLES

SMALL = str(EXAMPLES / "sweeps" / "small.yaml")
SAMPLE = EXAMPLES / "traces" / "azure_conv_sample_200.csv"


def _spec(tmp_path, body: str, name: str = "s.yaml") -> str:
    (tmp_path / "trace.csv").write_text(SAMPLE.read_text())
    path = tmp_path / name
    path.write_text(body)
    return str(path)


def test_static_skips_counted_with_reasons():
    from csa_plan.planner.sweep.evaluate import SkipReason, triage
    from csa_plan.planner.sweep.spec import load_spec

    spec = load_spec(SMALL)
    plan = triage(spec)
    assert len(spec.points) == 54
    assert dict(plan.skip_counts()) == {"BadDeployment": 18, "NoMemoryLeft": 18, "NeverFits": 3}
    assert len(plan.to_run) == 15
    by_reason = {s.reason: s for s in plan.skipped}
    assert by_reason[SkipReason.BAD_DEPLOYMENT].detail == "--tp: layer 0: num_heads 128 is not divisible by tp 3"
    # the weights are counted (issue 36 item 3: `reserved` means what --reserved means) and the skip says so
    assert by_reason[SkipReason.NO_MEMORY_LEFT].detail == (
        "the weights (60,961,132,376 B per device) and start-up reserves (33,285,996,544 B) exceed the "
        "85,520,809,984 B usable of device memory 85,520,809,984 B")
    assert "tp=3" not in " ".join(p.key for p in plan.to_run)
    assert all(p.device == "h200" for p in plan.to_run)


def test_ranked_answer_matches_each_point_run_by_hand(csa):
    """Every remaining point through `csa-plan simulate` (target run) and find_capacity (rate)."""
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.placement import Placement
    from csa_plan.planner.reserve.capacity import find_capacity
    from csa_plan.planner.reserve import Reserve, SimConfig, prepare
    from csa_plan.planner.workloads import load_workload

    r = csa("sweep", SMALL, "--jobs", "1", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["grid"] == {"points": 54, "skipped": 39, "resumed": 0, "ran": 15, "feasible": 11}
    wl = load_workload(str(SAMPLE))
    spec = load_model("deepseek-v4-pro")
    base_rate = 200 * 1e9 / int(wl.arrival_ns[-1] - wl.arrival_ns[0])
    by_hand = []
    for row in doc["results"]:
        p = row["point"]
        fit = p["reserve"] != "max"
        bucket = int(p["reserve"].split("/")[1]) if fit else 4096
        sim = csa("simulate", str(SAMPLE), "--model", "deepseek-v4-pro", "--tp", str(p["tp"]), "--dp", str(p["dp"]),
                  "--device-memory", "h200", "--reserved", "31GiB", "--reserve", "fit" if fit else "max",
                  *(("--bucket", str(bucket)) if fit else ()),  # --bucket without fit is refused (issue 47)
                  "--json")
        assert sim.code in (0, 3), sim.err
        target = sim.json()
        assert row["refused"] == target["requests"]["refused"] and row["admitted"] == target["requests"]["admitted"]
        assert row["peak_bytes"] == target["peak"]["bytes"]
        feasible = sim.code == 0
        assert row["feasible"] is feasible
        assert p["limit_bytes"] == target["device_limit"]["limit_bytes"]  # the same budget: weights counted
        config = SimConfig(placement=Placement(tp=p["tp"], dp=p["dp"]), limit_bytes=p["limit_bytes"],
                           reserve=Reserve.FIT if fit else Reserve.MAX, bucket=bucket)
        cap = find_capacity(prepare(spec, wl, config), rel_tol=0.01)
        assert row["sustainable_rate_scale"] == cap.rate_scale
        per_device = cap.rate_scale * base_rate / p["devices"]
        assert row["rate_per_device_per_s"] == pytest.approx(per_device, rel=1e-12)
        assert row["rate_limited_by_memory"] is (not cap.capped)
        if feasible:  # a search ceiling is no rate: such a point ranks by devices only (issue 12)
            by_hand.append((p["devices"], 0 if cap.capped else 1, 0.0 if cap.capped else -per_device, len(by_hand),
                            row["key"]))  # ties in the grid's order
    assert doc["ranked"] == [key for *_, key in sorted(by_hand)]
    assert doc["answer"]["key"] == doc["ranked"][0]
    assert doc["answer"]["label"] == "device h200, tp 8, dp 1, reserve fit/4096"
    front_devices = [doc["results"][[x["key"] for x in doc["results"]].index(k)]["devices"]
                     for k in doc["pareto_front"]]
    # sustainable means steady (issue 45): the 200-request sample is repeated until its arrivals span many
    # request lifetimes, so memory limits every point's rate (no search ceiling, no "not limited") and more
    # replicas buy more rate: the front climbs through every device count
    assert not doc["not_limited_by_memory"]
    assert front_devices == [8, 16, 32, 64]
    rates = [doc["results"][[x["key"] for x in doc["results"]].index(k)]["sustainable_rate_per_s"]
             for k in doc["pareto_front"]]
    assert rates == sorted(rates) and rates[-1] > 10 * rates[0]
    assert all(r["steady"].startswith("steady — window ") for r in doc["results"] if r["sustainable_rate_scale"])


def _result(key: str, devices: int, rate: float | None, feasible: bool = True):
    from csa_plan.planner.sweep.results import PointResult

    return PointResult(key=key, devices=devices, requests=1, admitted=1, refused=0, refusals=(), wait_p99_ns=0,
                       peak_bytes=1, mean_utilization=0.5, peak_utilization=0.5, sustainable_rate_scale=rate,
                       at_least=False, probes=1, sustainable_rate_per_s=rate,
                       rate_per_device_per_s=None if rate is None else rate / devices, feasible=feasible,
                       violations=() if feasible else ("x",))


def test_rank_and_pareto_front():
    from csa_plan.planner.sweep.evaluate import Objective, pareto_front, rank

    rs = [_result("a", 8, 80.0), _result("b", 8, 40.0), _result("c", 1, 4.0), _result("d", 2, 3.0),
          _result("e", 16, 100.0), _result("f", 1, 500.0, feasible=False), _result("g", 4, 60.0)]
    order = {r.key: i for i, r in enumerate(rs)}
    assert [r.key for r in rank(rs, Objective.FEWEST_DEVICES, order)] == ["c", "d", "g", "a", "b", "e"]
    assert [r.key for r in rank(rs, Objective.RATE_PER_DEVICE, order)] == ["g", "a", "e", "b", "c", "d"]
    assert [r.key for r in pareto_front(rs, order)] == ["c", "g", "a", "e"]


def test_point_result_round_trips_through_the_resume_line():
    from csa_plan.planner.sweep.resume import read_resume, resume_line

    r = replace(_result("k", 2, 1.0 / 3.0), requests=3, admitted=0, refused=3, refusals=(("OutOfMemory", 3),),
                wait_p99_ns=None)
    text = resume_line("d1", r) + "\n" + '{"torn'
    assert read_resume(text, "f.jsonl", "d1", {"k"}) == {"k": r}


def test_local_pool_and_serial_return_identical_results():
    from csa_plan.planner.sweep.evaluate import Task, evaluate, triage
    from csa_plan.planner.sweep.spec import load_spec
    from csa_plan.planner.sweep.executors import LocalPoolExecutor, SerialExecutor

    spec = load_spec(SMALL)
    tasks = [Task(spec.context, p) for p in triage(spec).to_run]
    serial = list(SerialExecutor().map(evaluate, tasks))
    pooled = sorted(LocalPoolExecutor(workers=2).map(evaluate, tasks), key=lambda r: [t.point.key for t in tasks].index(r.key))
    assert pooled == serial and len(serial) == 15


def test_ray_and_local_executors_return_identical_results():
    ray = pytest.importorskip("ray", reason="Ray is the [ray] extra; the test extra installs it")
    from csa_plan.planner.sweep.evaluate import Task, evaluate, triage
    from csa_plan.planner.sweep.spec import load_spec
    from csa_plan.planner.sweep.executors import RayExecutor, SerialExecutor

    spec = load_spec(SMALL)
    tasks = [Task(spec.context, p) for p in triage(spec).to_run]
    local = {r.key: r for r in SerialExecutor().map(evaluate, tasks)}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = {r.key: r for r in RayExecutor().map(evaluate, tasks)}
    finally:
        ray.shutdown()
    assert remote == local and len(local) == 15
    assert [json.dumps(remote[k].as_dict()) for k in local] == [json.dumps(local[k].as_dict()) for k in local]


def test_resume_keeps_finished_points_and_gives_the_same_answer(csa, tmp_path):
    resume = tmp_path / "done.jsonl"
    first = csa("sweep", SMALL, "-j", "1", "--json", "--resume", str(resume))
    assert first.code == 0, first.err
    lines = resume.read_text().splitlines()
    assert len(lines) == 16 and json.loads(lines[0])["schema"] == "csa-plan/sweep-resume/v1"  # header + 15 points
    resume.write_text("\n".join(lines[:6]) + "\n" + lines[6][:40])  # as if interrupted mid-write
    second = csa("sweep", SMALL, "-j", "1", "--json", "--resume", str(resume))
    assert second.code == 0, second.err
    a, b = first.json(), second.json()
    assert b["grid"]["resumed"] == 5 and b["grid"]["ran"] == 10
    assert b["results"] == a["results"] and b["ranked"] == a["ranked"] and b["pareto_front"] == a["pareto_front"]


def test_resume_file_from_another_spec_is_bad_input(csa, tmp_path):
    resume = tmp_path / "done.jsonl"
    assert csa("sweep", SMALL, "-j", "1", "--json", "--resume", str(resume)).code == 0
    other = _spec(tmp_path, "workload: trace.csv\ngrid: {model: deepseek-v4-pro, device: h200}\n")
    r = csa("sweep", other, "-j", "1", "--resume", str(resume))
    assert r.code == 2
    assert "done.jsonl:1: spec_sha256: written for another sweep spec" in r.err and "nothing" not in r.err
    assert len(resume.read_text().splitlines()) == 16  # untouched


@pytest.mark.parametrize("zero_refusals, reason, ran", [
    ("true", "RequestExceedsCapacity", 0),
    ("false", None, 1),
])
def test_request_longer_than_max_seq_len(csa, tmp_path, zero_refusals, reason, ran):
    path = _spec(tmp_path, "workload: trace.csv\n"
                 "grid: {model: deepseek-v4-pro, device: h200, reserved: {weights: 0, runtime: 100GiB}, max_seq_len: 2048, reserve: fit}\n"
                 f"constraints: {{zero_refusals: {zero_refusals}}}\n")
    r = csa("sweep", path, "-j", "1", "--json")
    doc = r.json()
    assert doc["grid"]["ran"] == ran
    if reason:
        assert r.code == 3 and doc["skipped"]["counts"] == {reason: 1}
        assert doc["skipped"]["points"][0]["detail"] == "a request of 4,176 tokens exceeds max_seq_len 2,048"
    else:
        assert r.code == 0 and doc["answer"]["refusals"] == {"RequestExceedsCapacity": 15}  # rows with prompt + output > 2048


def test_no_point_meets_the_constraints_exits_3(csa, tmp_path):
    path = _spec(tmp_path, "workload: trace.csv\ngrid: {model: deepseek-v4-pro, device: h200, reserved: {weights: 0, runtime: 136GiB}, "
                 "reserve: fit}\nconstraints: {min_mean_utilization: 0.99}\n")
    r = csa("sweep", path, "-j", "1")
    assert r.code == 3
    assert "no point meets the constraints" in r.out and "mean utilization" in r.out


def test_weights_reserved_split_over_tp_and_pp(tmp_path):
    from csa_plan.planner.sweep.spec import load_spec

    path = _spec(tmp_path, "workload: trace.csv\ngrid: {model: deepseek-v4-pro, device: h200, tp: [1, 8], pp: [1, 3],"
                 " reserved: {weights: 1000GB, runtime: 10GiB}}\n")
    got = {(p.tp, p.pp): p.reserved_bytes for p in load_spec(path).points}
    gib = 10 * (1 << 30)
    assert got == {(1, 1): 10**12 + gib, (1, 3): 333_333_333_334 + gib, (8, 1): 125 * 10**9 + gib,
                   (8, 3): 41_666_666_667 + gib}


@pytest.mark.parametrize("body, message", [
    ("workload: trace.csv\ngrid: {model: deepseek-v4-pro, device: h200, colour: red}\n",
     "s.yaml: grid.colour: unknown key"),
    ("workload: nope.csv\ngrid: {model: deepseek-v4-pro, device: h200}\n", "s.yaml: workload: no such file"),
    ("workload: trace.csv\ngrid: {model: deepseek-v4-pro, device: h200, policy: [refuse, queue]}\n",
     "s.yaml: constraints.wait_p99_max_s: required when the grid has policy queue"),
    ("workload: trace.csv\ngrid: {model: deepseek-v4-pro, device: 12 parsecs}\n", "s.yaml: grid.device: cannot read size"),
    ("workload: trace.csv\ngrid: {model: deepseek-v4-pro, device: h200, tp: [0]}\n",
     "s.yaml: grid.tp[0]: must be at least 1, got 0"),
    ("workload: trace.csv\ngrid: {model: deepseek-v4-pro, device: h200, reserve: [fit/x]}\n",
     "s.yaml: grid.reserve[0]: cannot read the bucket"),
    ("workload: trace.csv\ngrid: {model: deepseek-v4-pro, device: h200}\nobjective: cheapest\n",
     "s.yaml: objective: unknown value 'cheapest'"),
])
def test_bad_spec_exits_2_with_one_line(csa, tmp_path, body, message):
    r = csa("sweep", _spec(tmp_path, body), "-j", "1")
    assert r.code == 2
    assert len(r.err.strip().splitlines()) == 1 and message in r.err


def test_human_output_and_plot(csa, tmp_path):
    png = tmp_path / "front.png"
    r = csa("sweep", SMALL, "-j", "1", "--plot", str(png))
    assert r.code == 0, r.err
    assert "skipped BadDeployment: 18" in r.out and "Pareto front" in r.out
    assert "answer: device h200, tp 8, dp 1, reserve fit/4096" in r.out
    pytest.importorskip("matplotlib", reason="--plot draws only with the [plot] extra")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"



def test_search_bounds_are_parsed_and_checked():
    import yaml

    from csa_plan.planner.errors import BadInput
    from csa_plan.planner.sweep.spec import parse_spec

    spec = yaml.safe_load((EXAMPLES / "sweeps" / "small.yaml").read_text())
    spec["workload"] = str((EXAMPLES / "sweeps" / spec["workload"]).resolve())
    spec["search"] = {"rel_tol": 0.05, "min_scale": 0.5, "max_scale": 4}
    search = parse_spec(spec, "s.yaml").context.search
    assert (search.rel_tol, search.min_scale, search.max_scale) == (0.05, 0.5, 4.0)
    spec["search"] = {"min_scale": 0.5, "max_scale": 0.25}
    with pytest.raises(BadInput, match="search.max_scale"):
        parse_spec(spec, "s.yaml")


def test_find_capacity_stays_within_its_bounds():
    """An unlimited deployment never saturates: the search stops at max_scale and says 'at least'."""
    from csa_plan.planner.loaders.model_files import load_model
    from csa_plan.planner.reserve.capacity import find_capacity
    from csa_plan.planner.reserve import SimConfig, prepare
    from csa_plan.planner.workloads import load_workload

    scn = prepare(load_model("deepseek-v4-flash"), load_workload(str(SAMPLE)), SimConfig())
    cap = find_capacity(scn, scale_max=8.0)
    assert cap.rate_scale == 8.0 and cap.capped
    assert max(scale for scale, _ in cap.probes) <= 8.0
