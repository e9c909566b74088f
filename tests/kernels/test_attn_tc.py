"""attn_tc_partial (tensor-core attention, attn_tc.cu) under emulation, against the oracle.

Tolerance: 1e-5 absolute on the outputs, as for the fp32 SIMT kernel: the query is split
into three BF16 terms and the softmax weights into two, so every tensor-core product is
exact in fp32 and only summation order (and 2^-17 relative in P) differs. Covered: 128
heads (four 32-head blocks), many chunks (empty ones included), selected ids in any order
with k < n, batched requests with strides, and a ring whose last row ends the buffer (the
aligned 16-byte superset of that row is clipped with cp.async's src-size).
"""

from __future__ import annotations

import numpy as np
import pytest

from csa_plan.kernels import oracle as O

from helpers.emulator import requires_emulator

ATOL = 1e-5

pytestmark = requires_emulator


def _run(be, g, st, q, sel, p, sink, nchunks, n_win, kernel="tc", use_idx=True):
    H = g.num_heads
    y = np.zeros((H, 512), np.float32)
    ml = np.zeros(2 * H * nchunks, np.float32)
    po = y if nchunks == 1 else np.zeros(H * nchunks * 512, np.float32)
    be.attention(q, st.ring, n_win, st.records, sel if use_idx else None, len(sel), H, p, O.INV_FREQ, sink, ml,
                 po, y, nchunks, kernel=kernel)
    return y


@pytest.mark.parametrize("heads,nchunks", [(16, 1), (16, 5), (20, 2), (128, 3)])
def test_attn_tc_matches_oracle_and_simt_reference(be, heads, nchunks):
    g = O.Geometry(ratio=128, num_heads=heads, max_seq_len=8192, window=16)
    w, inp = O.make_layer(g, 16, seed=heads + nchunks)
    rng = np.random.default_rng(heads)
    st = O.State.empty(g)  # packed rows drawn directly: faster than a prefill at this length
    st.records[:40] = O.pack_fp8_record(rng.standard_normal((40, 512)).astype(np.float32))
    st.ring[:] = O.pack_fp8_record(rng.standard_normal((16, 512)).astype(np.float32))
    st.tokens = 5000
    p = 4999  # large RoPE angles
    sel = rng.permutation(40)[:33].astype(np.int32)  # k < n, any order
    ref = O.attend(g, inp.q[3], O.attention_rows(g, st, sel), w.sink, p)
    y = _run(be, g, st, inp.q[3], sel, p, w.sink, nchunks, 16)
    np.testing.assert_allclose(y, ref, atol=ATOL, rtol=0)
    if heads <= 20:
        np.testing.assert_allclose(_run(be, g, st, inp.q[3], sel, p, w.sink, nchunks, 16, kernel="simt"), y,
                                   atol=ATOL, rtol=0)


def test_attn_tc_more_chunks_than_tiles_and_a_clipped_last_row(be):
    """7 chunks over 20 rows (most chunks empty); all 15 ring rows, the last ending the buffer."""
    g = O.Geometry(ratio=128, num_heads=8, max_seq_len=1024, window=15)
    w, inp = O.make_layer(g, 700, seed=3)
    st = O.prefill(g, w, inp, 700)
    sel = np.arange(5, dtype=np.int32)
    ring = st.ring
    assert ring.nbytes % 16 == 9 and ring.ctypes.data % 16 == 0  # 15 * 583 B: the last superset is clipped
    ref = O.attend(g, inp.q[699], O.attention_rows(g, st, sel), w.sink, 699)
    np.testing.assert_allclose(_run(be, g, st, inp.q[699], sel, 699, w.sink, 7, 15, use_idx=False), ref,
                               atol=ATOL, rtol=0)


def test_attn_tc_batched_requests_with_strides(be):
    g = O.Geometry(ratio=4, num_heads=16, max_seq_len=256, window=16, index_heads=4, index_topk=8)
    rng = np.random.default_rng(7)
    R, n_rec, H = 2, 30, 16
    recs = O.pack_fp8_record(rng.standard_normal((R, n_rec, 512)).astype(np.float32))
    ring = O.pack_fp8_record(rng.standard_normal((R, 16, 512)).astype(np.float32))
    ids = np.stack([rng.permutation(n_rec)[:12] for _ in range(R)]).astype(np.int32)
    q = rng.standard_normal((R, H, 512)).astype(np.float32)
    sink = rng.standard_normal(H).astype(np.float32)
    nchunks = 2
    y = np.zeros((R, H, 512), np.float32)
    ml = np.zeros(2 * R * H * nchunks, np.float32)
    po = np.zeros(R * H * nchunks * 512, np.float32)
    be.attention(q, ring, 10, recs, ids, 12, H, 77, O.INV_FREQ, sink, ml, po, y, nchunks, requests=R,
                 ring_stride=16 * 583, rec_stride=n_rec * 583, idx_stride=12)
    for r in range(R):
        rows = np.concatenate([ring[r, :10], recs[r, ids[r]]])
        np.testing.assert_allclose(y[r], O.attend(g, q[r], rows, sink, 77), atol=ATOL, rtol=0)


