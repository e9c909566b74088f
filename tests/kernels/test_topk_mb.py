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
