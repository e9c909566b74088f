"""The multi-block radix select (topk.cu: topk_mb_hist x 3, topk_mb_count, topk_mb_write)
under emulation: exactly oracle.topk_ids (the k largest by order key, NaN lowest, -0 as +0,
ties toward the lower id, ascending), across blocks, with k < n, k = n, ties at the
threshold split across slices, special values, batched requests whose scores are not
16-byte aligned (the scalar path) and the block count the launcher derives from the SMs.
"""

from __future__ import annotations

import numpy as np
import pytest

from csa_plan.kernels import oracle as O
from csa_plan.kernels.tc_geometry import TOPK_MB_MIN_KEYS, topk_blocks, topk_work_words

from helpers.emulator import requires_emulator

pytestmark = requires_emulator


def _topk(be, s, k, blocks, requests=1, n=None, stride=0, out_stride=None):
    n = s.shape[-1] if n is None else n
    ks = min(k, n)
    out_stride = ks if out_stride is None else out_stride
    out = np.full(max(1, requests * out_stride), -7, np.int32)
    work = np.full(requests * topk_work_words(blocks), 0xDEADBEEF, np.uint32)  # garbage: the kernels zero what they use
    be.topk(s, n, k, out, requests=requests, score_stride=stride, out_stride=out_stride, work=work, blocks=blocks)
    return out


@pytest.mark.parametrize("n,k,blocks", [(20000, 1024, 5), (9000, 64, 3), (4099, 4099, 2), (3000, 5000, 4),
                                        (1, 1, 2), (20000, 1, 7)])
def test_topk_mb_exact_set(be, n, k, blocks):
    rng = np.random.default_rng(n + k)
    s = rng.standard_normal(n).astype(np.float32)
    out = _topk(be, s, k, blocks)
    assert np.array_equal(out[:min(k, n)], O.topk_ids(s, k))


def test_topk_mb_ties_at_the_threshold_across_slices_and_special_values(be):
    rng = np.random.default_rng(5)
    n = 12000
    s = rng.choice(np.float32([0.5, 0.25, -1.0]), n).astype(np.float32)  # thousands of ties
    s[rng.integers(0, n, 40)] = np.nan
    s[rng.integers(0, n, 40)] = -np.inf
    s[rng.integers(0, n, 40)] = -0.0
    s[rng.integers(0, n, 40)] = 0.0
    s[rng.integers(0, n, 20)] = np.float32(1e-40)  # denormals keep their order
    s[rng.integers(0, n, 5)] = np.inf
    for k in (1, 3000, 5000, 11900, n):  # the k-th key is 0.5, 0.25, ... each cut inside a tie run
        out = _topk(be, s, k, 6)
        assert np.array_equal(out, O.topk_ids(s, k)), k
    allnan = np.full(5000, np.nan, np.float32)
    assert np.array_equal(_topk(be, allnan, 700, 3), np.arange(700, dtype=np.int32))


def test_topk_mb_batched_unaligned_requests(be):
    rng = np.random.default_rng(8)
    R, n, stride, k = 3, 6001, 6003, 500  # request 1 starts 12 bytes past 16: scalar loads there
    s = rng.standard_normal(R * stride).astype(np.float32)
    out = _topk(be, s, k, 4, requests=R, n=n, stride=stride, out_stride=k + 3)
    for r in range(R):
        assert np.array_equal(out[r * (k + 3): r * (k + 3) + k], O.topk_ids(s[r * stride: r * stride + n], k))


def test_topk_blocks_from_the_sm_count_and_the_single_block_fallback(be):
    assert topk_blocks(262144, 16, 132) == 16 and topk_blocks(262144, 1, 132) == 64
    assert topk_blocks(TOPK_MB_MIN_KEYS - 1, 1, 132) == 1 and topk_blocks(TOPK_MB_MIN_KEYS, 1, 132) == 4
    # no work buffer (or one too small): the single-block kernel, same answer
    rng = np.random.default_rng(1)
    s = rng.standard_normal(TOPK_MB_MIN_KEYS).astype(np.float32)
    small = np.zeros(10, np.uint32)
    a = np.full(256, -1, np.int32)
    be.topk(s, len(s), 256, a, work=small)
    assert np.array_equal(a, O.topk_ids(s, 256))


