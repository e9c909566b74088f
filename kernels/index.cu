// index.cu — the lightning indexer's score scan over FP4 block-32 keys (68 B each).
// score[c] = sum_h relu(q_h . k_c) * w_h for records c < n. One warp per record:
// lane l holds key dims 4l..4l+3; the query of every head sits in shared memory.
// Grid: x over record groups, y over requests.
#include "csa_common.cuh"

#define CSA_INDEX_MAX_HEADS 64

extern "C" __global__ void __launch_bounds__(256) index_scores(
    const unsigned char* __restrict__ keys, long long key_req_stride, const float* __restrict__ q,
    const float* __restrict__ w, int heads, int n, float* __restrict__ scores, long long score_req_stride) {
  __shared__ float sq[CSA_INDEX_MAX_HEADS * 128];
  __shared__ float sw[CSA_INDEX_MAX_HEADS];
  const int req = blockIdx.y;
  const float* qr = q + (long long)req * heads * 128;
  for (int i = threadIdx.x; i < heads * 128; i += blockDim.x) sq[i] = qr[i];
  for (int i = threadIdx.x; i < heads; i += blockDim.x) sw[i] = w[(long long)req * heads + i];
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const unsigned char* kr = keys + (long long)req * key_req_stride;
  float* sr = scores + (long long)req * score_req_stride;
  const int blk = lane >> 3, pos = 4 * (lane & 7);
  for (int c = blockIdx.x * nw + warp; c < n; c += gridDim.x * nw) {
    const unsigned char* key = kr + (long long)c * 68 + blk * 17;
    float scale = ldexpf(1.0f, (int)key[0] - 127);
    unsigned b0 = key[1 + pos / 2], b1 = key[2 + pos / 2];
    float k0 = csa_e2m1_decode(b0 & 15u) * scale, k1 = csa_e2m1_decode(b0 >> 4) * scale;
    float k2 = csa_e2m1_decode(b1 & 15u) * scale, k3 = csa_e2m1_decode(b1 >> 4) * scale;
    float acc = 0.0f;
    for (int h = 0; h < heads; ++h) {
      const float* qh = sq + h * 128 + 4 * lane;
      float dot = csa_warp_sum(qh[0] * k0 + qh[1] * k1 + qh[2] * k2 + qh[3] * k3);
      acc += fmaxf(dot, 0.0f) * sw[h];
    }
    if (lane == 0) sr[c] = acc;
  }
}