@pytest.mark.parametrize("heads,chunks,n_rec,n_sel", [(16, 1, 40, 33), (20, 2, 40, 33), (16, 4, 70, 50),
                                                     (16, 8, 200, 150), (128, 2, 40, 33), (8, 8, 6, 4)])
def test_attn_tc_fused_clusters_equal_the_two_pass_bits(be, heads, chunks, n_rec, n_sel):
    """attn_tc_fused<chunks> (one launch; the cluster merges in distributed shared memory)
    gives the same bits as attn_tc_partial + attn_merge over the same chunks, and the oracle's
    output: two requests with strides, selected ids in any order (k < n), 128 heads (four
    32-head groups), and 8 chunks over 10 rows (most chunks empty)."""
    rng = np.random.default_rng(heads * chunks + n_rec)
    g = O.Geometry(ratio=4, num_heads=heads, max_seq_len=4096, window=16, index_heads=4, index_topk=n_sel)
    R, W = 2, 16
    n_win = 6 if n_rec < 10 else W
    recs = O.pack_fp8_record(rng.standard_normal((R, n_rec, 512)).astype(np.float32))
    ring = O.pack_fp8_record(rng.standard_normal((R, W, 512)).astype(np.float32))
    ids = np.stack([rng.permutation(n_rec)[:n_sel] for _ in range(R)]).astype(np.int32)
    q = rng.standard_normal((R, heads, 512)).astype(np.float32)
    sink = rng.standard_normal(heads).astype(np.float32)
    pos = 3000
    kw = dict(requests=R, ring_stride=W * 583, rec_stride=n_rec * 583, idx_stride=n_sel)
    y2 = np.zeros((R, heads, 512), np.float32)
    ml = np.zeros(2 * R * heads * chunks, np.float32)
    po = np.zeros(R * heads * chunks * 512, np.float32)
    be.attention(q, ring, n_win, recs, ids, n_sel, heads, pos, O.INV_FREQ, sink, ml, po, y2, chunks, **kw)
    y1 = np.full((R, heads, 512), np.nan, np.float32)
    be.attention(q, ring, n_win, recs, ids, n_sel, heads, pos, O.INV_FREQ, sink, None, None, y1, chunks, fused=True,
                 **kw)
    np.testing.assert_array_equal(y1.view(np.uint32), y2.view(np.uint32))
    for r in range(R):
        rows = np.concatenate([ring[r, :n_win], recs[r, ids[r]]])
        np.testing.assert_allclose(y1[r], O.attend(g, q[r], rows, sink, pos), atol=ATOL, rtol=0)


def test_attn_tc_fused_needs_a_cluster_size(be):
    g = O.Geometry(ratio=128, num_heads=4, max_seq_len=1024, window=16)
    st = O.State.empty(g)
    y = np.zeros((4, 512), np.float32)
    with pytest.raises(ValueError, match="fused launch"):
        be.attention(np.zeros((4, 512), np.float32), st.ring, 16, st.records, None, 3, 4, 20, O.INV_FREQ,
                     np.zeros(4, np.float32), None, None, y, 3, fused=True)


def test_attn_tc_traps_when_the_launch_gives_too_little_shared_memory(be, monkeypatch):
    """The kernel checks %dynamic_smem_size against its own layout: a launcher whose size
    (tc_geometry.attn_tc_smem_bytes) fell short of the .cu's would fail, not overrun."""
    from csa_plan.kernels import backends
    from csa_plan.kernels.backends import EmulationError
    from csa_plan.kernels.tc_geometry import AttnTcLaunch, attn_tc_launch

    if be.name != "emulate":
        pytest.skip("emulator only")
    g = O.Geometry(ratio=128, num_heads=16, max_seq_len=1024, window=16)
    st = O.State.empty(g)
    y = np.zeros((16, 512), np.float32)
    args = (np.zeros((16, 512), np.float32), st.ring, 16, st.records, None, 3, 16, 20, O.INV_FREQ,
            np.zeros(16, np.float32), None, None, y, 1)
    be.attention(*args, fused=True)  # the real size: fine
    lay = attn_tc_launch(16)
    short = AttnTcLaunch(lay.head_groups, lay.m_tiles, lay.threads, lay.smem_bytes - 16)
    monkeypatch.setattr(backends, "attn_tc_launch", lambda heads: short)
    with pytest.raises(EmulationError, match="__trap"):
        be.attention(*args, fused=True)