def _threshold_bin(s, k):
    """The first radix digit (top 11 bits of the order key) the k-th largest key lies in."""
    return int(O.order_keys(s)[O.topk_ids(s, k)].min()) >> 21


def _compacted(be, s, k, blocks, seg, requests=1, n=None, stride=0):
    """topk with a segment of `seg` entries per block; returns (ids, work rows, layout)."""
    from csa_plan.kernels.tc_geometry import topk_header_words

    n = s.shape[-1] if n is None else n
    ks = min(k, n)
    words = topk_header_words(blocks) + 2 * blocks * seg
    work = np.full(requests * words, 0xDEADBEEF, np.uint32)
    tw = be.topk_work(work, n, requests, blocks=blocks)
    assert tw is not None and tw.layout.seg_capacity == seg and tw.layout.words == words
    out = np.full(requests * ks, -7, np.int32)
    be.topk(s, n, k, out, requests=requests, score_stride=stride, out_stride=ks, work=tw)
    return out, work.reshape(requests, words), tw.layout


def _segments(wrow, lay):
    """Per block: (the entries its pass 1 found, the stored (id, key) rows) of one request."""
    out = []
    for b in range(lay.blocks):
        count = int(wrow[lay.entries_word(b)])
        a = lay.segment_word(b)
        out.append((count, wrow[a:a + 2 * min(count, lay.seg_capacity)].reshape(-1, 2)))
    return out


def _want_segments(s, k, blocks):
    """Per slice, the ids of keys in the threshold bin or above, ascending."""
    from csa_plan.kernels.tc_geometry import topk_slice_ids

    keys, per = O.order_keys(s), topk_slice_ids(len(s), blocks)
    ids = np.flatnonzero((keys >> 21) >= _threshold_bin(s, min(k, len(s))))
    return [ids[(ids >= b * per) & (ids < (b + 1) * per)] for b in range(blocks)], keys


@pytest.mark.parametrize("n,k,blocks", [(20000, 1024, 5), (9000, 64, 3), (4099, 4099, 2), (3000, 5000, 4),
                                        (20000, 1, 7), (16384, 512, 64)])
def test_topk_mb_compacted_segments_exact(be, n, k, blocks):
    """Room for every key: each block's segment holds exactly its slice's keys of hist0's
    threshold bin and above (ids ascending, their order keys), the later passes read the
    segments, and the ids are oracle.topk_ids."""
    from csa_plan.kernels.tc_geometry import topk_slice_ids

    rng = np.random.default_rng(n + 3 * k)
    s = rng.standard_normal(n).astype(np.float32)
    seg = topk_slice_ids(n, blocks)
    out, w, lay = _compacted(be, s, k, blocks, seg + seg % 2)
    assert np.array_equal(out, O.topk_ids(s, k))
    want, keys = _want_segments(s, k, blocks)
    got = _segments(w[0], lay)
    assert sum(c for c, _ in got) < n or min(k, n) == n
    for (count, rows), ids in zip(got, want):
        assert count == len(ids) and np.array_equal(rows[:, 0], ids) and np.array_equal(rows[:, 1], keys[ids])


def test_topk_mb_compacted_ties_special_values_and_unaligned_requests(be):
    rng = np.random.default_rng(6)
    n = 12000
    s = rng.choice(np.float32([0.5, 0.25, -1.0]), n).astype(np.float32)
    s[rng.integers(0, n, 40)] = np.nan
    s[rng.integers(0, n, 40)] = -0.0
    s[rng.integers(0, n, 40)] = 0.0
    s[rng.integers(0, n, 20)] = np.float32(1e-40)
    s[rng.integers(0, n, 5)] = np.inf
    for k in (1, 3000, 5000, 11900, n):  # each cut inside a run of thousands of equal keys
        out, _, _ = _compacted(be, s, k, 6, 2000)
        assert np.array_equal(out, O.topk_ids(s, k)), k
    allnan = np.full(5000, np.nan, np.float32)
    out, w, lay = _compacted(be, allnan, 700, 3, 1668)
    assert np.array_equal(out, np.arange(700, dtype=np.int32))
    assert [c for c, _ in _segments(w[0], lay)] == [1668, 1668, 1664]
    R, n, stride, k = 3, 6001, 6003, 500  # request 1 starts 12 bytes past 16: scalar loads there
    s = rng.standard_normal(R * stride).astype(np.float32)
    out, _, _ = _compacted(be, s, k, 4, 1000, requests=R, n=n, stride=stride)
    for r in range(R):
        assert np.array_equal(out[r * k:(r + 1) * k], O.topk_ids(s[r * stride: r * stride + n], k)), r


