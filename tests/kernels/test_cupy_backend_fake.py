"""The CuPy execution path (CupyBackend, run_checks' device-memory checks, run-gpu) against
a fake ``cupy`` module (tests/kernels/fake_cupy.py) whose kernels run in the CPU emulator.

What this proves: the Python side of ``run-gpu --backend cupy`` only touches the CuPy
names the fake provides (all of which exist in CuPy 14.2 — checked against a real CuPy
when one is importable); RawModule gets a code string that defines every kernel, a tuple
of str options and no -arch; every launch passes a tuple grid/block of Python ints, a
block within __launch_bounds__, no dynamic shared memory, and arguments whose count,
pointee dtypes, C-contiguity and scalar C types (np.int32 / np.int64 / np.float32)
match the signatures parsed from that code string; no host numpy array reaches a device
slice assignment or a kernel; results come back with ``.get()``; the oracle, recompute,
timing and device-memory checks all pass end to end, with the pool-rounding arithmetic
of run_checks agreeing with a pool model that rounds to 512 B.

What it does not prove: anything about the real GPU — NVRTC compiling the source
(see test_nvcc_compile.py), the real MemoryPool's numbers (the model here mimics
used_bytes / total_bytes / free_all_blocks; the real pool may also hold blocks CuPy
allocates internally), cudaMemGetInfo, kernel timing, races, or memory-ordering bugs
that the sequential emulator cannot show.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from csa_plan.kernels.backends import REFERENCE_KERNELS

from helpers.emulator import requires_emulator

pytestmark = requires_emulator


def _load_fake():
    spec = importlib.util.spec_from_file_location("fake_cupy", Path(__file__).with_name("fake_cupy.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def fake(monkeypatch):
    mod = _load_fake()
    monkeypatch.setitem(sys.modules, "cupy", mod)
    return mod


def test_run_gpu_cupy_backend_end_to_end_on_fake_cupy(csa, fake):
    r = csa("run-gpu", "--tiny", "--json", "--limit", "10MB")
    assert r.code == 0, r.out + r.err
    doc = r.json()
    assert doc["backend"] == "cupy" and doc["device"].startswith("Fake H200")
    status = {(c["name"], c["layer"]): c for c in doc["checks"]}
    mem = status[("device bytes = planned + pool rounding", None)]
    assert mem["status"] == "pass", mem  # evaluated, not n/a: the pool arithmetic ran
    assert "rounding to 512 B" in mem["detail"] and mem["value"] > doc["planned_bytes"]
    assert all(c["status"] == "pass" for c in doc["checks"]), [c for c in doc["checks"] if c["status"] != "pass"]
    assert "pool used back to baseline (+0 B)" in status[("teardown back to baseline", None)]["detail"]
    # timing: CUDA events around each launch, one row per (layer, kernel)
    timed = {(t["layer"], t["kernel"]) for t in doc["timings"]}
    # --tiny's row lists are a few tiles: one chunk per layer, merged inside the launch
    assert {k for _, k in timed} == {"index_tc_scores", "topk_radix", "attn_tc_fused1"}
    assert all(t["ms"] >= 0 for t in doc["timings"])
    # one module, compiled once, every kernel launched with exact NumPy scalar types
    (mod,) = fake.RawModule.instances
    assert mod.backend == "nvrtc" and mod.code.startswith("// csa-plan kernels, sources ")
    launched = {name for name, *_ in mod.launches}
    # the multi-block select starts at 16,384 keys (tc_geometry.TOPK_MB_MIN_KEYS), beyond --tiny,
    # and so do the two-pass and clustered attention launches: their CuPy launches are the next tests
    assert launched == set(mod.signatures) - set(REFERENCE_KERNELS) - set(MULTI_BLOCK_TOPK) - set(LONG_ATTENTION) == {
        "emit_records", "emit_index_keys", "index_tc_scores", "topk_radix", "attn_tc_fused1"}
    for name, grid, threads, kinds in mod.launches:
        assert "int" not in kinds and "float" not in kinds, (name, kinds)  # no Python scalars


MULTI_BLOCK_TOPK = ("topk_mb_hist", "topk_mb_count", "topk_mb_write")
LONG_ATTENTION = ("attn_tc_partial", "attn_merge", "attn_tc_fused2", "attn_tc_fused4", "attn_tc_fused8")


@pytest.mark.parametrize("chunks,fused", [(3, False), (2, True), (4, True), (8, True)])
def test_attention_through_cupy_backend_on_fake_cupy(fake, chunks, fused):
    """CupyBackend.attention over two requests: two passes (attn_tc_partial + attn_merge) or
    one clustered launch (grid.y = the cluster); exact CuPy argument types; the oracle's output."""
    from csa_plan.kernels import oracle as O
    from csa_plan.kernels.backends import CupyBackend

    be = CupyBackend(fake)
    g = O.Geometry(ratio=128, num_heads=16, max_seq_len=8192, window=16)
    w, inp = O.make_layer(g, 16, seed=chunks)
    rng = np.random.default_rng(chunks)
    R, n_rec, W = 2, 40, 16
    rows = [O.pack_fp8_record(rng.standard_normal((W + n_rec, 512)).astype(np.float32)) for _ in range(R)]
    ring = fake.asarray(np.concatenate([r[:W] for r in rows]))
    recs = fake.asarray(np.concatenate([r[W:] for r in rows]))
    q_h = rng.standard_normal((R, 16, 512)).astype(np.float32)
    y = fake.zeros((R, 16, 512), fake.float32)
    ml = None if fused else fake.zeros(2 * R * chunks * 16, fake.float32)
    po = None if fused else fake.zeros(R * chunks * 16 * 512, fake.float32)
    (mod,) = fake.RawModule.instances
    before = len(mod.launches)
    rec = rows[0].shape[1]
    be.attention(fake.asarray(q_h), ring, W, recs, None, n_rec, 16, 4999, fake.asarray(O.INV_FREQ),
                 fake.asarray(w.sink), ml, po, y, chunks, requests=R, ring_stride=W * rec, rec_stride=n_rec * rec,
                 fused=fused)
    launches = mod.launches[before:]
    names = [name for name, *_ in launches]
    assert names == ([f"attn_tc_fused{chunks}"] if fused else ["attn_tc_partial", "attn_merge"])
    assert launches[0][1] == (1, chunks, R)
    got = y.get()
    for r in range(R):
        ref = O.attend(g, q_h[r], np.asarray(rows[r]), w.sink, 4999)
        np.testing.assert_allclose(got[r], ref, atol=1e-5, rtol=0)


