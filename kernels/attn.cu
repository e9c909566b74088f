// attn.cu — sparse multi-query attention over packed FP8 rows with a per-head sink.
//
// Rows are [valid ring rows (n_win), selected records (n_sel; ids from idx, or 0..n_sel-1
// when use_idx is 0 — HCA selects all)]. Pass 1 (attn_partial) splits the row range over
// gridDim.x chunks; each block stages a tile of dequantized rows in shared memory and each
// warp runs one head's online softmax over them, writing its partial (max, sum, output).
// Pass 2 (attn_merge) combines the chunks, adds exp(sink - max) to the denominator only,
// normalizes and applies the inverse RoPE. Query RoPE at position pos happens in pass 1.
// Grid pass 1: (chunks, head groups of blockDim.x/32 heads, requests); pass 2: (heads, requests).
#include "csa_common.cuh"

#define CSA_ATTN_D 512
#define CSA_ATTN_TILE 8
#define CSA_PER_LANE (CSA_ATTN_D / 32)

extern "C" __global__ void __launch_bounds__(512) attn_partial(
    const float* __restrict__ q, const unsigned char* __restrict__ ring, long long ring_req_stride, int n_win,
    const unsigned char* __restrict__ records, long long rec_req_stride, const int* __restrict__ idx, int use_idx,
    long long idx_req_stride, int n_sel, int heads, int pos, const float* __restrict__ inv_freq, int rope_dim,
    float scale, float* part_ml, float* part_o) {
  __shared__ float tile[CSA_ATTN_TILE][CSA_ATTN_D];
  const int D = CSA_ATTN_D, nope = D - rope_dim, rec_bytes = (nope >> 6) * 65 + 2 * rope_dim;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int chunk = blockIdx.x, nchunks = gridDim.x, req = blockIdx.z;
  const int h = blockIdx.y * nw + warp;
  const bool active = h < heads;
  const int total = n_win + n_sel, per = (total + nchunks - 1) / nchunks;
  const int r0 = min(total, chunk * per), r1 = min(total, r0 + per);
  const unsigned char* rg = ring + (long long)req * ring_req_stride;
  const unsigned char* rc = records + (long long)req * rec_req_stride;
  const int* ix = use_idx ? idx + (long long)req * idx_req_stride : 0;

  // this lane's 16 query dims, RoPE applied to the tail pairs
  float qv[CSA_PER_LANE], acc[CSA_PER_LANE];
  const float* qh = q + ((long long)req * heads + (active ? h : 0)) * D + lane * CSA_PER_LANE;
  for (int i = 0; i < CSA_PER_LANE; ++i) {
    qv[i] = qh[i];
    acc[i] = 0.0f;
  }
  for (int i = 0; i < CSA_PER_LANE; i += 2) {
    int d = lane * CSA_PER_LANE + i;
    if (d >= nope) {
      float ang = (float)pos * inv_freq[(d - nope) >> 1];
      float c = cosf(ang), s = sinf(ang), x0 = qv[i], x1 = qv[i + 1];
      qv[i] = x0 * c - x1 * s;
      qv[i + 1] = x0 * s + x1 * c;
    }
  }
  float m = CSA_NEG_INF, l = 0.0f;
  for (int base = r0; base < r1; base += CSA_ATTN_TILE) {
    const int nt = min(CSA_ATTN_TILE, r1 - base);
    __syncthreads();
    for (int e = threadIdx.x; e < nt * D; e += blockDim.x) {
      int r = base + e / D, d = e % D;
      const unsigned char* row = r < n_win ? rg + (long long)r * rec_bytes
                                           : rc + (long long)(ix ? ix[r - n_win] : r - n_win) * rec_bytes;
      tile[e / D][d] = csa_record_value(row, d, nope);
    }
    __syncthreads();
    for (int t = 0; t < nt; ++t) {
      const float* kv = tile[t] + lane * CSA_PER_LANE;
      float dot = 0.0f;
      for (int i = 0; i < CSA_PER_LANE; ++i) dot += qv[i] * kv[i];
      float logit = csa_warp_sum(dot) * scale;
      float mn = fmaxf(m, logit);
      float corr = expf(m - mn), p = expf(logit - mn);
      l = l * corr + p;
      for (int i = 0; i < CSA_PER_LANE; ++i) acc[i] = acc[i] * corr + p * kv[i];
      m = mn;
    }
  }
  if (!active) return;
  const long long slot = ((long long)req * nchunks + chunk) * heads + h;
  if (lane == 0) {
    part_ml[2 * slot] = m;
    part_ml[2 * slot + 1] = l;
  }
  float* po = part_o + slot * D + lane * CSA_PER_LANE;
  for (int i = 0; i < CSA_PER_LANE; ++i) po[i] = acc[i];
}

// One block per (head, request), blockDim.x == 128. part_o may alias y (one chunk).
extern "C" __global__ void __launch_bounds__(128) attn_merge(
    const float* part_ml, const float* part_o, int nchunks, int heads, const float* __restrict__ sink, int pos,
    const float* __restrict__ inv_freq, int rope_dim, float* y) {
  __shared__ float o[CSA_ATTN_D];
  const int D = CSA_ATTN_D, nope = D - rope_dim, h = blockIdx.x, req = blockIdx.y;
  const long long first = (long long)req * nchunks * heads + h;
  float M = sink[h];
  for (int c = 0; c < nchunks; ++c) M = fmaxf(M, part_ml[2 * (first + (long long)c * heads)]);
  float den = expf(sink[h] - M);
  for (int c = 0; c < nchunks; ++c) {
    long long slot = first + (long long)c * heads;
    den += part_ml[2 * slot + 1] * expf(part_ml[2 * slot] - M);
  }
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float num = 0.0f;
    for (int c = 0; c < nchunks; ++c) {
      long long slot = first + (long long)c * heads;
      num += part_o[slot * D + d] * expf(part_ml[2 * slot] - M);
    }
    o[d] = num / den;
  }
  __syncthreads();
  float* yr = y + ((long long)req * heads + h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float v = o[d];
    if (d >= nope) {  // inverse RoPE: rotate by -angle
      const int i = (d - nope) >> 1;
      float y0, y1;
      csa_unrope_pair(o[nope + 2 * i], o[nope + 2 * i + 1], (float)pos * inv_freq[i], &y0, &y1);
      v = ((d - nope) & 1) ? y1 : y0;
    }
    yr[d] = v;
  }
}