def test_topk_mb_segment_overflow_falls_back_to_the_slice(be):
    """A slice with more keys of the threshold bin and above than its segment holds: its count
    says so, at most seg_capacity are stored (nothing past the segment), and that block reads
    its slice of the scores in pass 2, the count and the write while the others read their
    segments — the same ids; with every segment overflowing, all read the scores."""
    rng = np.random.default_rng(9)
    n = 20000
    s = (1.0 + rng.random(n) * 0.2).astype(np.float32)  # [1, 1.2): all in one 11-bit bin
    s[rng.integers(0, n, 300)] = 1.0  # and ties
    # the words after the last segment (as many as every key would take) stay untouched
    from csa_plan.kernels.tc_geometry import topk_header_words

    words = topk_header_words(5) + 2 * 5 * 64
    work = np.full(words + 2 * n, 0xABCD1234, np.uint32)
    tw = be.topk_work(work[:words], n, 1, blocks=5)
    out = np.zeros(700, np.int32)
    be.topk(s, n, 700, out, work=tw)
    assert np.array_equal(out, O.topk_ids(s, 700)) and np.all(work[words:] == 0xABCD1234)
    for k in (1, 700, 19000):
        out, w, lay = _compacted(be, s, k, 5, 64)
        assert np.array_equal(out, O.topk_ids(s, k)), k
        assert [(c, len(r)) for c, r in _segments(w[0], lay)] == [(4000, 64)] * 5
    # skewed: slices 0..3 below 0.5 but for ten keys in slice 1; slice 4 all in [1, 1.2)
    s2 = (rng.random(n) * 0.5).astype(np.float32)
    s2[16000:] = s[16000:]
    s2[4100:4110] = np.float32(1.1)
    for k in (5, 700, 3900):
        out, w, lay = _compacted(be, s2, k, 5, 64)
        assert np.array_equal(out, O.topk_ids(s2, k)), k
        got = _segments(w[0], lay)
        assert [c for c, _ in got] == [0, 10, 0, 0, 4000]
        assert np.array_equal(got[1][1][:, 0], np.arange(4100, 4110))


def _launches(be, monkeypatch):
    names = []
    orig = be._launch

    def rec(kernel, grid, block, args, smem=0):
        names.append((kernel, args[-2][1] if kernel == "topk_mb_hist" else None))  # pass
        return orig(kernel, grid, block, args, smem)

    monkeypatch.setattr(be, "_launch", rec)
    return names


def test_topk_mb_fused_histogram_skips_pass_0_and_matches_the_oracle(be, monkeypatch):
    """index_scores(topk_work=...) fills hist0 in its epilogue: topk launches passes 1 and 2
    only, with and without candidate room, and the ids are oracle.topk_ids of the scores;
    the scores are the same bits as an unfused launch."""
    rng = np.random.default_rng(12)
    n, heads, R = 1200, 4, 2
    keys = O.pack_fp4_key(rng.standard_normal((R * n, 128)).astype(np.float32))
    q = rng.standard_normal((R, heads, 128)).astype(np.float32)
    wts = rng.standard_normal((R, heads)).astype(np.float32)
    plain = np.zeros((R, n), np.float32)
    be.index_scores(keys, q, wts, heads, n, plain, requests=R, key_stride=n * 68, score_stride=n)
    for cap in (0, 64, n):
        k = 100
        work = np.full(R * topk_work_words(3, cap), 0xDEADBEEF, np.uint32)
        tw = be.topk_work(work, n, R, blocks=3)
        scores = np.zeros((R, n), np.float32)
        names = _launches(be, monkeypatch)
        filled = be.index_scores(keys, q, wts, heads, n, scores, requests=R, key_stride=n * 68, score_stride=n,
                                 topk_work=tw)
        out = np.full(R * k, -1, np.int32)
        be.topk(scores, n, k, out, requests=R, score_stride=n, out_stride=k, work=filled)
        monkeypatch.undo()
        assert np.array_equal(scores.view(np.uint32), plain.view(np.uint32))
        assert [x for x in names if x[0] == "topk_mb_hist"] == [("topk_mb_hist", 1), ("topk_mb_hist", 2)]
        assert ("topk_mb_hist", 0) not in names
        for r in range(R):
            assert np.array_equal(out[r * k:(r + 1) * k], O.topk_ids(scores[r], k)), (cap, r)
    with pytest.raises(ValueError):  # a TopkWork laid out for other scores is refused
        be.index_scores(keys, q, wts, heads, n - 1, scores, requests=R, key_stride=n * 68, score_stride=n,
                        topk_work=tw)