def test_multi_block_topk_through_cupy_backend_on_fake_cupy(fake):
    """CupyBackend.topk with a work buffer lent: the five topk_mb launches (exact CuPy
    argument types, the device-side zeroing of hist0), the oracle's ids for two requests."""
    from csa_plan.kernels import oracle as O
    from csa_plan.kernels.backends import CupyBackend
    from csa_plan.kernels.tc_geometry import TOPK_MB_MIN_KEYS, topk_blocks, topk_work_words

    be = CupyBackend(fake)
    n, k, R = TOPK_MB_MIN_KEYS, 600, 2
    rng = np.random.default_rng(4)
    host = rng.standard_normal(R * n).astype(np.float32)
    scores, out = fake.asarray(host), fake.zeros(R * k, fake.int32)
    b = topk_blocks(n, R, be.sm_count)
    work = fake.zeros(R * topk_work_words(b), fake.uint32)
    (mod,) = fake.RawModule.instances
    before = len(mod.launches)
    be.topk(scores, n, k, out, requests=R, score_stride=n, out_stride=k, work=work)
    names = [name for name, *_ in mod.launches[before:]]
    assert names == ["topk_mb_hist"] * 3 + ["topk_mb_count", "topk_mb_write"] and b > 1
    got = out.get()
    for r in range(R):
        assert np.array_equal(got[r * k:(r + 1) * k], O.topk_ids(host[r * n:(r + 1) * n], k))


