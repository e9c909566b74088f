"""benchmarks/bench_kernels.py without a GPU: --help, the no-GPU exit, its memory plan, the
traffic model it reports, and its correctness gate.

The benchmark body runs here on the fake CuPy (tests/kernels/fake_cupy.py: kernels in the CPU
emulator) at a small context, which proves the code path and the JSON document, not GPU speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_kernels.py"


def _run(*args, cupy_blocked=True):
    pre = "import sys; sys.modules['cupy'] = None; " if cupy_blocked else ""
    code = pre + f"import runpy; sys.argv = {[str(BENCH), *args]!r}; runpy.run_path({str(BENCH)!r}, run_name='__main__')"
    return subprocess.run([sys.executable, "-c", "import sys; " + code], capture_output=True, text=True, timeout=60)


def test_help_works_without_a_gpu():
    r = _run("--help")
    assert r.returncode == 0 and "--requests" in r.stdout and "--plan-only" in r.stdout


def test_no_gpu_is_one_line_and_exit_5():
    r = _run()
    assert r.returncode == 5, r.stderr
    assert r.stderr.strip().splitlines() == [
        "bench_kernels: no usable GPU: CuPy not installed (pip install 'csa-plan[gpu-cuda13]', or [gpu-cuda12] on "
        "CUDA 12), or use --backend emulate"]


def test_default_plan_fits_an_h200_and_is_printed():
    sys.path.insert(0, str(BENCH.parent))
    try:
        import bench_kernels as b
    finally:
        sys.path.pop(0)
    args = b.main.__globals__["argparse"].Namespace(context=1 << 20, requests=64, heads=16, index_heads=64,
                                                      topk=1024, window=128, chunks=16)
    plan = b.plan_bytes(args)
    assert 10**9 < max(plan.values()) <= b.H200_BYTES
    r = _run("--plan-only")
    assert r.returncode == 0 and f"{max(plan.values()):,} B" in r.stderr
    # would not fit: refused up front (the plan is the probe's buffers: 92 GB at 512 requests, 185 GB at 1024)
    assert _run("--plan-only", "--requests", "1024").returncode == 3


def _load_bench():
    sys.path.insert(0, str(BENCH.parent))
    try:
        import bench_kernels as b
    finally:
        sys.path.pop(0)
    return b


def test_traffic_counts_compulsory_and_moved_bytes_apart():
    from csa_plan.kernels import traffic as T

    t = T.topk(16, 262144, 1024)
    assert t.compulsory_bytes == 16 * (262144 * 4 + 1024 * 4)  # the scores once, not five times
    # the multi-block select (16 blocks per request): five passes (3 histograms, count, write)
    # and its work header (5,120 + 3 x 16 words: histograms, slice counts, entry counts; zeroed and read)
    assert t.moved_bytes == 16 * (5 * 262144 * 4 + 1024 * 4) + 16 * (5120 + 48) * 4 * 2
    # hist0 from the indexer's epilogue, every segment fitting (3,000 entries per request): one
    # pass over the scores, the entries written once and read three times
    f = T.topk(16, 262144, 1024, hist0_fused=True, seg_capacity=256, fitting_entries=16 * 3000)
    assert f.moved_bytes == 16 * (262144 * 4 + 1024 * 4) + 16 * (5120 + 48) * 4 * 2 + 16 * 3000 * 8 * 4
    # one block per request overflowing its 256 entries: its 16,384-id slice read three times more
    over = T.topk(16, 262144, 1024, hist0_fused=True, seg_capacity=256, fitting_entries=16 * 2000,
                  overflowing_blocks=16)
    assert over.moved_bytes == 16 * (262144 * 4 + 1024 * 4) + 16 * (5120 + 48) * 4 * 2 + 16 * 2000 * 8 * 4 \
        + 16 * 256 * 8 + 3 * 16 * 16384 * 4
    assert T.index_scores(16, 262144, 64, hist0_fused=True).moved_bytes == \
        T.index_scores(16, 262144, 64).moved_bytes + 16 * 2048 * 4
    small = T.topk(1, 8192, 512)  # below TOPK_MB_MIN_KEYS: topk_radix, six passes
    assert small.moved_bytes == 6 * 8192 * 4 + 512 * 4
    partial = 16 * 128 * 514 * 4
    a = T.attention(1, 128, 128 + 8192, 0, 16, kernel="simt")  # 16-head groups, 583-byte rows
    assert a.compulsory_bytes == (128 + 8192) * 583 + 2 * 128 * 512 * 4
    assert a.moved_bytes == 8 * (128 + 8192) * 583 + 16 * 128 * 512 * 4 + 2 * partial + 128 * 512 * 4 + 128 * 4
    tc = T.attention(1, 128, 128 + 8192, 0, 16)  # attn_tc_partial: 32-head blocks, 608-byte row supersets
    assert tc.compulsory_bytes == a.compulsory_bytes
    assert tc.moved_bytes == 4 * (128 + 8192) * 608 + 16 * 128 * 512 * 4 + 2 * partial + 128 * 512 * 4 + 128 * 4
    i = T.index_scores(1, 262144, 64, kernel="simt")
    assert i.compulsory_bytes == 262144 * 68 + 64 * 129 * 4 + 262144 * 4
    assert i.moved_bytes == 262144 * 68 + 4096 * 64 * 129 * 4 + 262144 * 4
    itc = T.index_scores(16, 262144, 64, sm_count=132)  # 2048 tiles of 128 keys; 2 x 132 // 16 = 16 blocks per request
    # 16 blocks per request (264 resident slots // 16 requests): each stages the query once;
    # each tile's aligned superset adds at most 16 bytes
    assert itc.moved_bytes == 16 * (262144 * 68 + 16 * 2048 + 16 * 64 * 129 * 4 + 262144 * 4)


def _probe_on_fake_cupy(context: int):
    """The probe (the benchmark's body) on the fake CuPy at `context` tokens: 4 index heads,
    16 query heads, one request; (exit code, document)."""
    import importlib.util

    try:
        from csa_plan.kernels.backends import build_emulator

        build_emulator()
    except Exception as exc:
        pytest.skip(f"kernel emulator cannot be built: {exc}")
    spec = importlib.util.spec_from_file_location("fake_cupy", Path(__file__).with_name("fake_cupy.py"))
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    from csa_plan.kernels import probe

    return probe.run(["--context", str(context), "--batches", "1", "--geometries", "v4-pro-tp8", "--hot", "1",
                      "--index-heads", "4", "--chunks", "4"], cupy_module=fake)


@pytest.fixture(scope="module")
def fake_doc():
    """The probe on the fake CuPy at 4,096 tokens."""
    return _probe_on_fake_cupy(4096)


def test_bench_body_on_fake_cupy_checks_pass_and_report_both_byte_counts(fake_doc, capsys):
    code, doc = fake_doc
    assert code == 0 and doc["failed"] == 0, [c for c in doc["checks"] if c["status"] != "pass"]
    names = {c["name"] for c in doc["checks"]}
    assert {"top-1024 of 1,024 (R=1)", "attention two-pass vs oracle (v4-pro-tp8 CSA H=16 R=1)",
            "attention two-pass vs oracle (v4-pro-tp8 HCA H=16 R=1)",
            "attention fused vs oracle (v4-pro-tp8 CSA H=16 R=1)",
            "attention fused vs oracle (v4-pro-tp8 HCA H=16 R=1)", "indexer scan vs oracle (R=1)"} <= names
    kernels = {t["kernel"] for t in doc["timings"]}
    fused = {t["kernel"] for t in doc["timings"] if t.get("fused")}
    assert kernels - fused == {"index_scores", "topk_radix", "attn_partial+attn_merge"}
    assert fused and all(k.startswith("attn_tc_fused") for k in fused)
    assert all(t["moved_bytes"] >= t["compulsory_bytes"] > 0 for t in doc["timings"])
    assert doc["copy_ceiling"]["bytes_per_s"] > 0
    b = _load_bench()
    args = b.main.__globals__["argparse"].Namespace(context=4096, requests=1, heads=16, index_heads=4, topk=1024,
                                                      window=128, chunks=4, json=True)
    assert b.report(args, doc) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] == 0 and all("moved_over_compulsory" in r for r in out["results"])
    # the model's time for each attention and indexer row's own configuration (split included)
    by = {r["case"]: r for r in out["results"]}
    for case, r in by.items():
        priced = case.startswith(("attention", "indexer/"))
        assert (r["model_us"] is not None and r["model_us"] > 0) == priced, (case, r["model_us"])
    from csa_plan.kernels.tc_geometry import AttnSplit

    model, counts = b._model()
    for kind, ratio in (("CSA", 4), ("HCA", 128)):
        for prefix, fused in (("attention/", False), ("attention-fused/", True)):
            r = next(r for c, r in by.items() if c.startswith(prefix) and r["kind"] == kind)
            want = model.attention(counts, ratio, 4096, 1, 16, split=AttnSplit(r["chunks"], fused)).total_us
            assert r["model_us"] == want and r["measured_over_model"] > 0, (kind, prefix)


def test_bench_exits_4_when_a_correctness_check_fails(fake_doc, capsys):
    _, doc = fake_doc
    bad = json.loads(json.dumps(doc))
    bad["checks"][0]["status"] = "fail"
    bad["failed"] = 1
    b = _load_bench()
    args = b.main.__globals__["argparse"].Namespace(context=4096, requests=1, heads=16, index_heads=4, topk=1024,
                                                      window=128, chunks=4, json=False)
    assert b.report(args, bad) == 4
    assert "correctness check(s) FAILED" in capsys.readouterr().err


def test_bench_body_fuses_the_indexer_and_top_k_from_16384_keys(capsys):
    """At 65,536 tokens (16,384 index keys: the multi-block top-k) the probe also runs the
    indexer with top-k's first histogram in its epilogue and top-k from it: the same score
    bits and ids as the separate launches, both pairs timed, the fused pair moving one pass over
    the scores less (less hist0's bytes), every segment fitting here."""
    code, doc = _probe_on_fake_cupy(65536)
    assert code == 0 and doc["failed"] == 0, [c for c in doc["checks"] if c["status"] != "pass"]
    assert "indexer+top-1024 fused (R=1)" in {c["name"] for c in doc["checks"]}
    rows = {t["case"]: t for t in doc["timings"]}
    plain, fused = rows["indexer+topk1024/R=1"], rows["indexer+topk1024 fused/R=1"]
    assert fused["overflowing_blocks"] == 0 and 0 < fused["entries"] <= 4 * rows["topk1024/R=1"]["seg_capacity"]
    assert plain["moved_bytes"] - fused["moved_bytes"] == 16384 * 4 - 2048 * 4
    b = _load_bench()
    args = b.main.__globals__["argparse"].Namespace(context=65536, requests=1, heads=16, index_heads=4, topk=1024,
                                                      window=128, chunks=4, json=True)
    assert b.report(args, doc) == 0


def test_timer_reports_device_time_per_call_and_the_host_apart():
    """The probe's timer on the fake CuPy: calls replayed from one captured graph carry none of the
    Python around their launches (a call that is only Python costs the device nothing), while the
    host's own time per call is measured and reported apart; a launching call's device time is its
    kernels'. (The fake's clock is the host's: this proves what is bracketed, not GPU speed.)"""
    import importlib.util
    import time

    spec = importlib.util.spec_from_file_location("fake_cupy", Path(__file__).with_name("fake_cupy.py"))
    fake = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fake)
    from csa_plan.kernels.probe import Timer

    t = Timer(fake)

    def python_only():
        end = time.perf_counter() + 2e-4
        while time.perf_counter() < end:
            pass

    m = t.measure(python_only, 10)
    assert m["method"] == "graph" and m["launches_timed"] == 10
    assert m["host_us"] >= 200 and m["device_us"] < 50, m  # the 200 us of Python are host time only
    assert m["back_to_back_ms"] * 1e3 >= 200 and m["host_bound"] is False
    no_graph = Timer(fake, graphs=False).measure(python_only, 5)
    assert no_graph["method"] == "back-to-back" and no_graph["host_bound"] is True  # flagged: an upper bound


def test_bench_measured_over_model_uses_the_device_time(fake_doc, capsys):
    _, doc = fake_doc
    b = _load_bench()
    args = b.main.__globals__["argparse"].Namespace(context=4096, requests=1, heads=16, index_heads=4, topk=1024,
                                                      window=128, chunks=4, json=True)
    assert b.report(args, doc) == 0
    out = json.loads(capsys.readouterr().out)
    priced = [r for r in out["results"] if r["model_us"]]
    assert priced and all(r["measured_over_model"] == r["device_us"] / r["model_us"] for r in priced)
    assert all("host_us" in r and r["method"] in ("graph", "back-to-back") for r in out["results"])


def test_bench_from_probe_reports_the_probe_document_without_rerunning(fake_doc, tmp_path, capsys):
    _, doc = fake_doc
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(doc))
    b = _load_bench()
    assert b.main(["--from-probe", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["context"] == 4096 and len(out["results"]) == len(doc["timings"])
    assert b.main(["--from-probe", str(tmp_path / "missing.json")]) == 4
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{}")
    assert b.main(["--from-probe", str(tmp_path / "bad.json")]) == 2


def test_small_probe_sizes_its_pools_to_its_context():
    """--small (the sanitizer steps) packs pools for its 8,192 tokens, not the 65,536 rows of 1M."""
    from csa_plan.kernels import probe

    assert probe.pool_rows(1 << 20) == probe.POOL == 65536
    small = probe._parse(["--small"])
    assert probe.pool_rows(small.context) == 512  # still about 4 copies of each of its 2,048 keys
