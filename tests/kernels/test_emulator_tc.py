"""The emulator's tensor-core and asynchronous-copy primitives (cuda_emu.h), against NumPy.

A one-warp kernel assembles mma.sync fragments from row-major A and B exactly as the PTX
ISA lays them out (m16n8k16 .bf16 and m16n8k32 .e4m3) and the product must equal A @ B;
the cp.async kernel shows that copies land only at the issuing thread's wait (group by
group), that src-size zero-fills, and that a misaligned address is an error.
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
