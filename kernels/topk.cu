// topk.cu — top-k by radix select (no sort). One block per request.
// Four 8-bit passes over order-preserving keys find the k-th largest key T and how
// many keys equal to T to take; a second scan writes the chosen ids in ascending id
// order (every key > T, then the lowest-id keys == T), so the result is deterministic.
// Read passes over the scores: four histogram passes, the count pass and the write pass (6).
#include "csa_common.cuh"

//
// The order key is computed from the bits alone, never with float arithmetic: under
// -ftz=true (CuPy always passes it) `s + 0.0f` would flush a denormal score to zero
// before ranking. -0 ranks as +0; every NaN (either sign, any payload) gets key 0, below
// -inf (key 0x007fffff), so NaN ranks lowest and ties among NaNs go to the lower id —
// the order oracle.order_keys() defines for the oracle.
__device__ __forceinline__ unsigned csa_order_key(float s) {
  unsigned u = __float_as_uint(s);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0u;  // NaN
  if (u == 0x80000000u) u = 0u;                    // -0 -> +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

extern "C" __global__ void __launch_bounds__(256) topk_radix(
    const float* __restrict__ scores, long long score_req_stride, int n, int k, int* __restrict__ out,
    long long out_req_stride) {
  __shared__ unsigned hist[256];
  __shared__ unsigned sel[3];  // desired prefix, mask, keys == T still to take
  __shared__ int cnt_gt[256];
  __shared__ int cnt_eq[256];
  const float* s = scores + (long long)blockIdx.x * score_req_stride;
  int* o = out + (long long)blockIdx.x * out_req_stride;
  const int t = threadIdx.x, nt = blockDim.x;
  if (t == 0) {
    sel[0] = 0u;
    sel[1] = 0u;
    sel[2] = (unsigned)k;
  }
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int i = t; i < 256; i += nt) hist[i] = 0u;
    __syncthreads();
    const unsigned desired = sel[0], mask = sel[1];
    for (int i = t; i < n; i += nt) {
      unsigned key = csa_order_key(s[i]);
      if ((key & mask) == desired) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (t == 0 && k > 0) {
      unsigned need = sel[2], above = 0u;
      int b = 255;
      for (; b > 0; --b) {
        if (above + hist[b] >= need) break;
        above += hist[b];
      }
      sel[0] = desired | ((unsigned)b << shift);
      sel[1] = mask | (255u << shift);
      sel[2] = need - above;
    }
    __syncthreads();
  }
  if (k <= 0) return;
  const unsigned T = sel[0];
  const int take_eq = (int)sel[2];
  const int chunk = (n + nt - 1) / nt, lo = t * chunk, hi = min(n, lo + chunk);
  int gt = 0, eq = 0;
  for (int i = lo; i < hi; ++i) {
    unsigned key = csa_order_key(s[i]);
    gt += key > T;
    eq += key == T;
  }
  cnt_gt[t] = gt;
  cnt_eq[t] = eq;
  __syncthreads();
  if (t == 0) {  // exclusive prefixes: output base and equal keys seen before each chunk
    int base = 0, eq_before = 0;
    for (int i = 0; i < nt; ++i) {
      int g = cnt_gt[i], e = cnt_eq[i];
      int e_take = min(e, max(0, take_eq - eq_before));
      cnt_gt[i] = base;
      cnt_eq[i] = eq_before;
      base += g + e_take;
      eq_before += e;
    }
  }
  __syncthreads();
  int pos = cnt_gt[t], eq_rank = cnt_eq[t];
  for (int i = lo; i < hi; ++i) {
    unsigned key = csa_order_key(s[i]);
    if (key > T) {
      o[pos++] = i;
    } else if (key == T) {
      if (eq_rank < take_eq) o[pos++] = i;
      ++eq_rank;
    }
  }
}