def test_attn_tc_refuses_a_misaligned_buffer(be):
    g = O.Geometry(ratio=128, num_heads=4, max_seq_len=1024, window=16)
    st = O.State.empty(g)
    raw = np.zeros(st.records.nbytes + 1, np.uint8)
    shifted = raw[1:].reshape(st.records.shape)  # C-contiguous, 1 byte off
    y = np.zeros((4, 512), np.float32)
    with pytest.raises(ValueError, match="16-byte aligned"):
        be.attention(np.zeros((4, 512), np.float32), st.ring, 16, shifted, None, 3, 4, 20, O.INV_FREQ,
                     np.zeros(4, np.float32), np.zeros(8, np.float32), y, y, 1)


def _edge_records(rng, n: int) -> np.ndarray:
    """Packed rows whose FP8 blocks exercise every path of the dequantizer: zero (+-0) and
    subnormal codes, the largest code, scales at and past both ends of the packed-multiply
    range (e = 6, 7, 134, 135) and ordinary ones; codes limited so |value| <= 4."""
    rows = O.pack_fp8_record(rng.standard_normal((n, 512)).astype(np.float32))
    valid = np.array([c for c in range(256) if (c & 0x7F) != 0x7F])
    small = np.array([0x00, 0x80, 0x01, 0x81, 0x03, 0x87, 0x08, 0x88])  # zeros, subnormals, 2^-6
    for r in range(n):
        for b in range(7):
            e = int(rng.choice([6, 7, 90, 120, 127, 134, 135, 160]))
            ok = valid[np.abs(O.E4M3[valid]) * 2.0 ** (e - 127) <= 4.0]
            codes = rng.choice(ok, 64)
            codes[rng.integers(0, 64, 8)] = rng.choice(small, 8)
            if b == 3 and r % 5 == 0:
                codes[:] = 0  # a block of zeros
            rows[r, 65 * b] = e
            rows[r, 65 * b + 1:65 * b + 65] = codes
    return rows


def test_attn_tc_dequantizer_edge_codes_and_scales(be):
    """Every row offset mod 16 (583-byte stride), both dequantizer paths (packed multiply and
    the fp32 fallback for scales outside [7, 134]) against the oracle's table."""
    g = O.Geometry(ratio=128, num_heads=16, max_seq_len=8192, window=16)
    rng = np.random.default_rng(11)
    st = O.State.empty(g)
    st.records[:48] = _edge_records(rng, 48)
    st.ring[:] = _edge_records(rng, 16)
    st.tokens = 6200
    q = rng.standard_normal((16, 512)).astype(np.float32)
    sink = rng.standard_normal(16).astype(np.float32)
    sel = rng.permutation(48)[:41].astype(np.int32)
    ref = O.attend(g, q, O.attention_rows(g, st, sel), sink, 6199)
    np.testing.assert_allclose(_run(be, g, st, q, sel, 6199, sink, 2, 16), ref, atol=ATOL, rtol=0)


def test_attn_tc_nan_code_gives_nan_as_the_oracle(be):
    g = O.Geometry(ratio=128, num_heads=16, max_seq_len=8192, window=16)
    rng = np.random.default_rng(12)
    st = O.State.empty(g)
    st.records[:8] = O.pack_fp8_record(rng.standard_normal((8, 512)).astype(np.float32))
    st.ring[:] = O.pack_fp8_record(rng.standard_normal((16, 512)).astype(np.float32))
    st.records[5, 65 * 2 + 17] = 0xFF  # E4M3FN NaN in a selected record
    st.records[6, 65 * 4 + 3] = 0x7F  # and in one that is not selected
    st.tokens = 2000
    q = rng.standard_normal((16, 512)).astype(np.float32)
    sink = rng.standard_normal(16).astype(np.float32)
    sel = np.array([0, 5, 2], np.int32)
    ref = O.attend(g, q, O.attention_rows(g, st, sel), sink, 1999)
    y = _run(be, g, st, q, sel, 1999, sink, 1, 16)
    assert np.isnan(ref).all() and np.isnan(y).all()
    sel = np.array([0, 6, 2], np.int32)
    ref = O.attend(g, q, O.attention_rows(g, st, sel), sink, 1999)
    np.testing.assert_allclose(_run(be, g, st, q, sel, 1999, sink, 1, 16), ref, atol=ATOL, rtol=0)
