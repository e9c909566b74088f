// csa_common.cuh — device helpers shared by the csa-plan kernels: the byte formats of
// CONTRACT §2 (E4M3 block-64 records with E8M0 scales and a BF16 RoPE tail, E2M1
// block-32 index keys) and warp/block reductions. Plain CUDA C: it compiles with nvcc
// and NVRTC, and with g++ after cuda_emu.h.
#pragma once

#define CSA_FULL_MASK 0xffffffffu
#define CSA_AMAX_FLOOR 1e-4f
#define CSA_RMS_EPS 1e-6f
#define CSA_NEG_INF __uint_as_float(0xff800000u)

// The order key top-k ranks by (topk.cu, and index_tc.cu's fused first histogram), from the
// bits alone, never with float arithmetic: under -ftz=true (CuPy always passes it)
// `s + 0.0f` would flush a denormal score to zero before ranking. -0 ranks as +0; every NaN
// (either sign, any payload) gets key 0, below -inf (key 0x007fffff), so NaN ranks lowest and
// ties among NaNs go to the lower id — the order oracle.order_keys() defines for the oracle.
__device__ __forceinline__ unsigned csa_order_key(float s) {
  unsigned u = __float_as_uint(s);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0u;  // NaN
  if (u == 0x80000000u) u = 0u;                    // -0 -> +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The multi-block select's first radix digit: the top 11 bits of the order key (2048 bins,
// the request's hist0 in the top-k work buffer, topk.cu), accumulated either by topk_mb_hist's
// pass 0 or by index_tc_scores' epilogue as it writes the scores.
#define CSA_TK_BINS0 2048
#define CSA_TK_SHIFT0 21

// ceil(log2(r)) for positive float r, exactly (frexp: r = m * 2^e, m in [0.5, 1)).
__device__ __forceinline__ int csa_pow2_exp(float r) {
  int e;
  float m = frexpf(r, &e);
  return m == 0.5f ? e - 1 : e;
}

// Nearest E4M3FN code of y with |y| <= 448, ties to even.
__device__ __forceinline__ unsigned csa_e4m3_encode(float y) {
  float a = fabsf(y);
  unsigned code;
  if (a < 0.015625f) {  // below 2^-6: subnormal steps of 2^-9 (code 8 is 2^-6 itself)
    code = (unsigned)rintf(a * 512.0f);
  } else {
    int e;
    frexpf(a, &e);
    e -= 1;
    code = (unsigned)((e + 7) * 8) + (unsigned)rintf((ldexpf(a, -e) - 1.0f) * 8.0f);
  }
  return code | (y < 0.0f ? 0x80u : 0u);
}

// E4M3FN: 0x7F and 0xFF are NaN (the format has no infinities); the encoder never
// writes them (|y| <= 448 gives at most 0x7E), so only corrupt bytes decode to NaN, in
// the kernels exactly as in the oracle's table.
__device__ __forceinline__ float csa_e4m3_decode(unsigned c) {
  if ((c & 0x7fu) == 0x7fu) return __uint_as_float(0x7fc00000u);
  unsigned e = (c >> 3) & 15u, m = c & 7u;
  float v = e == 0 ? (float)m * 0.001953125f : ldexpf(1.0f + (float)m * 0.125f, (int)e - 7);
  return (c & 0x80u) ? -v : v;
}

// Nearest E2M1 code of y with |y| <= 6, ties to the even code; sign in bit 3.
__device__ __forceinline__ unsigned csa_e2m1_encode(float y) {
  float a = fabsf(y);
  unsigned c = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.0f);
  return c | (y < 0.0f ? 8u : 0u);
}

__device__ __forceinline__ float csa_e2m1_decode(unsigned c) {
  unsigned m = c & 7u;
  float v = m < 4 ? 0.5f * (float)m : (m == 4 ? 2.0f : (m == 5 ? 3.0f : (m == 6 ? 4.0f : 6.0f)));
  return (c & 8u) ? -v : v;
}

// float32 -> bfloat16 bits, round to nearest even.
__device__ __forceinline__ unsigned csa_bf16_bits(float x) {
  unsigned u = __float_as_uint(x);
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

__device__ __forceinline__ float csa_bf16_decode(unsigned lo, unsigned hi) {
  return __uint_as_float(((hi << 8) | lo) << 16);
}

__device__ __forceinline__ float csa_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(CSA_FULL_MASK, v, o);
  return v;
}

__device__ __forceinline__ float csa_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(CSA_FULL_MASK, v, o));
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float csa_block_sum(float v, float* red /* >= 33 floats of shared */) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = csa_warp_sum(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < nw ? red[lane] : 0.0f;
    t = csa_warp_sum(t);
    if (lane == 0) red[32] = t;
  }
  __syncthreads();
  return red[32];
}

// The inverse RoPE of one interleaved pair (rotate by -angle): how both merges (attn_merge,
// attn_tc's fused cluster merge) write the rotated dims, with the same bits.
__device__ __forceinline__ void csa_unrope_pair(float x0, float x1, float ang, float* y0, float* y1) {
  const float c = cosf(ang), s = sinf(ang);
  *y0 = x0 * c + x1 * s;
  *y1 = -x0 * s + x1 * c;
}

// Dequantize element d (< nope) or RoPE element of one packed FP8 record.
__device__ __forceinline__ float csa_record_value(const unsigned char* rec, int d, int nope) {
  if (d < nope) {
    int b = d >> 6;
    const unsigned char* blk = rec + b * 65;
    return csa_e4m3_decode(blk[1 + (d & 63)]) * ldexpf(1.0f, (int)blk[0] - 127);
  }
  const unsigned char* tail = rec + (nope >> 6) * 65 + 2 * (d - nope);
  return csa_bf16_decode(tail[0], tail[1]);
}
