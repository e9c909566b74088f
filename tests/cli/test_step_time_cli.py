"""--step-time and the latency answers through the command line (issue 35): every output names its
step-time source, a source the machine lacks is one line and exit 2, the physics clock depends on
the card, and a sweep's latency bounds and step-time source reach its answer."""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from helpers import EXAMPLES

TRACE = str(EXAMPLES / "traces" / "azure_conv_sample_200.csv")
FLASH = ["--model", "deepseek-v4-flash", "--tp", "4", "--engine", "vllm-0.33"]


def _doc(csa, *args):
    r = csa("simulate", TRACE, *FLASH, *args, "--json")
    assert r.code == 0, r.err
    return r.json()


def test_outputs_name_the_source(csa):
    physics = _doc(csa, "--device-memory", "h200")
    st = physics["time"]["step_time"]
    assert st["source"] == "physics" and "h200" in st["label"] and "vLLM 0.33.0" in st["label"] and st["band"]
    assert physics["runtime"]["step_time"]["source"] == "physics"
    fixed = _doc(csa, "--device-memory", "h200", "--tpot-ms", "20")
    assert fixed["time"]["step_time"]["source"] == "fixed"
    text = csa("simulate", TRACE, *FLASH, "--device-memory", "h200")
    assert "step time: physics: roofline on h200 x4" in " ".join(text.out.split())
    assert "time per output token" in text.out


def test_physics_depends_on_the_card_fixed_does_not(csa):
    h200 = _doc(csa, "--device-memory", "h200")["runtime"]
    b200 = _doc(csa, "--device-memory", "b200")["runtime"]
    assert h200["tpot"]["p50_s"] != b200["tpot"]["p50_s"]
    f_h200 = _doc(csa, "--device-memory", "h200", "--step-time", "fixed")["runtime"]
    f_b200 = _doc(csa, "--device-memory", "b200", "--step-time", "fixed")["runtime"]
    assert f_h200["tpot"] == f_b200["tpot"]  # the constants: the same clock on every card


def test_step_time_and_constants_conflict(csa):
    r = csa("simulate", TRACE, *FLASH, "--device-memory", "h200", "--step-time", "physics", "--tpot-ms", "20")
    assert r.code == 2 and "constants of --step-time fixed" in r.err


@pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is not None,
                    reason="aiconfigurator-core is installed here")
def test_measured_without_the_extra_is_one_line(csa):
    r = csa("simulate", TRACE, *FLASH, "--device-memory", "h200", "--step-time", "measured")
    assert r.code == 2 and not r.out
    assert "csa-plan[perf]" in r.err and "Traceback" not in r.err
    assert len(r.err.strip().splitlines()) == 1


def test_closed_loop_bounds_requests_in_flight(csa):
    d = _doc(csa, "--device-memory", "h200", "--max-concurrency", "4")
    assert d["time"]["max_concurrency"] == 4
    assert d["runtime"]["occupancy"]["peak_running"] <= 4
    assert d["runtime"]["served"] == 200


SPEC = """name: latency
workload: azure_conv_sample_200.csv
grid: {{model: deepseek-v4-flash, device: [h200, b200], tp: 4, max_seq_len: 65536, engine: vllm-0.33}}
constraints: {{zero_refusals: true, wait_p99_max_s: 5, tpot_p99_max_ms: {tpot}}}
search: {{rel_tol: 0.2, max_scale: 4}}
"""


def test_sweep_latency_bound_and_device_axis(tmp_path, csa):
    shutil.copy(TRACE, tmp_path / "azure_conv_sample_200.csv")
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(tpot=0.001))  # no deployment streams a token in a microsecond
    doc = csa("sweep", str(spec), "--json").json()
    points = doc["points"] if "points" in doc else doc["results"]
    assert all(not p["feasible"] and any("TPOT p99" in v for v in p["violations"]) for p in points)
    spec.write_text(SPEC.format(tpot=10_000))
    doc = csa("sweep", str(spec), "--json").json()
    points = doc["points"] if "points" in doc else doc["results"]
    figures = {p["key"].split(",")[1]: p["runtime"] for p in points}
    assert figures["device=h200"]["tpot_p99_s"] != figures["device=b200"]["tpot_p99_s"]
    assert all("physics" in f["step_time"] for f in figures.values())


def test_sweep_step_time_axis(tmp_path, csa):
    """The step-time source as a grid axis: the same deployment under each clock, named in each point."""
    shutil.copy(TRACE, tmp_path / "azure_conv_sample_200.csv")
    spec = tmp_path / "s.yaml"
    spec.write_text("name: clocks\nworkload: azure_conv_sample_200.csv\n"
                    "grid: {model: deepseek-v4-flash, device: h200, tp: 4, max_seq_len: 65536, engine: vllm-0.33,\n"
                    "       step_time: [physics, fixed]}\n"
                    "constraints: {zero_refusals: true, wait_p99_max_s: 5}\nsearch: {rel_tol: 0.2, max_scale: 4}\n")
    doc = csa("sweep", str(spec), "--json").json()
    points = doc["points"] if "points" in doc else doc["results"]
    by = {p["key"].rsplit("step_time=", 1)[1]: p["runtime"] for p in points}
    assert by["physics"]["step_time"].startswith("physics") and by["fixed"]["step_time"].startswith("fixed")
    assert by["physics"]["tpot_p99_s"] != by["fixed"]["tpot_p99_s"]
    r = csa("sweep", str(spec), "--step-time", "fixed")
    assert r.code == 2 and "step_time grid axis" in r.err


def test_a_raw_size_asks_for_the_card_under_physics(csa):
    """--device-memory 288GB names no card: the physics clock would read another card's roofline, so it is
    bad input asking for --gpu (issue 44); --step-time fixed keeps working on a raw size."""
    r = csa("simulate", TRACE, *FLASH, "--device-memory", "288GB")
    assert r.code == 2 and "--gpu NAME" in r.err
    assert csa("simulate", TRACE, *FLASH, "--device-memory", "288GB", "--step-time", "fixed").code == 0


def test_blackwell_ultra_and_nvl72_cards_time_steps(csa):
    for gpu in ("b300", "gb200", "gb300"):
        st = _doc(csa, "--gpu", gpu)["time"]["step_time"]
        assert st["source"] == "physics" and f"roofline on {gpu} x4" in st["label"], gpu


def test_dp_and_ep_reach_the_clock(csa):
    """vLLM --dp 4 --ep 4: each rank is costed as attention TP 1 of four DP ranks with the experts over EP."""
    r = csa("simulate", TRACE, "--model", "deepseek-v4-flash", "--tp", "1", "--dp", "4", "--ep", "4", "--engine",
            "vllm-0.33", "--gpu", "b200", "--json")
    assert r.code == 0, r.err
    assert "a rank: attention TP 1, DP 4, MoE EP 4 (vllm-0.33)" in r.json()["time"]["step_time"]["label"]
