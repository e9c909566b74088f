"""The NumPy oracle: decode = full recompute, byte formats, the sink."""

from __future__ import annotations

import numpy as np
import pytest

from csa_plan.kernels import oracle as O
from csa_plan.planner.descriptor import Descriptor
from csa_plan.planner.layout import group_bytes, index_key_bytes, record_width_bytes
from csa_plan.planner.descriptor import CacheFormat

CSA = O.Geometry(ratio=4, num_heads=4, max_seq_len=256, window=16, index_heads=4, index_topk=8)
HCA = O.Geometry(ratio=128, num_heads=4, max_seq_len=512, window=16)


@pytest.mark.parametrize("g,prefill", [(CSA, 30), (HCA, 120), (HCA, 250)], ids=["csa", "hca", "hca-2nd-record"])
def test_decode_equals_full_recompute_every_step(g, prefill):
    steps = 20
    w, inp = O.make_layer(g, prefill + steps, seed=7)
    st = O.prefill(g, w, inp, prefill)
    crossed = set()
    for _ in range(steps):
        out, sel = O.decode_step(g, w, inp, st)
        ref, ref_sel, ref_state = O.full_recompute(g, w, inp, st.tokens - 1)
        assert np.array_equal(out, ref)
        assert np.array_equal(sel, ref_sel)
        assert O.states_equal(st, ref_state)
        crossed.add(st.completed)
    assert len(crossed) >= 2  # the steps emitted at least one new record
    if g.ratio == 4:
        assert len(crossed) >= steps // 4


def test_decode_changes_state_when_carry_is_wrong():
    """The equality above can fail: corrupting the carry changes the next record."""
    g = CSA
    w, inp = O.make_layer(g, 40, seed=1)
    st = O.prefill(g, w, inp, 30)
    st.carry[0, 0] += 1.0  # previous-block kv, used by record 7
    O.decode_step(g, w, inp, st)
    O.decode_step(g, w, inp, st)  # position 31 emits record 7
    assert not O.states_equal(st, O.prefill(g, w, inp, 32))


def test_first_ratio4_record_ignores_absent_previous_block():
    g = CSA
    w, inp = O.make_layer(g, 8, seed=2)
    st = O.prefill(g, w, inp, 4)
    rows = O.token_rows(inp.ckv[:4], inp.cgate[:4], w.ape, np.arange(4))
    expect = O.finish_record(O.pool(rows[None, :, 0, 512:], rows[None, :, 1, 512:]), w.norm, np.array([0]), 4)
    assert np.array_equal(st.records[0], expect[0])


def test_fp8_record_layout_matches_plan_and_round_trips():
    x = np.random.default_rng(0).standard_normal((5, 512)).astype(np.float32) * 3
    b = O.pack_fp8_record(x)
    assert b.shape == (5, record_width_bytes(CacheFormat.FP8_E4M3_BLOCK64, 512, 64)) == (5, 583)
    # scale bytes: E8M0 of 2^ceil(log2(amax/448)) at offsets 0, 65, ..., 390
    for blk in range(7):
        amax = np.abs(x[:, blk * 64:(blk + 1) * 64]).max(axis=1)
        expect = np.ceil(np.log2(amax / 448)).astype(int) + 127
        assert list(b[:, blk * 65]) == list(expect)
    # RoPE tail: little-endian bf16 of the last 64 values
    tail = b[:, 455:].view("<u2")
    assert np.array_equal(tail, (x[:, 448:].view(np.uint32) + 0x7FFF + ((x[:, 448:].view(np.uint32) >> 16) & 1)) >> 16)
    y = O.unpack_fp8_record(b)
    # E4M3 has 3 mantissa bits: relative error at most 2^-4 of the block scale's range
    for blk in range(7):
        sl = slice(blk * 64, (blk + 1) * 64)
        scale = 2.0 ** (b[:, blk * 65].astype(int) - 127)
        assert np.all(np.abs(y[:, sl] - x[:, sl]) <= scale[:, None] * 2.0 ** 8 * 2 ** -4 + 1e-12)
    # bytes whose blocks each hold +-448 x scale decode and re-encode to themselves
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 126, size=(3, 7, 64)).astype(np.uint8) | (rng.integers(0, 2, (3, 7, 64)) << 7).astype(np.uint8)
    codes[codes == 0x80] = 0  # negative zero encodes as +0
    codes[:, :, 5] = 126
    exact = np.concatenate([rng.integers(120, 135, (3, 7, 1)).astype(np.uint8), codes], axis=2).reshape(3, -1)
    exact = np.concatenate([exact, O.bf16_bytes(rng.standard_normal((3, 64)).astype(np.float32))], axis=1)
    assert np.array_equal(O.pack_fp8_record(O.unpack_fp8_record(exact)), exact)


def test_e4m3_codes_exact():
    vals = np.array([0, 2 ** -9, 2 ** -6, 1, 1.125, 448, -448, -1.0625, 1.0625, 3 * 2 ** -10], np.float32)
    assert list(O.e4m3_encode(vals)) == [0, 1, 8, 56, 57, 126, 254, 184, 56, 2]
    assert np.array_equal(O.E4M3[O.e4m3_encode(vals)], np.array([0, 2 ** -9, 2 ** -6, 1, 1.125, 448, -448, -1, 1, 2 ** -8], np.float32))


