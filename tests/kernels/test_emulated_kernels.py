"""Every CUDA C kernel, compiled with g++ under cuda_emu.h, against the oracle.

Tolerances: attention outputs within 1e-5 absolute, index scores within 1e-5 of the
largest |score| (observed ~1e-6: only summation order and expf/cosf differ); record
and key bytes, ring rows and selected index sets exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from csa_plan.kernels import oracle as O

ATOL = 1e-5
SCORE_RTOL = 1e-5  # index scores: relative to the largest |score|

from csa_plan.kernels.backends import EmulationError, emulator_library

from helpers.emulator import requires_emulator
pytestmark = requires_emulator


CSA = O.Geometry(ratio=4, num_heads=4, max_seq_len=256, window=16, index_heads=4, index_topk=8)
HCA = O.Geometry(ratio=128, num_heads=4, max_seq_len=512, window=16)


@pytest.mark.parametrize("g,S", [(CSA, 37), (HCA, 300)], ids=["csa", "hca"])
def test_emit_records_bytes_equal_oracle(be, g, S):
    w, inp = O.make_layer(g, S, seed=11)
    n = S // g.ratio
    rows = O.token_rows(inp.ckv[:S], inp.cgate[:S], w.ape, np.arange(S))
    tok = np.ascontiguousarray(O.padded_rows(rows, g.ratio) if g.ratio == 4 else rows)
    out = np.zeros((g.records, g.record_bytes), np.uint8)
    be.emit_records(tok, g.ratio if g.ratio == 4 else 0, g.ratio, g.ratio == 4, w.norm, True, O.INV_FREQ, 0, n, out)
    assert np.array_equal(out, O.prefill(g, w, inp, S).records)


def test_emit_window_rows_and_index_keys_equal_oracle(be):
    g = CSA
    S = 41
    w, inp = O.make_layer(g, S, seed=12)
    st = O.prefill(g, w, inp, S)
    ring = np.zeros_like(st.ring)
    pos = np.arange(S - g.window, S)
    tok = np.zeros((len(pos), 2, 512), np.float32)
    tok[:, 0] = inp.kv[pos]
    be.emit_records(tok, 0, 1, False, w.norm, False, O.INV_FREQ, int(pos[0]), len(pos), ring, ring_rows=g.window)
    assert np.array_equal(ring, st.ring)
    irows = O.token_rows(inp.ickv[:S], inp.icgate[:S], w.index_ape, np.arange(S))
    keys = np.zeros_like(st.index_keys)
    be.emit_index_keys(np.ascontiguousarray(O.padded_rows(irows, 4)), 4, w.index_norm, 0, S // 4, keys)
    assert np.array_equal(keys, st.index_keys)


def test_index_scores_match_oracle(be):
    rng = np.random.default_rng(5)
    n, heads = 300, 8
    keys = O.pack_fp4_key(rng.standard_normal((n, 128)).astype(np.float32))
    q = O.bf16_round(rng.standard_normal((heads, 128)).astype(np.float32))  # the index query is BF16 (oracle)
    wts = rng.standard_normal(heads).astype(np.float32)
    out = np.zeros(n, np.float32)
    be.index_scores(keys, q, wts, heads, n, out, blocks=3)  # fewer blocks than records: grid-stride loop
    ref = O.index_scores(keys, q, wts)
    assert np.abs(out - ref).max() <= SCORE_RTOL * np.abs(ref).max()


@pytest.mark.parametrize("n,k", [(1, 1), (37, 8), (1000, 64), (5000, 1024), (300, 300)])
def test_topk_radix_exact_set(be, n, k):
    rng = np.random.default_rng(n)
    s = rng.standard_normal(n).astype(np.float32)
    out = np.full(k, -1, np.int32)
    be.topk(s, n, k, out)
    assert np.array_equal(out, O.topk_ids(s, k))


def test_topk_radix_ties_and_negative_zero(be):
    s = np.array([0.0, -0.0, 1.0, 0.0, -1.0, 1.0, 0.0, -0.0], np.float32)
    out = np.full(4, -1, np.int32)
    be.topk(s, len(s), 4, out)
    assert list(out) == [0, 1, 2, 5] == list(O.topk_ids(s, 4))
    s2 = np.zeros(700, np.float32)  # all equal: the lowest ids, across thread chunks
    out2 = np.full(300, -1, np.int32)
    be.topk(s2, 700, 300, out2)
    assert list(out2) == list(range(300))


def test_topk_batched_requests(be):
    rng = np.random.default_rng(9)
    s = rng.standard_normal((3, 500)).astype(np.float32)
    out = np.full((3, 16), -1, np.int32)
    be.topk(s, 500, 16, out, requests=3, score_stride=500, out_stride=16)
    for r in range(3):
        assert np.array_equal(out[r], O.topk_ids(s[r], 16))


@pytest.mark.parametrize("nchunks", [1, 3])
@pytest.mark.parametrize("heads", [4, 20])
def test_attention_with_sink_matches_oracle(be, nchunks, heads):
    g = O.Geometry(ratio=128, num_heads=heads, max_seq_len=1024, window=16)
    w, inp = O.make_layer(g, 600, seed=heads)
    st = O.prefill(g, w, inp, 600)
    p = 599
    sel = np.array([3, 0, 2], np.int32)
    y = np.zeros((heads, 512), np.float32)
    ml = np.zeros(2 * heads * nchunks, np.float32)
    po = y if nchunks == 1 else np.zeros(heads * nchunks * 512, np.float32)
    be.attention(inp.q[p], st.ring, 16, st.records, sel, 3, heads, p, O.INV_FREQ, w.sink, ml, po, y, nchunks)
    ref = O.attend(g, inp.q[p], O.attention_rows(g, st, sel), w.sink, p)
    np.testing.assert_allclose(y, ref, atol=ATOL, rtol=0)


def test_attention_select_all_without_ids(be):
    g = HCA
    w, inp = O.make_layer(g, 400, seed=8)
    st = O.prefill(g, w, inp, 400)
    y = np.zeros((4, 512), np.float32)
    ml = np.zeros(2 * 4 * 2, np.float32)
    po = np.zeros(4 * 2 * 512, np.float32)
    be.attention(inp.q[399], st.ring, 16, st.records, None, 3, 4, 399, O.INV_FREQ, w.sink, ml, po, y, 2)
    np.testing.assert_allclose(y, O.output_at(g, w, inp, st, 399)[0], atol=ATOL, rtol=0)


@pytest.mark.parametrize("g,prefill", [(CSA, 29), (HCA, 120)], ids=["csa", "hca"])
def test_device_layer_decode_matches_oracle_across_record_boundaries(be, g, prefill):
    from csa_plan.kernels.harness import DeviceLayer, Group
    from csa_plan.planner.descriptor import Descriptor
    from csa_plan.planner.ledger import Ledger

    d = Descriptor(layer_id=0, compression_ratio=g.ratio, num_heads=g.num_heads, window=g.window,
                   max_seq_len=g.max_seq_len, index_num_heads=g.index_heads,
                   index_head_dim=128 if g.ratio == 4 else 0, index_topk=g.index_topk)
    led = Ledger()
    with Group(led, led.next_request_id(), 0, d, np) as grp:
        assert grp.buffers.by_class() == grp.planned.by_class()
        w, inp = O.make_layer(g, prefill + 16, seed=21)
        dl = DeviceLayer(be, grp, w, inp)
        dl.prefill(prefill)
        st = O.prefill(g, w, inp, prefill)
        for _ in range(16):
            y = dl.decode()
            yo, so = O.decode_step(g, w, inp, st)
            np.testing.assert_allclose(y, yo, atol=ATOL, rtol=0)
            assert np.array_equal(dl.last_selected, so)
            assert O.states_equal(dl.state(), st)
        assert st.completed > prefill // g.ratio
    assert led.resident_bytes() == 0 and led.active_group_count == 0


def test_emulator_reports_barrier_reached_by_part_of_a_block(be):
    lib = emulator_library()
    out = np.zeros(64, np.int32)
    assert lib.emu_partial_barrier(64, out.ctypes.data) == -1
    assert "barrier reached by only part of a block" in lib.csa_emu_last_error().decode()
    assert "63 of 64 threads" in lib.csa_emu_last_error().decode()


def test_emulator_shuffle_and_ballot(be):
    lib = emulator_library()
    out = np.zeros(64, np.int32)
    ballot = np.zeros(2, np.uint32)
    assert lib.emu_shuffle(64, out.ctypes.data, ballot.ctypes.data) == 0
    assert list(out) == [i ^ 1 for i in range(64)]
    assert list(ballot) == [0xAAAAAAAA, 0xAAAAAAAA]


def test_emulator_launch_error_raises(be):
    args = [("p", np.zeros(4, np.float32)), ("l", 0), ("i", 4), ("i", 1), ("p", np.zeros(1, np.int32)), ("l", 0)]
    with pytest.raises(EmulationError, match="invalid block size"):  # the emulator's own check
        be._run("topk_radix", (1, 1, 1), 2048, args)
    with pytest.raises(ValueError, match="launch_bounds"):  # caught in Python before any launch
        be._launch("topk_radix", (1, 1, 1), 2048, args)