def test_fused_histogram_and_compaction_through_cupy_backend_on_fake_cupy(fake):
    """CupyBackend: index_scores(topk_work=...) passes the work as index_tc_scores' hist (and a
    null pointer, np.uint64(0), without it), topk then launches passes 1 and 2 only and reads
    the compacted segments; the ids are the oracle's for two requests."""
    from csa_plan.kernels import oracle as O
    from csa_plan.kernels.backends import CupyBackend
    from csa_plan.kernels.tc_geometry import TOPK_MB_MIN_KEYS, topk_blocks, topk_work_words

    be = CupyBackend(fake)
    n, k, R, heads = TOPK_MB_MIN_KEYS, 300, 2, 4
    rng = np.random.default_rng(5)
    keys = fake.asarray(O.pack_fp4_key(rng.standard_normal((R * n, 128)).astype(np.float32)))
    q = fake.asarray(rng.standard_normal((R, heads, 128)).astype(np.float32))
    w = fake.asarray(rng.standard_normal((R, heads)).astype(np.float32))
    scores, out = fake.zeros((R, n), fake.float32), fake.zeros(R * k, fake.int32)
    work = fake.zeros(R * topk_work_words(topk_blocks(n, R, be.sm_count), n), fake.uint32)
    (mod,) = fake.RawModule.instances
    before = len(mod.launches)
    tw = be.topk_work(work, n, R)
    filled = be.index_scores(keys, q, w, heads, n, scores, requests=R, key_stride=n * 68, score_stride=n,
                             topk_work=tw)
    be.topk(scores, n, k, out, requests=R, score_stride=n, out_stride=k, work=filled)
    names = [name for name, *_ in mod.launches[before:]]
    assert names == ["index_tc_scores", "topk_mb_hist", "topk_mb_hist", "topk_mb_count", "topk_mb_write"]
    got, sh = out.get(), scores.get()
    per = work.get()[:tw.layout.words]
    entries = [int(per[tw.layout.entries_word(b)]) for b in range(tw.layout.blocks)]
    assert tw.layout.seg_capacity > 0 and 0 < sum(entries) < n and max(entries) <= tw.layout.seg_capacity
    for r in range(R):
        assert np.array_equal(got[r * k:(r + 1) * k], O.topk_ids(sh[r], k))
    plain = fake.zeros((R, n), fake.float32)
    be.index_scores(keys, q, w, heads, n, plain, requests=R, key_stride=n * 68, score_stride=n)  # hist null
    assert np.array_equal(plain.get().view(np.uint32), sh.view(np.uint32))


def test_fake_rejects_what_real_cupy_would_misread(fake):
    """The fake can fail: Python ints, wrong dtypes, host arrays, strided views, big blocks."""
    from csa_plan.kernels.backends import CupyBackend

    be = CupyBackend(fake)
    k = be.functions["topk_radix"]
    scores, out = fake.zeros(64, fake.float32), fake.zeros(8, fake.int32)
    good = (scores, np.int64(0), np.int32(64), np.int32(8), out, np.int64(0))
    k((1, 1, 1), (256, 1, 1), good)
    bad = [
        (scores, 0, np.int32(64), np.int32(8), out, np.int64(0)),  # Python int for long long
        (scores, np.int64(0), np.int64(64), np.int32(8), out, np.int64(0)),  # int64 for int
        (scores, np.int64(0), np.int32(64), np.int32(8), fake.zeros(8, fake.int64 if hasattr(fake, "int64")
                                                                     else np.int64), np.int64(0)),
        (scores.get(), np.int64(0), np.int32(64), np.int32(8), out, np.int64(0)),  # host array
        (fake.zeros(128, fake.float32)[::2], np.int64(0), np.int32(64), np.int32(8), out, np.int64(0)),
        good[:-1],
    ]
    for args in bad:
        with pytest.raises(TypeError):
            k((1, 1, 1), (256, 1, 1), args)
    with pytest.raises(ValueError):
        k((1, 1, 1), (512, 1, 1), good)  # __launch_bounds__(256)
    with pytest.raises(TypeError):
        k([1, 1, 1], (256, 1, 1), good)
    with pytest.raises(TypeError):
        scores[:4] = np.ones(4, np.float32)  # CuPy refuses a host array here too
    with pytest.raises(TypeError):
        np.asarray(scores)


def test_python_int_scalars_would_be_caught(fake, monkeypatch):
    """If the backend passed Python ints (CuPy sends them as 8 bytes), the run fails here."""
    from csa_plan.kernels import backends

    monkeypatch.setattr(backends.CupyBackend, "_arg", staticmethod(lambda kind, v: v if kind == "p" else int(v)))
    be = backends.CupyBackend(fake)
    with pytest.raises(TypeError, match="needs"):
        be.topk(fake.zeros(64, fake.float32), 64, 8, fake.zeros(8, fake.int32))


def test_fake_names_exist_in_real_cupy():
    """Every CuPy name the fake provides exists in the installed CuPy (names only)."""
    cupy = pytest.importorskip("cupy", reason="CuPy not installed: cannot compare the fake's names")
    fake = _load_fake()
    for path, name in fake.PROVIDED:
        obj = cupy
        for part in path.split(".")[1:]:
            obj = getattr(obj, part)
        assert hasattr(obj, name), f"{path}.{name}"
    sig = cupy.RawModule.__doc__.splitlines()[0]
    for kw in ("code", "options", "backend", "name_expressions", "jitify"):
        assert f"{kw}=" in sig, sig
    for attr in ("used_bytes", "total_bytes", "free_all_blocks"):
        assert hasattr(cupy.cuda.MemoryPool, attr)
    assert cupy.cuda.memory._round_size(1) == 512
