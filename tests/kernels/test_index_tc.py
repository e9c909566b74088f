"""index_tc_scores (tensor-core indexer, index_tc.cu) under emulation, against the oracle.

The kernel rounds the index query to BF16 (the oracle's index_query does the same; keys
are exact in BF16), so against O.index_scores with that query the only difference is
summation order: tolerance 1e-5 of the largest |score| (as for the SIMT kernel). Against
the unrounded fp32 query the difference is the BF16 rounding itself (2^-9 relative per
element): measured and bounded below, together with what it does to a top-k set.
"""

from __future__ import annotations

import numpy as np
import pytest

from csa_plan.kernels import oracle as O

from helpers.emulator import requires_emulator

SCORE_RTOL = 1e-5

pytestmark = requires_emulator


def _keys(rng, n):
    return O.pack_fp4_key(rng.standard_normal((n, 128)).astype(np.float32))


@pytest.mark.parametrize("heads,n,blocks", [(4, 37, None), (64, 300, 2), (20, 129, None), (64, 64, 1)])
def test_index_tc_matches_oracle_with_bf16_query(be, heads, n, blocks):
    rng = np.random.default_rng(heads + n)
    keys = _keys(rng, n)
    q = rng.standard_normal((heads, 128)).astype(np.float32)
    wts = rng.standard_normal(heads).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    be.index_scores(keys, q, wts, heads, n, out, blocks=blocks)  # blocks < tiles: the tile loop
    ref = O.index_scores(keys, O.bf16_round(q), wts)
    assert np.abs(out - ref).max() <= SCORE_RTOL * np.abs(ref).max()
    simt = np.zeros(n, np.float32)
    be.index_scores(keys, O.bf16_round(q), wts, heads, n, simt, kernel="simt")
    assert np.abs(out - simt).max() <= SCORE_RTOL * np.abs(ref).max()


def test_index_tc_batched_requests_unaligned_stride_and_extreme_scales(be):
    rng = np.random.default_rng(3)
    R, n, heads = 3, 70, 16  # 70 * 68 B per request: request 1 starts 8 bytes off 16
    keys = _keys(rng, R * n).reshape(R, n, 68)
    keys[1, 5, 0] = 0  # E8M0 scale bytes outside the table path (2^-127, 2^-126) ...
    keys[1, 6, 17] = 1
    keys[2, 9, 1:68] = 0  # ... and the table's top: one nonzero nibble (0.5) at scale 2^125
    keys[2, 9, [0, 17, 34, 51]] = 127
    keys[2, 9, 0] = 252
    keys[2, 9, 1] = 0x01
    q = rng.standard_normal((R, heads, 128)).astype(np.float32)
    wts = rng.standard_normal((R, heads)).astype(np.float32)
    out = np.zeros((R, n), np.float32)
    be.index_scores(keys, q, wts, heads, n, out, requests=R, key_stride=n * 68, score_stride=n)
    for r in range(R):
        ref = O.index_scores(keys[r], O.bf16_round(q[r]), wts[r])
        assert np.abs(out[r] - ref).max() <= SCORE_RTOL * np.abs(ref).max(), r


def test_bf16_query_tolerance_against_fp32_query(be):
    """The cost of the BF16 query, stated: scores within 2^-7 of max|score| of the fp32-query
    scores (observed ~1e-3), and a top-256 of 4096 keeps at least 97 % of its members."""
    rng = np.random.default_rng(11)
    n, heads = 4096, 64
    keys = _keys(rng, n)
    g = O.Geometry(ratio=4, num_heads=16, max_seq_len=4 * n, index_heads=heads, index_topk=256)
    inp = O.Inputs(q=np.zeros((1, 1, 512), np.float32), kv=np.zeros((1, 512), np.float32),
                   ckv=np.zeros((1, 1024), np.float32), cgate=np.zeros((1, 1024), np.float32),
                   iq=rng.standard_normal((1, heads, 128)).astype(np.float32),
                   iw=rng.standard_normal((1, heads)).astype(np.float32))
    q, wts = O.index_query(g, inp, 0)
    assert np.array_equal(q, O.bf16_round(q))  # the oracle's query is already BF16
    q32 = (inp.iq[0] @ O.HADAMARD_128).astype(np.float32)
    out = np.zeros(n, np.float32)
    be.index_scores(keys, q32, wts, heads, n, out)  # the kernel rounds the fp32 query itself
    exact = O.index_scores(keys, q32, wts)
    assert np.abs(out - O.index_scores(keys, q, wts)).max() <= SCORE_RTOL * np.abs(exact).max()
    rel = np.abs(out - exact).max() / np.abs(exact).max()
    print(f"bf16 query: max score error {rel:.2e} of max|score|")
    assert rel <= 2.0 ** -7, rel
    overlap = len(set(O.topk_ids(out, 256)) & set(O.topk_ids(exact, 256))) / 256
    print(f"top-256 overlap {overlap:.4f}")
    assert overlap >= 0.97, overlap


