// emit.cu — record emission: per-channel softmax pooling over the carry candidates,
// RMSNorm, RoPE at the block start, FP8 E4M3 block-64 pack (583 B), and the
// indexer's FP4 key (pool, RMSNorm, Hadamard, E2M1 block-32 pack, 68 B).
//
// tok holds rows of [2][CW] floats: kv then score (score already carries ape).
// Record j of the launch has its current block at rows cur0 + j*R .. + R-1; with
// overlap (R = 4) its previous block is the R rows before (score -inf when absent).
// A window row is the same path with R = 1, no overlap, no RMSNorm (score 0: pooling
// one candidate returns it exactly) and ring_rows = W (row = position % W).
#include "csa_common.cuh"

// One block per record, blockDim.x == D (512), one channel per thread.
extern "C" __global__ void __launch_bounds__(512) emit_records(
    const float* __restrict__ tok, int cur0, int ratio, int overlap, const float* __restrict__ norm, int normalize,
    const float* __restrict__ inv_freq, int first_record, int ring_rows, unsigned char* __restrict__ out,
    int rope_dim) {
  __shared__ float x[512];
  __shared__ float red[33];
  const int D = blockDim.x, d = threadIdx.x, j = blockIdx.x;
  const int CW = overlap ? 2 * D : D, stride = 2 * CW;
  const int cur = cur0 + j * ratio;
  const int nope = D - rope_dim;
  const int rec = first_record + j;

  // pool: max, then sum of exp-weighted kv over the candidates (previous block first)
  float m = CSA_NEG_INF;
  if (overlap)
    for (int i = 0; i < ratio; ++i) m = fmaxf(m, tok[(long long)(cur - ratio + i) * stride + CW + d]);
  for (int i = 0; i < ratio; ++i) m = fmaxf(m, tok[(long long)(cur + i) * stride + CW + (overlap ? D : 0) + d]);
  float num = 0.0f, den = 0.0f;
  if (overlap)
    for (int i = 0; i < ratio; ++i) {
      const float* r = tok + (long long)(cur - ratio + i) * stride;
      float e = expf(r[CW + d] - m);
      num += e * r[d];
      den += e;
    }
  for (int i = 0; i < ratio; ++i) {
    const float* r = tok + (long long)(cur + i) * stride;
    int c = (overlap ? D : 0) + d;
    float e = expf(r[CW + c] - m);
    num += e * r[c];
    den += e;
  }
  float v = num / den;

  // RMSNorm (records; window rows arrive normalized)
  if (normalize) {
    float ms = csa_block_sum(v * v, red) / (float)D;
    v = v / sqrtf(ms + CSA_RMS_EPS) * norm[d];
  }

  // RoPE at the block start position (interleaved pairs of the tail)
  x[d] = v;
  __syncthreads();
  if (d >= nope) {
    int t = d - nope, i = t >> 1;
    float ang = (float)(rec * ratio) * inv_freq[i];
    float c = cosf(ang), s = sinf(ang);
    float x0 = x[nope + 2 * i], x1 = x[nope + 2 * i + 1];
    v = (t & 1) ? x0 * s + x1 * c : x0 * c - x1 * s;
  }

  // pack: two warps per 64-block; warp max, then combine through shared
  float a = csa_warp_max(fabsf(v));
  __syncthreads();
  if ((d & 31) == 0) red[d >> 5] = a;
  __syncthreads();
  unsigned char* o = out + (long long)(ring_rows > 0 ? rec % ring_rows : rec) * ((nope >> 6) * 65 + 2 * rope_dim);
  if (d < nope) {
    int b = d >> 6;
    float amax = fmaxf(fmaxf(red[2 * b], red[2 * b + 1]), CSA_AMAX_FLOOR);
    int e = csa_pow2_exp(amax / 448.0f);
    o[b * 65 + 1 + (d & 63)] = (unsigned char)csa_e4m3_encode(ldexpf(v, -e));
    if ((d & 63) == 0) o[b * 65] = (unsigned char)(e + 127);
  } else {
    unsigned h = csa_bf16_bits(v);
    unsigned char* t = o + (nope >> 6) * 65 + 2 * (d - nope);
    t[0] = (unsigned char)(h & 255u);
    t[1] = (unsigned char)(h >> 8);
  }
}

// One block per index key, blockDim.x == 128 (index_head_dim); tok rows are [2][256].
extern "C" __global__ void __launch_bounds__(128) emit_index_keys(
    const float* __restrict__ tok, int cur0, const float* __restrict__ norm, int first_record,
    unsigned char* __restrict__ out) {
  __shared__ float x[128];
  __shared__ float red[33];
  const int D = blockDim.x, d = threadIdx.x, j = blockIdx.x;
  const int CW = 2 * D, stride = 2 * CW, R = 4;
  const int cur = cur0 + j * R;
  float m = CSA_NEG_INF;
  for (int i = 0; i < R; ++i) m = fmaxf(m, tok[(long long)(cur - R + i) * stride + CW + d]);
  for (int i = 0; i < R; ++i) m = fmaxf(m, tok[(long long)(cur + i) * stride + CW + D + d]);
  float num = 0.0f, den = 0.0f;
  for (int i = 0; i < R; ++i) {
    const float* r = tok + (long long)(cur - R + i) * stride;
    float e = expf(r[CW + d] - m);
    num += e * r[d];
    den += e;
  }
  for (int i = 0; i < R; ++i) {
    const float* r = tok + (long long)(cur + i) * stride;
    float e = expf(r[CW + D + d] - m);
    num += e * r[D + d];
    den += e;
  }
  float v = num / den;
  float ms = csa_block_sum(v * v, red) / (float)D;
  x[d] = v / sqrtf(ms + CSA_RMS_EPS) * norm[d];
  __syncthreads();
  // Hadamard (Sylvester order, symmetric) scaled by D^-0.5
  float h = 0.0f, s = rsqrtf((float)D);
  for (int i = 0; i < D; ++i) h += (__popc((unsigned)(i & d)) & 1) ? -x[i] * s : x[i] * s;
  // FP4 block 32 = one warp
  float amax = fmaxf(csa_warp_max(fabsf(h)), CSA_AMAX_FLOOR);
  int e = csa_pow2_exp(amax / 6.0f);
  unsigned code = csa_e2m1_encode(ldexpf(h, -e));
  unsigned odd = __shfl_down_sync(CSA_FULL_MASK, code, 1);
  unsigned char* o = out + (long long)(first_record + j) * (D / 32 * 17) + (d >> 5) * 17;
  int lane = d & 31;
  if ((lane & 1) == 0) o[1 + lane / 2] = (unsigned char)(code | (odd << 4));
  if (lane == 0) o[0] = (unsigned char)(e + 127);
}
