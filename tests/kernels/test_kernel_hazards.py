"""The hazards a GPU would hit that the emulator could not see, as emulated regressions.

Each test here fails on the kernels of commit 777fbce (before issue 15):
- top-k ranked NaN above +inf in the kernel and lowest in the oracle;
- top-k computed its order key with `s + 0.0f`, which -ftz=true (CuPy's option) flushes,
  so denormal scores collapsed to zero before ranking (the emulator now models -ftz);
- E4M3 codes 0x7F/0xFF decoded to +-480 in the kernel and NaN in the oracle;
- the launchers never checked the geometry the kernels hard-code (head_dim 512, RoPE <= 64,
  FP8 records, 128-wide index keys, <= 64 index heads) nor the buffer sizes a launch touches.
"""

from __future__ import annotations

import numpy as np
import pytest

from csa_plan.kernels import oracle as O

from csa_plan.kernels.backends import emulator_library

from helpers.emulator import requires_emulator
pytestmark = requires_emulator

NAN = np.float32(np.nan)
NEG_NAN = np.array([0xFFC00001], np.uint32).view(np.float32)[0]
DENORMS = np.array([1, 2, 3, 0x7FFFFF], np.uint32).view(np.float32)  # smallest .. largest positive denormal


def _topk(be, s, k):
    out = np.full(k, -1, np.int32)
    be.topk(np.ascontiguousarray(s, np.float32), len(s), k, out)
    return out


def test_emulator_flushes_denormals_like_ftz(be):
    lib = emulator_library()
    x = np.concatenate([DENORMS, -DENORMS, np.float32([1.0, 2.0 ** -126, 0.0, 0.0])]).astype(np.float32)
    out = np.zeros_like(x)
    assert lib.emu_ftz_probe(len(x), x.ctypes.data, out.ctypes.data) == 0
    assert np.all(out[:8] == 0) and out[8] == 1.0 and out[9] == np.float32(2.0 ** -126)
    old = lib.csa_emu_set_ftz(0)
    try:
        assert lib.emu_ftz_probe(len(x), x.ctypes.data, out.ctypes.data) == 0
        assert np.array_equal(out[:8], x[:8])  # IEEE mode keeps them
    finally:
        lib.csa_emu_set_ftz(old)
    assert old == 1  # -ftz=true is the default, as CuPy compiles


def test_topk_nan_ranks_lowest_in_kernel_and_oracle(be):
    s = np.array([NAN, 1.0, np.inf, -np.inf, NEG_NAN, 0.5, NAN, -2.0], np.float32)
    for k in range(1, len(s) + 1):
        got = _topk(be, s, k)
        assert np.array_equal(got, O.topk_ids(s, k)), k
    assert list(_topk(be, s, 5)) == [1, 2, 3, 5, 7]  # every finite and infinite score before any NaN
    assert list(_topk(be, s, 7)) == [0, 1, 2, 3, 4, 5, 7]  # then NaNs by lower id
    assert list(O.topk_ids(s, 1)) == [2]  # +inf is the largest


def test_topk_denormal_scores_keep_their_order_under_ftz(be):
    s = np.concatenate([np.zeros(6, np.float32), DENORMS[::-1], -DENORMS, np.float32([-0.0])])
    for k in (1, 2, 3, 4, 5, 8):
        got = _topk(be, s, k)
        assert np.array_equal(got, O.topk_ids(s, k)), k
    assert list(_topk(be, s, 4)) == [6, 7, 8, 9]  # the four positive denormals outrank the zeros


def test_topk_specials_across_thread_chunks(be):
    rng = np.random.default_rng(3)
    s = rng.standard_normal(5000).astype(np.float32)
    s[rng.choice(5000, 300, replace=False)] = NAN
    s[rng.choice(5000, 50, replace=False)] = DENORMS[rng.integers(0, 4, 50)]
    s[rng.choice(5000, 50, replace=False)] = -0.0
    for k in (1, 1024, 4700, 5000):
        assert np.array_equal(_topk(be, s, k), O.topk_ids(s, k)), k


