"""csa-plan run-gpu: the no-GPU one-liners and exit 5, bad input, refusal, and the emulated run."""

from __future__ import annotations

import sys

import pytest

from csa_plan.kernels import gpu_env


def test_no_cupy_prints_one_line_and_exits_5(csa, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ImportError
    r = csa("run-gpu", "--tiny")
    assert r.code == 5
    assert r.err.strip().splitlines() == [f"csa-plan: {gpu_env.NO_CUPY}"]
    assert r.out == ""


@pytest.mark.parametrize("status,msg,expected", [
    (35, "cudaErrorInsufficientDriver: CUDA driver version is insufficient", gpu_env.OLD_DRIVER),
    (100, "cudaErrorNoDevice: no CUDA-capable device is detected", gpu_env.NO_DEVICE),
    (3, "cudaErrorInitializationError: initialization error", gpu_env.NO_DRIVER),
    (None, "OSError: libcuda.so.1: cannot open shared object file", gpu_env.NO_DRIVER),
])
def test_cuda_errors_map_to_one_line(status, msg, expected):
    assert gpu_env.classify_cuda_error(status, msg) == expected


class _FakeRuntimeError(Exception):
    def __init__(self, status):
        super().__init__(f"status {status}")
        self.status = status


@pytest.mark.parametrize("status,expected", [(35, gpu_env.OLD_DRIVER), (100, gpu_env.NO_DEVICE),
                                             (3, gpu_env.NO_DRIVER), ("zero", gpu_env.NO_DEVICE)])
def test_fake_cupy_runtime_failures_exit_5(csa, monkeypatch, status, expected):
    import types

    def count():
        if status == "zero":
            return 0
        raise _FakeRuntimeError(status)

    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=count))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    r = csa("run-gpu", "--tiny")
    assert r.code == 5
    assert r.err.strip() == f"csa-plan: {expected}"


def test_steps_below_16_is_bad_input(csa):
    r = csa("run-gpu", "--tiny", "--backend", "emulate", "--steps", "15")
    assert r.code == 2 and "--steps" in r.err


def test_limit_uses_the_shared_size_parser(csa):
    r = csa("run-gpu", "--tiny", "--backend", "emulate", "--limit", "lots")
    assert r.code == 2 and "cannot read size" in r.err


def test_limit_below_the_plan_is_refused_before_running(csa):
    r = csa("run-gpu", "--tiny", "--backend", "emulate", "--limit", "1000B")
    assert r.code == 3
    assert "OutOfMemory" in r.err and "1,000 bytes" in r.err


def test_refused_layer_exits_3(csa, tmp_path):
    spec = tmp_path / "m.yaml"
    spec.write_text("name: bad\nnum_heads: 8\nmax_seq_len: 1024\nlayers:\n"
                    "  - {compression_ratio: 128, device_count: 2}\n")
    r = csa("run-gpu", str(spec), "--backend", "emulate")
    assert r.code == 3, r.err
    assert r.err.strip().splitlines()[0].startswith("csa-plan: refused: ")
    assert "MultiDeviceAmbiguity" in r.err


def test_emulated_run_passes_every_applicable_check(csa):
    r = csa("run-gpu", "--tiny", "--backend", "emulate", "--json", "--limit", "10MB")
    assert r.code == 0, r.out + r.err
    doc = r.json()
    assert doc["schema"] == "csa-plan/run-gpu/v1" and doc["exit_code"] == 0 and doc["failed"] == 0
    status = {(c["name"], c["layer"]): c["status"] for c in doc["checks"]}
    names = {c["name"] for c in doc["checks"]}
    assert {"buffers laid out as planned", "output vs oracle", "decode = full recompute at every step",
            "selected record sets", "workspace addresses stable", "limit below the need refused",
            "requests isolated in the ledger", "teardown back to baseline",
            "unlimited ledger accounts without refusing", "device bytes = planned + pool rounding"} <= names
    assert status[("device bytes = planned + pool rounding", None)] == "n/a"
    assert sum(s == "pass" for s in status.values()) == len(doc["checks"]) - 1
    assert {l["ratio"] for l in doc["layers"]} == {4, 128}
    assert doc["planned_bytes"] == 3 * sum(l["planned"]["total"] for l in doc["layers"])
    assert doc["steps"] >= 16
    # the emulator takes minutes at full size: each check is told on stderr as it is decided (issue 36 item 6)
    where = lambda c: "" if c["layer"] is None else f" (layer {c['layer']})"
    told = [f"csa-plan: check {c['name']}{where(c)}: {c['status']}" for c in doc["checks"]]
    assert r.err.splitlines() == told


def test_table_output(csa):
    r = csa("run-gpu", "--tiny", "--backend", "emulate", "--layers", "0")
    assert r.code == 0
    assert "ALL CHECKS PASSED" in r.out and "decode = full recompute" in r.out