def test_topk_work_layout_is_the_kernels():
    """tc_geometry's layout constants are topk.cu's and csa_common.cuh's #defines; each
    block's segment is what the lent buffer holds past the header, at most its slice's ids,
    16-byte aligned per block and per request."""
    import re

    from csa_plan.kernels import backends as B
    from csa_plan.kernels import tc_geometry as G

    src = (B.KERNEL_DIR / "topk.cu").read_text() + (B.KERNEL_DIR / "csa_common.cuh").read_text()
    got = {k: int(v) for k, v in re.findall(r"^#define CSA_TK_(COUNTS|BINS0|SHIFT0) (\d+)", src, re.M)}
    assert got == {"COUNTS": G.TOPK_MB_HIST_WORDS, "BINS0": G.TOPK_MB_HIST0_BINS, "SHIFT0": 32 - 11}
    lay = G.topk_layout(262144, 16, 16 * topk_work_words(16, 5000))
    assert (lay.blocks, lay.seg_capacity, lay.header_words) == (16, 314, 5168) and lay.words % 4 == 0
    assert lay.segment_word(1) - lay.segment_word(0) == 628 and lay.entries_word(0) == 5120 + 32
    assert G.topk_layout(1000, 1, 10**6, blocks=2).seg_capacity == 500  # never more than the slice
    assert G.topk_layout(262144, 16, 16 * 5167) is None  # no room for the header: topk_radix
    assert G.topk_layout(262144, 16, 16 * 5199).seg_capacity == 0  # one entry per block is not even: none