def test_index_tc_every_table_scale_in_one_tile(be):
    """Each FP4 block picks its scale's table (one of the 256 the block builds) by its E8M0
    byte: 128 keys of one tile whose 512 blocks take scales 60..187 (each many times)."""
    rng = np.random.default_rng(5)
    n, heads = 128, 8
    keys = _keys(rng, n)
    keys[:, [0, 17, 34, 51]] = (60 + np.arange(n * 4) % 128).reshape(n, 4).astype(np.uint8)
    q = rng.standard_normal((heads, 128)).astype(np.float32)
    wts = rng.standard_normal(heads).astype(np.float32)
    out = np.zeros(n, np.float32)
    be.index_scores(keys, q, wts, heads, n, out)
    ref = O.index_scores(keys, O.bf16_round(q), wts)
    assert np.all(np.isfinite(ref))
    assert np.abs(out - ref).max() <= SCORE_RTOL * np.abs(ref).max()


def test_index_tc_fused_topk_histogram_is_numpy_histogram_of_order_keys(be):
    """With a top-k work buffer lent, the epilogue's hist0 (per request, over the scores it
    writes) equals np.bincount of the order keys' top 11 bits — +-inf and NaN scores (weights
    of +-3e38 overflow the head sum), zeros and a partial last tile included — every other
    header word is zeroed and nothing past the header is touched; the scores are the same
    bits as without the fusion."""
    from csa_plan.kernels.tc_geometry import TOPK_MB_HIST0_BINS, topk_work_words

    rng = np.random.default_rng(21)
    R, n, heads, blocks = 2, 333, 8, 2  # blocks over tiles: the tile loop; 333 = 2 tiles + 77
    keys = _keys(rng, R * n).reshape(R, n, 68)
    keys[1, 9, 1:] = 0  # an all-zero key: score 0
    q = rng.standard_normal((R, heads, 128)).astype(np.float32)
    wts = rng.standard_normal((R, heads)).astype(np.float32)
    wts[0, :2] = [3e38, -3e38]  # relu(d) x w overflows: +inf, -inf, and NaN where both do
    plain = np.zeros((R, n), np.float32)
    be.index_scores(keys, q, wts, heads, n, plain, requests=R, key_stride=n * 68, score_stride=n, blocks=blocks)
    words = topk_work_words(3, 40)
    work = np.full(R * words, 0xDEADBEEF, np.uint32)
    tw = be.topk_work(work, n, R, blocks=3)
    scores = np.zeros((R, n), np.float32)
    filled = be.index_scores(keys, q, wts, heads, n, scores, requests=R, key_stride=n * 68, score_stride=n,
                             blocks=blocks, topk_work=tw)
    assert filled.hist0_filled and not tw.hist0_filled
    assert np.array_equal(scores.view(np.uint32), plain.view(np.uint32))
    w = work.reshape(R, words)
    hdr = tw.layout.header_words
    for r in range(R):
        want = np.bincount(O.order_keys(scores[r]) >> 21, minlength=TOPK_MB_HIST0_BINS)
        assert np.array_equal(w[r, :TOPK_MB_HIST0_BINS], want), r
        assert not w[r, TOPK_MB_HIST0_BINS:hdr].any() and np.all(w[r, hdr:] == 0xDEADBEEF)
    assert np.isnan(scores[0]).any() and np.isposinf(scores[0]).any() and np.isneginf(scores[0]).any()