def test_fp8_codes_decode_identically_in_kernel_and_oracle(be):
    """Every E4M3 code through the attention kernel: one row per request, weight 1 (q = 0, sink -inf)."""
    g = O.Geometry(ratio=128, num_heads=1, max_seq_len=128, window=1)
    R = 256
    rows = np.zeros((R, g.record_bytes), np.uint8)
    rows[:, 0] = 127  # block 0 scale 2^0
    rows[:, 1] = np.arange(256)  # dim 0 holds code c in request c
    for b in range(1, 7):
        rows[:, 65 * b] = 127
    q = np.zeros((R, 1, 512), np.float32)
    sink = np.float32([-np.inf])
    y = np.zeros((R, 1, 512), np.float32)
    ml = np.zeros(2 * R, np.float32)
    be.attention(q, rows, 1, rows, None, 0, 1, 0, O.INV_FREQ, sink, ml, y, y, 1, requests=R,
                 ring_stride=g.record_bytes, rec_stride=g.record_bytes)
    got = y[:, 0, 0]
    ref = O.unpack_fp8_record(rows)[:, 0]
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    assert np.isnan(got[0x7F]) and np.isnan(got[0xFF])
    fin = ~np.isnan(ref)
    assert np.array_equal(got[fin], ref[fin])
    assert got[0x7E] == 448.0 and got[0xFE] == -448.0


@pytest.mark.parametrize("kw,field", [({"head_dim": 576}, "head_dim"), ({"rope_dim": 96}, "qk_rope_head_dim"),
                                      ({"rope_dim": 32}, "qk_rope_head_dim"), ({"rope_dim": 63}, "qk_rope_head_dim")])
def test_attention_refuses_geometry_the_kernel_hard_codes(be, kw, field):
    from csa_plan.kernels.kernel_limits import KernelGeometryError

    H = 2
    q = np.zeros((H, 1024), np.float32)
    rows = np.zeros((4, 1024), np.uint8)
    y = np.zeros((H, 1024), np.float32)
    with pytest.raises(KernelGeometryError, match=field):
        be.attention(q, rows, 1, rows, None, 1, H, 5, np.zeros(64, np.float32), np.zeros(H, np.float32),
                     np.zeros(2 * H, np.float32), y, y, 1, **kw)


def test_emit_and_index_launchers_refuse_bad_geometry_and_small_buffers(be):
    from csa_plan.kernels.kernel_limits import KernelGeometryError

    tok = np.zeros((8, 2, 1024), np.float32)
    norm = np.ones(512, np.float32)
    out = np.zeros((1, 583), np.uint8)
    with pytest.raises(KernelGeometryError, match="qk_rope_head_dim"):
        be.emit_records(tok, 4, 4, True, norm, True, np.zeros(64, np.float32), 0, 1, out, rope_dim=128)
    with pytest.raises(KernelGeometryError, match=r"out\): the launch reads or writes 1,166"):
        be.emit_records(tok, 4, 4, True, norm, True, O.INV_FREQ, 1, 1, out)  # record 1 of a 1-record buffer
    keys = np.zeros((10, 68), np.uint8)
    with pytest.raises(KernelGeometryError, match="index_num_heads"):
        be.index_scores(keys, np.zeros((65, 128), np.float32), np.zeros(65, np.float32), 65, 10,
                        np.zeros(10, np.float32))
    with pytest.raises(KernelGeometryError, match=r"scores\)"):
        be.index_scores(keys, np.zeros((4, 128), np.float32), np.zeros(4, np.float32), 4, 10,
                        np.zeros(9, np.float32))
    with pytest.raises(KernelGeometryError, match=r"topk_radix\(out\)"):
        be.topk(np.zeros(100, np.float32), 100, 10, np.zeros(9, np.int32))


def test_run_gpu_refuses_a_layer_the_kernels_cannot_run(csa, tmp_path):
    """An f32 HCA layer passes the gate (ratio 128 takes f32) but the kernels are FP8-only."""
    spec = tmp_path / "m.yaml"
    spec.write_text("name: f32hca\nnum_heads: 4\nmax_seq_len: 1024\nlayers:\n"
                    "  - {compression_ratio: 128, cache_format: f32}\n")
    r = csa("run-gpu", str(spec), "--backend", "emulate", "--tiny")
    assert r.code == 3, r.out + r.err
    assert r.err.strip().splitlines() == [
        "csa-plan: refused: KernelGeometry: layer 0: cache_format is f32, the kernels read and write "
        "fp8_e4m3_block64 records only"]
