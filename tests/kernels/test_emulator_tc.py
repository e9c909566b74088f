"""The emulator's tensor-core and asynchronous-copy primitives (cuda_emu.h), against NumPy.

A one-warp kernel assembles mma.sync fragments from row-major A and B exactly as the PTX
ISA lays them out (m16n8k16 .bf16 and m16n8k32 .e4m3) and the product must equal A @ B;
the cp.async kernel shows that copies land only at the issuing thread's wait (group by
group), that src-size zero-fills, and that a misaligned address is an error; bulk copies
land only when their mbarrier phase completes (a byte-count mismatch is an error or a
deadlock); mul.rn.bf16x2 rounds like the hardware and keeps BF16 subnormals; prmt's default
mode selects bytes and replicates signs.
"""

from __future__ import annotations

import numpy as np

from csa_plan.kernels import oracle as O

from csa_plan.kernels.backends import emulator_library

from helpers.emulator import requires_emulator
pytestmark = requires_emulator


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    return O.bf16_bytes(x).view("<u2").reshape(x.shape)


def test_mma_bf16_m16n8k16_fragments_give_a_times_b():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((16, 16)).astype(np.float32)
    B = rng.standard_normal((16, 8)).astype(np.float32)
    a, b = _bf16_bits(A), _bf16_bits(B)
    D = np.zeros((16, 8), np.float32)
    lib = emulator_library()
    assert lib.emu_mma_bf16(a.ctypes.data, b.ctypes.data, D.ctypes.data) == 0, lib.csa_emu_last_error()
    Ab, Bb = O.bf16_decode(O.bf16_bytes(A)).reshape(16, 16), O.bf16_decode(O.bf16_bytes(B)).reshape(16, 8)
    ref = 2 * (Ab.astype(np.float64) @ Bb.astype(np.float64))  # the kernel accumulates twice
    np.testing.assert_allclose(D, ref, rtol=1e-6, atol=1e-6)
    # every element lands in its own place: a one-hot A picks rows of B
    A1 = np.zeros((16, 16), np.float32)
    A1[np.arange(16), np.arange(16)[::-1]] = 1.0
    assert lib.emu_mma_bf16(_bf16_bits(A1).ctypes.data, b.ctypes.data, D.ctypes.data) == 0
    np.testing.assert_array_equal(D, 2 * Bb[::-1])


def test_mma_e4m3_m16n8k32_fragments_give_a_times_b():
    rng = np.random.default_rng(2)
    a = rng.integers(0, 256, (16, 32), dtype=np.uint8)
    b = rng.integers(0, 256, (32, 8), dtype=np.uint8)
    a[(a & 0x7F) == 0x7F] = 0  # no NaN codes here
    b[(b & 0x7F) == 0x7F] = 1
    D = np.zeros((16, 8), np.float32)
    lib = emulator_library()
    assert lib.emu_mma_e4m3(a.ctypes.data, b.ctypes.data, D.ctypes.data) == 0, lib.csa_emu_last_error()
    ref = O.E4M3[a].astype(np.float64) @ O.E4M3[b].astype(np.float64)
    np.testing.assert_allclose(D, ref, rtol=1e-6, atol=1e-9)
    assert O.E4M3[0x7F] != O.E4M3[0x7F]  # the oracle's NaN code, as the emulated mma decodes it


def test_cp_async_lands_at_wait_by_group_and_zero_fills():
    src = np.arange(1024, dtype=np.uint32).astype(np.uint8)
    src = np.ascontiguousarray(np.resize(src, 1024 + 16))  # numpy data is 16-byte aligned
    before = np.zeros(64, np.uint8)
    mid = np.zeros(128, np.uint8)
    out = np.zeros(2048, np.uint8)
    lib = emulator_library()
    assert lib.emu_cp_async(src.ctypes.data, before.ctypes.data, mid.ctypes.data, out.ctypes.data, 0) == 0, \
        lib.csa_emu_last_error()
    assert (before == 0xFF).all()  # nothing visible before the wait
    assert np.array_equal(mid[0::2], src[0:1024:16]) and (mid[1::2] == 0xFF).all()  # wait<1>: group 1 only
    assert np.array_equal(out[:1024], src[:1024])
    second = out[1024:].reshape(64, 16)
    assert np.array_equal(second[:, :8], src[:1024].reshape(64, 16)[:, :8]) and (second[:, 8:] == 0).all()


