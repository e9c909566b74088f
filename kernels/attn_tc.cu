// attn_tc.cu — sparse multi-query attention on the tensor cores (pass 1; attn.cu's
// attn_merge is pass 2, on the same partial layout).
//
// One block holds up to 32 heads (all of a device's heads at 16 per device; groups of 32
// above that, launched adjacent in grid.x so a row's second read comes from L2) and a split
// of the row list [valid ring rows (n_win), selected records (n_sel)]. Per 32-row tile:
//  1. cp.async copies each row's aligned 16-byte superset (38 chunks cover 583 B at any
//     offset; the final chunk of a buffer is clipped with src-size, so nothing past the
//     buffer is read) into one of 3 shared stages, two tiles ahead of the math;
//  2. the rows are dequantized once into a BF16 tile (FP8 x E8M0 scale and the BF16 RoPE
//     tail are exact in BF16);
//  3. S = Q K^T with mma.sync m16n8k16: warp (m-tile, quarter) multiplies its 16 heads by
//     its 128 dims; the four quarters' partial S meet in shared memory;
//  4. online softmax in registers, then O += P V with mma.sync (each warp its 128 dims).
// Q (RoPE at pos applied once) is split into q_terms BF16 terms (3 make fp32 exact) and P
// into p_terms terms (2 leave 2^-17 relative): the products are then fp32-exact and only
// the summation order differs from fp32 SIMT. The split's index list is prefetched into
// shared memory before the first tile. Each block writes its partial (max, sum, output)
// per head: slot = (req * nchunks + chunk) * heads + h, as attn_partial does.
// Grid: (head groups, chunks, requests); blockDim.x = 128 * m-tiles (1 or 2); dynamic
// shared memory attn_tc_smem_bytes(m_tiles).
#include "csa_common.cuh"
#include "csa_ptx.cuh"

#define CSA_TC_D 512
#define CSA_TC_TILE 32
#define CSA_TC_REC 583
#define CSA_TC_CHUNKS 38        // 16-byte chunks per row superset (583 + 15 <= 608)
#define CSA_TC_ROW_SMEM 608
#define CSA_TC_STAGES 3
#define CSA_TC_KPITCH 520       // bf16 per dequantized row (+8: conflict-free fragment loads)
#define CSA_TC_SPITCH 33        // floats per partial-S row
#define CSA_TC_MAX_IDS 2048     // rows per split with an index list

// Shared layout (bytes): stages | K tile | partial S | row offsets | ids
#define CSA_TC_STAGE_BYTES (CSA_TC_TILE * CSA_TC_ROW_SMEM)
#define CSA_TC_K_OFF (CSA_TC_STAGES * CSA_TC_STAGE_BYTES)
#define CSA_TC_S_OFF (CSA_TC_K_OFF + CSA_TC_TILE * CSA_TC_KPITCH * 2)
#define CSA_TC_S_BYTES_PER_MT (4 * 16 * CSA_TC_SPITCH * 4)

__device__ __forceinline__ int attn_tc_s_off(int mt) { return CSA_TC_S_OFF + mt * CSA_TC_S_BYTES_PER_MT; }

// Split x into `terms` BF16 values whose sum is x (to fp32 precision for 3 terms).
__device__ __forceinline__ void attn_tc_split(float x, int terms, float* out) {
  #pragma unroll
  for (int i = 0; i < 3; ++i) {
    float h = i < terms ? __uint_as_float(csa_bf16_bits(x) << 16) : 0.0f;
    out[i] = h;
    x -= h;
  }
}

__device__ __forceinline__ unsigned attn_tc_bf16pair(float lo, float hi) {
  return csa_bf16_bits(lo) | (csa_bf16_bits(hi) << 16);
}