def test_harness_decode_lends_the_work_to_the_indexer_and_selects_the_oracle_set(be, monkeypatch):
    """DeviceLayer.attend lays top-k's work (the attention workspace) out before the indexer,
    so the indexer fills hist0 and top-k runs passes 1 and 2 only, compacting candidates;
    the selected set is the oracle's at every step. The multi-block thresholds are lowered
    so a small layer (128 heads: a workspace that holds the header) takes that path."""
    from csa_plan.kernels import tc_geometry as G
    from csa_plan.kernels.harness import DeviceLayer, Group
    from csa_plan.planner.descriptor import Descriptor
    from csa_plan.planner.ledger import Ledger

    monkeypatch.setattr(G, "TOPK_MB_MIN_KEYS", 16)
    monkeypatch.setattr(G, "TOPK_MB_KEYS_PER_BLOCK", 16)
    g = O.Geometry(ratio=4, num_heads=128, max_seq_len=256, window=16, index_heads=4, index_topk=32)
    d = Descriptor(layer_id=0, compression_ratio=4, num_heads=g.num_heads, window=g.window,
                   max_seq_len=g.max_seq_len, index_num_heads=g.index_heads, index_head_dim=128,
                   index_topk=g.index_topk)
    led = Ledger()
    prefill = 160
    with Group(led, led.next_request_id(), 0, d, np) as grp:
        w, inp = O.make_layer(g, prefill + 3, seed=3)
        dl = DeviceLayer(be, grp, w, inp)
        dl.prefill(prefill)
        st = O.prefill(g, w, inp, prefill)
        for _ in range(3):
            names = _launches(be, monkeypatch)
            dl.decode()
            monkeypatch.setattr(be, "_launch", type(be)._launch.__get__(be))
            _, so = O.decode_step(g, w, inp, st)
            assert np.array_equal(dl.last_selected, so)
            hist = [p for kname, p in names if kname == "topk_mb_hist"]
            assert hist == [1, 2] and ("index_tc_scores", None) in names, names
            visible = dl.tokens // 4
            lay = G.topk_layout(visible, 1, dl.ws_attn.size // 4)
            counts = [int(dl.ws_attn.view(np.uint32)[lay.entries_word(b)]) for b in range(3)]
            assert len(so) == 32 < visible and lay.blocks == 3 and lay.seg_capacity > 0, lay
            assert all(c <= lay.seg_capacity for c in counts) and sum(counts) >= 32, counts


@pytest.mark.parametrize("kernel", ["topk_mb_hist", "topk_mb_count", "topk_mb_write", "topk_radix", "index_tc_scores"])
def test_emulator_entry_takes_the_kernel_s_arguments(kernel):
    """The ctypes argument types of each emulator entry (grid, block, then the kernel's own)
    are the kernel's parameters kind by kind (a missing int would shift every later argument)."""
    import ctypes

    from csa_plan.kernels.backends import emulator_library, kernel_signatures

    kinds = {"p": ctypes.c_void_p, "i": ctypes.c_int, "l": ctypes.c_longlong, "f": ctypes.c_float}
    got = list(getattr(emulator_library(), "emu_" + kernel).argtypes)[4:]
    assert got == [kinds[kind] for _, kind, _ in kernel_signatures()[kernel].params]


def test_topk_mb_slices_of_several_in_flight_trips_with_ties_and_fallbacks(be):
    """Slices of several CSA_TK_INFLIGHT trips (4 float4 per thread: 4,096 keys a trip of the
    scans, 4 rounds of 1,024 ids a trip of the round loops) plus a partial trip and a scalar
    tail: unfused, compacted with room, compacted overflowing (every block falls back to its
    slice) and unaligned batched requests — exactly oracle.topk_ids, ties cut inside runs."""
    from csa_plan.kernels.tc_geometry import topk_slice_ids

    rng = np.random.default_rng(11)
    n = 3 * 3 * 4096 + 777  # 3 blocks: 3 whole trips each, then a partial one and the tail
    s = rng.choice(np.float32([0.5, 0.25, -1.0, 2.0]), n).astype(np.float32)
    s[rng.integers(0, n, 60)] = np.nan
    s[rng.integers(0, n, 60)] = -0.0
    s[rng.integers(0, n, 60)] = 0.0
    s[rng.integers(0, n, 30)] = np.float32(1e-40)
    s[rng.integers(0, n, 5)] = np.inf
    for k in (1, 7000, 20000, 30000, n - 5, n + 3):
        want = O.topk_ids(s, k)
        assert np.array_equal(_topk(be, s, k, 3)[:min(k, n)], want), k
        seg = topk_slice_ids(n, 3)
        for cap in (seg + seg % 2, 900):  # every entry fits; no block's fit (the slice is read again)
            out, _, _ = _compacted(be, s, k, 3, cap)
            assert np.array_equal(out[:min(k, n)], want), (k, cap)
    g = rng.standard_normal(n).astype(np.float32)
    assert np.array_equal(_topk(be, g, 2048, 3), O.topk_ids(g, 2048))
    R, m, stride, k = 2, 2 * 4 * 4096 + 13, 2 * 4 * 4096 + 19, 3000  # request 1 unaligned
    x = rng.standard_normal(R * stride).astype(np.float32)
    out = _topk(be, x, k, 2, requests=R, n=m, stride=stride, out_stride=k)
    got, _, _ = _compacted(be, x, k, 2, 9000, requests=R, n=m, stride=stride)
    for r in range(R):
        want = O.topk_ids(x[r * stride: r * stride + m], k)
        assert np.array_equal(out[r * k:(r + 1) * k], want), r
        assert np.array_equal(got[r * k:(r + 1) * k], want), r