def test_insufficient_driver_with_no_driver_at_all_says_no_driver(csa, monkeypatch):
    """Real CuPy 14 on a machine without libcuda: getDeviceCount raises status 35
    (cudaErrorInsufficientDriver) and driverGetVersion returns 0 (observed)."""
    import types

    def count():
        raise _FakeRuntimeError(35)

    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=count, driverGetVersion=lambda: 0))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    r = csa("run-gpu", "--tiny")
    assert r.code == 5
    assert r.err.strip() == f"csa-plan: {gpu_env.NO_DRIVER}"
    fake.cuda.runtime.driverGetVersion = lambda: 11040
    assert csa("run-gpu", "--tiny").err.strip() == f"csa-plan: {gpu_env.OLD_DRIVER}"


def test_duplicate_layers_are_bad_input(csa):
    """Issue 18: --layers 0,0,0 ran layer 0 three times and reported 5 false failures (exit 4)."""
    r = csa("run-gpu", "--tiny", "--backend", "emulate", "--layers", "0,0,0")
    assert r.code == 2, r.out + r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("--layers: layer 0 is listed twice (each layer runs once)")


def test_requests_are_capped_before_any_work(csa):
    """Issue 18: --requests 100000 died with MemoryError; the cap is run_plan.MAX_REQUESTS."""
    import resource
    import time

    from csa_plan.kernels.run_plan import MAX_REQUESTS

    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    r = csa("run-gpu", "--tiny", "--backend", "emulate", "--requests", "100000")
    assert r.code == 2 and f"must be at most {MAX_REQUESTS}" in r.err and "100,000" in r.err
    assert len(r.err.strip().splitlines()) == 1
    assert time.perf_counter() - t0 < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB: nothing allocated
    assert csa("run-gpu", "--tiny", "--backend", "emulate", "--steps", "5000").code == 2
    assert csa("run-gpu", "--backend", "emulate", "--max-seq-len", "2000000").code == 2


def test_request_count_text_names_the_recompute_request(csa):
    """Issue 12: --requests 2 printed '3 requests x ...' without saying what the third is."""
    r = csa("run-gpu", "--tiny", "--backend", "emulate", "--json", "--layers", "0")
    row = next(c for c in r.json()["checks"] if c["name"] == "requests isolated in the ledger")
    assert row["detail"].startswith("2 request(s) + 1 recompute request = 3 x ")


def test_memory_rule_is_one_rule(csa):
    """The --limit refusal and the ledger check use RunPlan.need_bytes (issue 11)."""
    from csa_plan.kernels.run_plan import plan_run

    plan, refusals = plan_run("deepseek-v4-pro", None, 2, None, 16, 1, True, "emulate")
    assert not refusals
    need = plan.need_bytes
    assert need == 3 * plan.per_request.total_bytes
    r = csa("run-gpu", "--tiny", "--backend", "emulate", "--limit", str(need - 1))
    assert r.code == 3 and f"need {need:,} bytes" in r.err and f"limit is {need - 1:,} bytes" in r.err
    doc = csa("run-gpu", "--tiny", "--backend", "emulate", "--limit", str(need), "--json").json()
    assert doc["exit_code"] == 0 and doc["planned_bytes"] == need


def test_default_length_reaches_multi_chunk_and_k_below_n():
    """The cupy default (131,072) at the real geometry: CSA top-1024 of 32,768, 2 attention chunks each."""
    from csa_plan.kernels import oracle as O
    from csa_plan.kernels.run_plan import DEFAULT_MAX_SEQ_LEN, plan_run
    from csa_plan.planner.layout import scratch_workspaces

    plan, refusals = plan_run("deepseek-v4-pro", None, 2, None, 16, 1, False, "cupy")
    assert not refusals and plan.descriptors[0].max_seq_len == DEFAULT_MAX_SEQ_LEN
    for d in plan.descriptors:
        g = O.geometry_from_descriptor(d)
        ws_floats = scratch_workspaces(d, 1)[-1] // 4
        chunks = ws_floats // (d.num_heads * 514)  # harness._partials
        assert chunks >= 2, d
        if d.compression_ratio == 4:
            assert d.index_topk == 1024 and g.records // 2 > 1024  # k < n from the first decode step


def test_plan_check_is_two_checks_with_stated_tolerances():
    """Pool bookkeeping (0 B beyond the 512-B rounding) and the driver (+-2 MiB per buffer), apart."""
    import numpy as np

    from csa_plan.kernels.run_checks import DRIVER_PAGE, driver_check, pool_check

    arrays = [np.zeros(1000, np.uint8), np.zeros(3, np.float32)]  # 1,000 B -> 1,024; 12 B -> 512
    base = {"pool_used": 0, "pool_total": 0, "free": 10 * 2**30}
    good = {"pool_used": 1536, "pool_total": 1536, "free": base["free"] - 2 * 2**20}
    ok, detail, used = pool_check(1012, arrays, base, good)
    assert ok and used == 1536 and "rounding to 512 B (524 B) exactly (tolerance 0 B)" in detail
    assert not pool_check(1012, arrays, base, dict(good, pool_used=2048))[0]
    ok, detail, driver = driver_check(arrays, base, good)
    assert ok and driver == 2 * 2**20 and "tolerance +-4,194,304 B = 2 buffers x 2 MiB" in detail
    far = dict(good, free=base["free"] - 1536 - 2 * DRIVER_PAGE - 1)
    assert not driver_check(arrays, base, far)[0]  # another process took memory: the check says so