extern "C" __global__ void __launch_bounds__(256) attn_tc_partial(
    const float* __restrict__ q, const unsigned char* __restrict__ ring, long long ring_req_stride, int n_win,
    long long ring_bytes, const unsigned char* __restrict__ records, long long rec_req_stride, long long rec_bytes,
    const int* __restrict__ idx, int use_idx, long long idx_req_stride, int n_sel, int heads, int pos,
    const float* __restrict__ inv_freq, int rope_dim, float scale, int q_terms, int p_terms, float* part_ml,
    float* part_o) {
  CSA_DYN_SMEM(unsigned char, attn_tc_smem);
  const int D = CSA_TC_D, nope = D - rope_dim;
  const int tid = threadIdx.x, nthreads = blockDim.x, lane = tid & 31, warp = tid >> 5;
  const int mt = warp >> 2, dq = warp & 3, gid = lane >> 2, tg = lane & 3;
  const int m_tiles = nthreads >> 7, heads_per_block = 16 * m_tiles;
  const int hgroup = blockIdx.x, chunk = blockIdx.y, nchunks = gridDim.y, req = blockIdx.z;
  const int total = n_win + n_sel, per = (total + nchunks - 1) / nchunks;
  const int r0 = min(total, chunk * per), r1 = min(total, r0 + per);
  const unsigned char* rg = ring + (long long)req * ring_req_stride;
  const unsigned char* rc = records + (long long)req * rec_req_stride;
  unsigned short* kt = (unsigned short*)(attn_tc_smem + CSA_TC_K_OFF);
  float* sp = (float*)(attn_tc_smem + attn_tc_s_off(mt));
  unsigned char* rowoff = attn_tc_smem + attn_tc_s_off(m_tiles);  // [stages][tile]
  int* ids = (int*)(rowoff + CSA_TC_STAGES * CSA_TC_TILE);

  // prefetch the split's record ids (the CSA index list) once
  for (int r = r0 + tid; r < r1; r += nthreads)
    if (r >= n_win) ids[r - r0] = use_idx ? idx[(long long)req * idx_req_stride + (r - n_win)] : r - n_win;
  __syncthreads();

  // this warp's Q fragments: heads h0 + (gid, gid+8), dims 128*dq + 16*kk + 2*tg + {0,1} (+8)
  const int h0 = hgroup * heads_per_block + mt * 16;
  unsigned qf[3][8][4];
  {
    const float* qr = q + (long long)req * heads * D;
    #pragma unroll
    for (int kk = 0; kk < 8; ++kk)
      #pragma unroll
      for (int r = 0; r < 4; ++r) {
        int h = h0 + gid + ((r & 1) ? 8 : 0), d = 128 * dq + 16 * kk + 2 * tg + ((r & 2) ? 8 : 0);
        float x0 = 0.0f, x1 = 0.0f;
        if (h < heads) {
          x0 = qr[(long long)h * D + d];
          x1 = qr[(long long)h * D + d + 1];
          if (d >= nope) {
            float ang = (float)pos * inv_freq[(d - nope) >> 1];
            float c = cosf(ang), s = sinf(ang), a = x0, b = x1;
            x0 = a * c - b * s;
            x1 = a * s + b * c;
          }
        }
        float s0[3], s1[3];
        attn_tc_split(x0, q_terms, s0);
        attn_tc_split(x1, q_terms, s1);
        #pragma unroll
        for (int i = 0; i < 3; ++i) qf[i][kk][r] = attn_tc_bf16pair(s0[i], s1[i]);
      }
  }

  float acc[16][4];
  #pragma unroll
  for (int j = 0; j < 16; ++j)
    #pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f;
  float m_run[2] = {CSA_NEG_INF, CSA_NEG_INF}, l_part[2] = {0.0f, 0.0f};

  const int ntiles = (r1 - r0 + CSA_TC_TILE - 1) / CSA_TC_TILE;

  // issue the cp.async copies of tile `t` into stage t % STAGES (always one commit)
  auto load_tile = [&](int t) {
    if (t < ntiles) {
      const int base = r0 + t * CSA_TC_TILE, nv = min(CSA_TC_TILE, r1 - base);
      unsigned char* st = attn_tc_smem + (t % CSA_TC_STAGES) * CSA_TC_STAGE_BYTES;
      for (int c = tid; c < nv * CSA_TC_CHUNKS; c += nthreads) {
        const int j = c / CSA_TC_CHUNKS, k = c - j * CSA_TC_CHUNKS, r = base + j;
        const unsigned char* row = (r < n_win ? rg : rc) + (long long)(r < n_win ? r : ids[r - r0]) * CSA_TC_REC;
        const unsigned char* end = r < n_win ? rg + ring_bytes : rc + rec_bytes;
        // the aligned superset: absolute addresses (the buffer base is 16-byte aligned)
        const unsigned char* a0 = (const unsigned char*)((unsigned long long)row & ~15ull);
        const unsigned char* a = a0 + 16 * k;
        if (k == 0) rowoff[(t % CSA_TC_STAGES) * CSA_TC_TILE + j] = (unsigned char)(row - a0);
        if (a >= row + CSA_TC_REC) continue;  // past this row
        const long long left = end - a;
        csa_cp_async16(st + j * CSA_TC_ROW_SMEM + 16 * k, a, left >= 16 ? 16 : (int)left);
      }
    }
    csa_cp_async_commit();
  };

  for (int t = 0; t < CSA_TC_STAGES - 1; ++t) load_tile(t);

  for (int t = 0; t < ntiles; ++t) {
    const int base = r0 + t * CSA_TC_TILE, nv = min(CSA_TC_TILE, r1 - base);
    csa_cp_async_wait<CSA_TC_STAGES - 2>();
    __syncthreads();  // tile t landed for every thread; K tile and partial S are free
    load_tile(t + CSA_TC_STAGES - 1);

    // dequantize: 8 dims per unit -> one 16-byte store of BF16
    {
      const unsigned char* st = attn_tc_smem + (t % CSA_TC_STAGES) * CSA_TC_STAGE_BYTES;
      for (int u = tid; u < CSA_TC_TILE * 64; u += nthreads) {
        const int j = u >> 6, d0 = (u & 63) * 8;
        unsigned w[4] = {0u, 0u, 0u, 0u};
        if (j < nv) {
          const unsigned char* rp = st + j * CSA_TC_ROW_SMEM + rowoff[(t % CSA_TC_STAGES) * CSA_TC_TILE + j];
          if (d0 < nope) {
            const unsigned char* blk = rp + (d0 >> 6) * 65;
            const float sc = ldexpf(1.0f, (int)blk[0] - 127);
            const unsigned char* cd = blk + 1 + (d0 & 63);
            #pragma unroll
            for (int i = 0; i < 4; ++i) {
              float lo, hi;
              csa_e4m3x2_to_float2((unsigned)cd[2 * i] | ((unsigned)cd[2 * i + 1] << 8), &lo, &hi);
              w[i] = csa_pack_bf16x2(lo * sc, hi * sc);
            }
          } else {
            const unsigned char* tl = rp + (nope >> 6) * 65 + 2 * (d0 - nope);
            #pragma unroll
            for (int i = 0; i < 4; ++i)
              w[i] = (unsigned)tl[4 * i] | ((unsigned)tl[4 * i + 1] << 8) | ((unsigned)tl[4 * i + 2] << 16) |
                     ((unsigned)tl[4 * i + 3] << 24);
          }
        }
        uint4 v;
        v.x = w[0];
        v.y = w[1];
        v.z = w[2];
        v.w = w[3];
        *(uint4*)(kt + j * CSA_TC_KPITCH + d0) = v;
      }
    }
    __syncthreads();

    // S partial over this warp's 128 dims: 4 n-tiles of 8 rows
    float s[4][4];
    #pragma unroll
    for (int n = 0; n < 4; ++n) {
      #pragma unroll
      for (int i = 0; i < 4; ++i) s[n][i] = 0.0f;
      const unsigned short* krow = kt + (8 * n + gid) * CSA_TC_KPITCH + 128 * dq + 2 * tg;
      #pragma unroll
      for (int kk = 0; kk < 8; ++kk) {
        unsigned b[2] = {*(const unsigned*)(krow + 16 * kk), *(const unsigned*)(krow + 16 * kk + 8)};
        #pragma unroll
        for (int term = 0; term < 3; ++term)
          if (term < q_terms) csa_mma_bf16_16816(s[n], qf[term][kk], b);
      }
      #pragma unroll
      for (int i = 0; i < 4; ++i)
        sp[(dq * 16 + gid + (i >= 2 ? 8 : 0)) * CSA_TC_SPITCH + 8 * n + 2 * tg + (i & 1)] = s[n][i];
    }
    __syncthreads();

    // full logits at this lane's positions, online softmax for heads gid (hi = 0), gid + 8 (hi = 1)
    float tmax[2] = {CSA_NEG_INF, CSA_NEG_INF};
    #pragma unroll
    for (int n = 0; n < 4; ++n)
      #pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int hr = gid + (i >= 2 ? 8 : 0), col = 8 * n + 2 * tg + (i & 1);
        float v = 0.0f;
        #pragma unroll
        for (int p = 0; p < 4; ++p) v += sp[(p * 16 + hr) * CSA_TC_SPITCH + col];
        v = col < nv ? v * scale : CSA_NEG_INF;
        s[n][i] = v;
        tmax[i >> 1] = fmaxf(tmax[i >> 1], v);
      }
    float corr[2];
    #pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      float mx = fmaxf(tmax[hi], __shfl_xor_sync(CSA_FULL_MASK, tmax[hi], 1));
      mx = fmaxf(mx, __shfl_xor_sync(CSA_FULL_MASK, mx, 2));
      const float mn = fmaxf(m_run[hi], mx);
      corr[hi] = expf(m_run[hi] - mn);
      m_run[hi] = mn;
      l_part[hi] *= corr[hi];
    }
    #pragma unroll
    for (int n = 0; n < 4; ++n)
      #pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float p = expf(s[n][i] - m_run[i >> 1]);
        s[n][i] = p;
        l_part[i >> 1] += p;
      }
    #pragma unroll
    for (int j = 0; j < 16; ++j)
      #pragma unroll
      for (int i = 0; i < 4; ++i) acc[j][i] *= corr[i >> 1];

    // O += P V: k-step ks covers rows 16ks..16ks+15 = n-tiles 2ks, 2ks+1 of S
    #pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      float pa[4][3], pb[4][3];  // per A register: split terms of its two elements
      unsigned af[3][4];
      #pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int n = 2 * ks + (r >> 1), i0 = (r & 1) ? 2 : 0;  // a0:(g,lo) a1:(g+8,lo) a2:(g,hi) a3:(g+8,hi)
        attn_tc_split(s[n][i0], p_terms, pa[r]);
        attn_tc_split(s[n][i0 + 1], p_terms, pb[r]);
        #pragma unroll
        for (int term = 0; term < 3; ++term) af[term][r] = attn_tc_bf16pair(pa[r][term], pb[r][term]);
      }
      const unsigned short* v0 = kt + (16 * ks + 2 * tg) * CSA_TC_KPITCH + 128 * dq + gid;
      #pragma unroll
      for (int j = 0; j < 16; ++j) {
        const unsigned short* vp = v0 + 8 * j;
        unsigned b[2] = {(unsigned)vp[0] | ((unsigned)vp[CSA_TC_KPITCH] << 16),
                         (unsigned)vp[8 * CSA_TC_KPITCH] | ((unsigned)vp[9 * CSA_TC_KPITCH] << 16)};
        #pragma unroll
        for (int term = 0; term < 3; ++term)
          if (term < p_terms) csa_mma_bf16_16816(acc[j], af[term], b);
      }
    }
  }
  csa_cp_async_wait<0>();

  // partial state: l summed over the 4 lanes of a group; heads beyond `heads` are padding
  #pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    l_part[hi] += __shfl_xor_sync(CSA_FULL_MASK, l_part[hi], 1);
    l_part[hi] += __shfl_xor_sync(CSA_FULL_MASK, l_part[hi], 2);
  }
  #pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const int h = h0 + gid + 8 * hi;
    if (h >= heads) continue;
    const long long slot = ((long long)req * nchunks + chunk) * heads + h;
    if (dq == 0 && tg == 0) {
      part_ml[2 * slot] = m_run[hi];
      part_ml[2 * slot + 1] = l_part[hi];
    }
    float* po = part_o + slot * D + 128 * dq + 2 * tg;
    #pragma unroll
    for (int j = 0; j < 16; ++j) {
      po[8 * j] = acc[j][2 * hi];
      po[8 * j + 1] = acc[j][2 * hi + 1];
    }
  }
}