def test_fp4_key_layout_matches_plan_and_round_trips():
    x = np.zeros((1, 128), np.float32)
    x[0, :8] = [6, -6, 0.5, 1.5, 3, -4, 0.25, 0.75]
    x[0, 32] = 12.0  # block 1: amax 12 -> scale 2
    b = O.pack_fp4_key(x)
    assert b.shape == (1, index_key_bytes(128)) == (1, 68)
    assert b[0, 0] == 127 and b[0, 17] == 128  # E8M0 scales 2^0 and 2^1
    assert list(b[0, 1:5]) == [0x7 | 0xF << 4, 0x1 | 0x3 << 4, 0x5 | 0xE << 4, 0x0 | 0x2 << 4]
    assert b[0, 18] == 0x7  # 12 / 2 = 6 -> code 7 in the low nibble (even element)
    assert np.array_equal(O.pack_fp4_key(O.unpack_fp4_key(b)), b)


def test_group_layout_of_oracle_state_equals_plan():
    d = Descriptor(layer_id=0, compression_ratio=4, num_heads=4, index_num_heads=4, index_head_dim=128,
                   index_topk=8, window=16, max_seq_len=256)
    gb = group_bytes(d)
    st = O.State.empty(O.geometry_from_descriptor(d))
    assert st.records.nbytes == gb.compressed_bytes
    assert st.carry.nbytes == gb.carry_bytes == 65536
    assert st.index_keys.nbytes == gb.index_bytes
    assert st.index_carry.nbytes == gb.index_carry_bytes == 16384
    assert st.ring.nbytes == gb.dense_ring_bytes


def test_sink_only_changes_the_denominator():
    g = HCA
    w, inp = O.make_layer(g, 200, seed=3)
    st = O.prefill(g, w, inp, 200)
    rows = O.attention_rows(g, st, np.arange(1, dtype=np.int32))
    p = 199
    with_sink, m, den = O.attend(g, inp.q[p], rows, w.sink, p, return_parts=True)
    no_sink, m0, den0 = O.attend(g, inp.q[p], rows, None, p, return_parts=True)
    # out_sink = out * Z / (Z + exp(sink - max)), Z the denominator without the sink (same max)
    z = den0 * np.exp(m0 - m)
    ratio = z / (z + np.exp(w.sink - m))
    assert np.all(ratio < 1)
    np.testing.assert_allclose(with_sink, no_sink * ratio[:, None], rtol=1e-5, atol=1e-6)
    very_negative = O.attend(g, inp.q[p], rows, np.full_like(w.sink, -1e4), p)
    np.testing.assert_allclose(very_negative, no_sink, rtol=1e-6, atol=1e-7)


def test_hca_selects_every_completed_record_and_csa_respects_visibility():
    w, inp = O.make_layer(HCA, 300, seed=4)
    st = O.prefill(HCA, w, inp, 300)
    assert list(O.select(HCA, st, inp, 299)[0]) == [0, 1]
    w, inp = O.make_layer(CSA, 60, seed=4)
    st = O.prefill(CSA, w, inp, 23)
    sel, scores = O.select(CSA, st, inp, 22)
    assert len(scores) == 5 and len(sel) == 5  # records 0..4 visible at p=22 (floor(23/4) = 5)
    st = O.prefill(CSA, w, inp, 60)
    sel, scores = O.select(CSA, st, inp, 59)
    assert len(sel) == 8 and set(sel) == set(np.argsort(-scores, kind="stable")[:8])


def test_topk_ties_break_toward_lower_ids():
    assert list(O.topk_ids(np.array([1, 2, 2, 2, 0], np.float32), 2)) == [1, 2]
    assert list(O.topk_ids(np.array([-0.0, 0.0, 0.0], np.float32), 1)) == [0]


def test_lazy_inputs_are_the_same_whatever_the_slice():
    g = O.Geometry(ratio=4, num_heads=3, max_seq_len=20000, window=16, index_heads=4, index_topk=8)
    _, a = O.make_layer(g, 20000, seed=5)
    _, b = O.make_layer(g, 20000, seed=5)
    whole = a.ckv[4000:4200]
    assert np.array_equal(whole, np.stack([b.ckv[p] for p in range(4000, 4200)]))
    assert np.array_equal(a.q[[3, 4099, 17]], np.stack([b.q[3], b.q[4099], b.q[17]]))
    assert a.q.shape == (20000, 3, 512) and a.iq[19999].shape == (4, 128)
    _, c = O.make_layer(g, 20000, seed=6)
    assert not np.array_equal(c.kv[:10], a.kv[:10])


@pytest.mark.parametrize("ratio", [4, 128])
def test_chunked_prefill_equals_one_chunk(ratio):
    g = O.Geometry(ratio=ratio, num_heads=2, max_seq_len=2048, window=16, index_heads=4 if ratio == 4 else 0,
                   index_topk=8 if ratio == 4 else 0)
    w, inp = O.make_layer(g, 2000, seed=3)
    one = O.prefill(g, w, inp, 1999, chunk=1 << 20)
    many = O.prefill(g, w, inp, 1999, chunk=256)
    assert O.states_equal(one, many) and one.completed == 1999 // ratio