def test_cp_async_misaligned_address_is_an_error():
    src = np.zeros(1024 + 32, np.uint8)
    z = [np.zeros(n, np.uint8) for n in (64, 128, 2048)]
    lib = emulator_library()
    assert lib.emu_cp_async(src.ctypes.data, *(a.ctypes.data for a in z), 4) == -1
    assert "misaligned" in lib.csa_emu_last_error().decode()


def _bf16_round_bits(x64: np.ndarray) -> np.ndarray:
    """RNE BF16 bits of float64 values that are exact in float32 (normal range)."""
    return _bf16_bits(x64.astype(np.float32))


def test_mul_and_max_bf16x2_round_like_the_hardware_and_keep_subnormals():
    """csa_hmul2_bf16 (mul.rn.bf16x2) per half against exact products: ordinary values, BF16
    subnormal inputs times powers of two (the dequantizer's case: exact, never flushed, though
    the launch runs with FTZ/DAZ), ties, overflow to inf, NaN."""
    rng = np.random.default_rng(3)
    n = 512
    x = _bf16_bits(rng.standard_normal(2 * n).astype(np.float32) * 10.0).astype(np.uint32)
    y = _bf16_bits(rng.standard_normal(2 * n).astype(np.float32)).astype(np.uint32)
    x[:64] = rng.integers(1, 0x80, 64)  # BF16 subnormals (exponent field 0) ...
    y[:64] = (rng.integers(120, 250, 64) << 7)  # ... times 2^(e - 127)
    x[64], y[64] = 0x7F7F, 0x4000  # max finite x 2: inf
    x[65], y[65] = 0x7FC1, 0x3F80  # NaN
    x[66], y[66] = 0x8000 | 0x0005, 0x4B00  # negative subnormal x 2^23
    a = (x[0::2] | (x[1::2] << 16)).astype(np.uint32)
    b = (y[0::2] | (y[1::2] << 16)).astype(np.uint32)
    sel = np.zeros(n, np.uint32)
    mul, perm, mx = np.zeros(n, np.uint32), np.zeros(n, np.uint32), np.zeros(n, np.uint32)
    lib = emulator_library()
    assert lib.emu_bf16x2_prmt(a.ctypes.data, b.ctypes.data, sel.ctypes.data, mul.ctypes.data, perm.ctypes.data,
                               mx.ctypes.data, n) == 0, lib.csa_emu_last_error()
    # max.xorsign.abs.bf16x2: the larger magnitude, the sign the XOR of both (no NaN among these but 65)
    gm = np.stack([mx & 0xFFFF, mx >> 16], axis=1).reshape(-1)
    ok = np.ones(2 * n, bool)
    ok[65] = False
    def dec(h):
        return O.bf16_decode(h.astype("<u2").view(np.uint8))

    mag = np.maximum(np.abs(dec(x)), np.abs(dec(y)))
    want = _bf16_bits(mag.astype(np.float32)).astype(np.uint32) | ((x ^ y) & 0x8000)
    big = np.maximum(x & 0x7FFF, y & 0x7FFF)
    np.testing.assert_array_equal(gm[ok & (big >= 0x80)], want[ok & (big >= 0x80)])
    sub = ok & (big < 0x80)  # subnormal magnitudes: compare bits (no flush)
    np.testing.assert_array_equal(gm[sub] & 0x7FFF, big[sub])
    assert gm[65] == y[65]  # NaN and a number: the number
    got = np.stack([mul & 0xFFFF, mul >> 16], axis=1).reshape(-1)

    def val(h):
        e, m = (h >> 7) & 0xFF, h & 0x7F
        v = np.where(e == 0, m * 2.0 ** -133, (m | 0x80) * np.exp2(e.astype(np.float64) - 134))
        return np.where(h & 0x8000, -v, v)

    prod = val(x) * val(y)
    fin = np.isfinite(prod) & (np.abs(prod) < 3.3e38) & ((np.abs(prod) >= 2.0 ** -126) | (prod == 0))
    fin[64:67] = False
    np.testing.assert_array_equal(got[fin], _bf16_round_bits(prod[fin]))
    assert got[64] == 0x7F80 and (got[65] & 0x7F80) == 0x7F80 and got[65] & 0x7F
    assert got[66] == _bf16_round_bits(np.array([-5 * 2.0 ** -133 * 2.0 ** 23]))[0]
    assert fin[:64].sum() >= 40  # most subnormal cases were checked exactly


def test_prmt_default_mode_selects_and_replicates_signs():
    rng = np.random.default_rng(4)
    n = 256
    a = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    sel = rng.integers(0, 2 ** 16, n).astype(np.uint32)
    mul, perm, mx = np.zeros(n, np.uint32), np.zeros(n, np.uint32), np.zeros(n, np.uint32)
    lib = emulator_library()
    assert lib.emu_bf16x2_prmt(a.ctypes.data, b.ctypes.data, sel.ctypes.data, mul.ctypes.data, perm.ctypes.data,
                               mx.ctypes.data, n) == 0
    for i in range(n):
        src = int(a[i]) | (int(b[i]) << 32)
        want = 0
        for j in range(4):
            nib = (int(sel[i]) >> (4 * j)) & 15
            byte = (src >> (8 * (nib & 7))) & 0xFF
            if nib & 8:
                byte = 0xFF if byte & 0x80 else 0
            want |= byte << (8 * j)
        assert int(perm[i]) == want


def test_bulk_copies_land_when_their_mbarrier_phase_completes():
    src = np.arange(64, dtype=np.uint8) + 100
    before, after = np.zeros(32, np.uint8), np.zeros(32, np.uint8)
    lib = emulator_library()
    assert lib.emu_bulk(src.ctypes.data, before.ctypes.data, after.ctypes.data, 32, 0) == 0, lib.csa_emu_last_error()
    assert (before == 0xFF).all()  # not landed before the wait (shared memory is poisoned)
    np.testing.assert_array_equal(after, src[:32])
    # fewer bytes expected than copied: an error; more: the phase never completes (deadlock)
    assert lib.emu_bulk(src.ctypes.data, before.ctypes.data, after.ctypes.data, 16, 0) != 0
    assert b"more bytes" in lib.csa_emu_last_error()
    assert lib.emu_bulk(src.ctypes.data, before.ctypes.data, after.ctypes.data, 48, 0) != 0
    assert b"mbarrier phase that cannot complete" in lib.csa_emu_last_error()
    # try_wait.parity(1) during phase 0 asks about the phase before it, complete by definition:
    # it returns at once and the copies have not landed (a wrong parity is a wrong answer)
    assert lib.emu_bulk(src.ctypes.data, before.ctypes.data, after.ctypes.data, 32, 1) == 0
    assert (after == 0xFF).all()


def test_clusters_run_together_and_read_each_others_shared_memory():
    """Clusters of 4 over a grid of 8: after the cluster barrier every block reads the next
    block's shared memory (mapa) within its own cluster; without the barrier the later blocks
    have not written yet (poisoned bytes), and without the second barrier a block exits (its
    shared memory poisoned) before its peer reads it; a thread that exits before the barrier
    and a pointer outside shared memory are errors, and a grid that is not whole clusters too."""
    lib = emulator_library()
    out = np.zeros(8 * 64, np.int32)
    assert lib.emu_cluster(8, 4, out.ctypes.data, 1, 0) == 0, lib.csa_emu_last_error()
    b = np.arange(8)
    want = ((b // 4) * 4 + (b % 4 + 1) % 4)[:, None] * 100 + np.arange(64)[None, :]
    np.testing.assert_array_equal(out.reshape(8, 64), want)
    assert lib.emu_cluster(8, 4, out.ctypes.data, 0, 0) == 0
    assert (out.reshape(8, 64)[[0, 4]] == -1).all()  # the next block had not run: 0xFF bytes
    assert lib.emu_cluster(8, 4, out.ctypes.data, 1, 1) != 0
    assert b"cluster barrier reached by only part of a cluster" in lib.csa_emu_last_error()
    assert lib.emu_cluster(8, 4, out.ctypes.data, 1, 2) != 0
    assert b"mapa: the pointer is not in this block's dynamic shared memory" in lib.csa_emu_last_error()
    # no barrier before the exit: the first block of each cluster runs to its end before the
    # last block reads it, and reads its poisoned shared memory
    assert lib.emu_cluster(8, 4, out.ctypes.data, 1, 3) == 0
    assert (out.reshape(8, 64)[[3, 7]] == -1).all() and (out.reshape(8, 64)[[0, 1, 2]] == want[[0, 1, 2]]).all()
    assert lib.emu_cluster(6, 4, out.ctypes.data, 1, 0) != 0
    assert b"invalid cluster" in lib.csa_emu_last_error()

