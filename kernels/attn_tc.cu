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
// Q (RoPE at pos applied once) is split into q_terms BF16 terms and P into p_terms (1 or 2;
// 2 leave 2^-17 relative, measured 2e-6 absolute on the outputs against the fp32 oracle;
// 1 term: 1e-3). Products of BF16 terms are exact in fp32; the running max's rescale of the
// accumulators is skipped in tiles where the max did not move. The split's index list is prefetched into
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
#define CSA_TC_TERMS 2          // at most this many BF16 terms of Q and of P (2: 2^-17 relative)

// Shared layout (bytes): stages | K tile | partial S | row offsets | ids
#define CSA_TC_STAGE_BYTES (CSA_TC_TILE * CSA_TC_ROW_SMEM)
#define CSA_TC_K_OFF (CSA_TC_STAGES * CSA_TC_STAGE_BYTES)
#define CSA_TC_S_OFF (CSA_TC_K_OFF + CSA_TC_TILE * CSA_TC_KPITCH * 2)
#define CSA_TC_S_BYTES_PER_MT (4 * 16 * CSA_TC_SPITCH * 4)

__device__ __forceinline__ int attn_tc_s_off(int mt) { return CSA_TC_S_OFF + mt * CSA_TC_S_BYTES_PER_MT; }

// Split (x0, x1) into `terms` (<= CSA_TC_TERMS) packed BF16 pairs (low half x0) whose sums are
// x0 and x1 to 2^-17 relative: each term is the RNE BF16 of what the earlier terms left.
__device__ __forceinline__ void attn_tc_split2(float x0, float x1, int terms, unsigned* out) {
#pragma unroll
  for (int i = 0; i < CSA_TC_TERMS; ++i) {
    unsigned p = 0u;
    if (i < terms) {
      p = csa_pack_bf16x2(x0, x1);
      x0 -= __uint_as_float(p << 16);
      x1 -= __uint_as_float(p & 0xffff0000u);
    }
    out[i] = p;
  }
}

// Eight E4M3 codes (c0: 0..3, c1: 4..7) times 2^(e - 127) to BF16 through fp32 (zero,
// subnormal and NaN codes, extreme scales). Out of line: the tile loop holds the fast path.
__device__ __noinline__ uint4 attn_tc_dequant_slow(unsigned c0, unsigned c1, unsigned e) {
  const float sc = e ? __uint_as_float(e << 23) : ldexpf(1.0f, -127);
  float f[8];
  csa_e4m3x2_to_float2(c0, &f[0], &f[1]);
  csa_e4m3x2_to_float2(c0 >> 16, &f[2], &f[3]);
  csa_e4m3x2_to_float2(c1, &f[4], &f[5]);
  csa_e4m3x2_to_float2(c1 >> 16, &f[6], &f[7]);
  uint4 v;
  v.x = csa_pack_bf16x2(f[0] * sc, f[1] * sc);
  v.y = csa_pack_bf16x2(f[2] * sc, f[3] * sc);
  v.z = csa_pack_bf16x2(f[4] * sc, f[5] * sc);
  v.w = csa_pack_bf16x2(f[6] * sc, f[7] * sc);
  return v;
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
  unsigned qf[CSA_TC_TERMS][8][4];
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
        unsigned t3[CSA_TC_TERMS];
        attn_tc_split2(x0, x1, q_terms, t3);
#pragma unroll
        for (int i = 0; i < CSA_TC_TERMS; ++i) qf[i][kk][r] = t3[i];
      }
  }

  float acc[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f;
  float m_run[2] = {CSA_NEG_INF, CSA_NEG_INF}, l_part[2] = {0.0f, 0.0f};

  const int ntiles = (r1 - r0 + CSA_TC_TILE - 1) / CSA_TC_TILE;

  // issue the cp.async copies of tile `t` into stage t % STAGES (always one commit). Offsets
  // are 32-bit within a request's region (a request's records are < 2 GB); the aligned
  // superset is taken on absolute addresses: mis_* = the region base's offset from 16.
  const int mis_ring = (int)((unsigned long long)rg & 15ull), mis_rec = (int)((unsigned long long)rc & 15ull);
  const int end_ring = (int)ring_bytes, end_rec = (int)rec_bytes;
  auto load_tile = [&](int t) {
    if (t < ntiles) {
      const int base = r0 + t * CSA_TC_TILE, nv = min(CSA_TC_TILE, r1 - base);
      unsigned char* st = attn_tc_smem + (t % CSA_TC_STAGES) * CSA_TC_STAGE_BYTES;
      for (int c = tid; c < nv * CSA_TC_CHUNKS; c += nthreads) {
        const int j = c / CSA_TC_CHUNKS, k = c - j * CSA_TC_CHUNKS, r = base + j;
        const bool win = r < n_win;
        const int off = (win ? r : ids[r - r0]) * CSA_TC_REC, lead = (off + (win ? mis_ring : mis_rec)) & 15;
        const int a = off - lead + 16 * k;  // this chunk, relative to the region base
        if (k == 0) rowoff[(t % CSA_TC_STAGES) * CSA_TC_TILE + j] = (unsigned char)lead;
        if (a >= off + CSA_TC_REC) continue;  // past this row
        const int left = (win ? end_ring : end_rec) - a;
        csa_cp_async16(st + j * CSA_TC_ROW_SMEM + 16 * k, (win ? rg : rc) + a, left >= 16 ? 16 : left);
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

    // dequantize: a thread keeps one 8-dim group (d0) and walks the tile's rows; 8 codes come
    // in with three aligned 32-bit loads and two funnel shifts; one 16-byte store of BF16
    {
      const unsigned char* offs = rowoff + (t % CSA_TC_STAGES) * CSA_TC_TILE;
      const int d0 = (tid & 63) * 8, rstep = nthreads >> 6;
      const bool is_nope = d0 < nope;
      const int src = is_nope ? (d0 >> 6) * 65 + 1 + (d0 & 63) : (nope >> 6) * 65 + 2 * (d0 - nope);
      for (int j = tid >> 6; j < CSA_TC_TILE; j += rstep) {
        uint4 v = {0u, 0u, 0u, 0u};
        if (j < nv) {
          // byte offsets within the shared buffer keep the loads in the shared window (LDS)
          const int rp = (t % CSA_TC_STAGES) * CSA_TC_STAGE_BYTES + j * CSA_TC_ROW_SMEM + offs[j];
          const int a = rp + src;
          const unsigned* a4 = (const unsigned*)(attn_tc_smem + (a & ~3));
          const unsigned sh = 8u * (unsigned)(a & 3);
          const unsigned w0 = a4[0], w1 = a4[1], w2 = a4[2];
          const unsigned c0 = __funnelshift_r(w0, w1, sh), c1 = __funnelshift_r(w1, w2, sh);
          if (is_nope) {
            const unsigned e = attn_tc_smem[rp + src - 1 - (d0 & 63)];
            // E4M3 normal codes straight to BF16 bits: exponent + (e - 7), mantissa << 4, the
            // sign moved up; zero, subnormal and NaN codes (or extreme scales) take the cvt path
            const unsigned M = 0x78787878u, H = 0x80808080u;
            const bool normal = (((c0 & M) + M) & H) == H && (((c1 & M) + M) & H) == H &&
                                ((((c0 & 0x7f7f7f7fu) + 0x01010101u) | ((c1 & 0x7f7f7f7fu) + 0x01010101u)) & H) == 0u &&
                                e >= 7u && e <= 246u;
            if (normal) {
              const unsigned bias = (e - 7u) * 0x00800080u;  // (e - 7) << 7 in both halves
              unsigned o[4];
#pragma unroll
              for (int i = 0; i < 4; ++i) {
                const unsigned x = __byte_perm(i < 2 ? c0 : c1, 0u, (i & 1) ? 0x4342u : 0x4140u);
                o[i] = (((x & 0x007f007fu) << 4) + bias) | ((x & 0x00800080u) << 8);
              }
              v.x = o[0];
              v.y = o[1];
              v.z = o[2];
              v.w = o[3];
            } else {
              v = attn_tc_dequant_slow(c0, c1, e);
            }
          } else {  // the BF16 tail: 16 bytes as they are
            const unsigned w3 = a4[3], w4 = a4[4];
            v.x = c0;
            v.y = c1;
            v.z = __funnelshift_r(w2, w3, sh);
            v.w = __funnelshift_r(w3, w4, sh);
          }
        }
        *(uint4*)(kt + j * CSA_TC_KPITCH + d0) = v;
      }
    }
    __syncthreads();

    // S partial over this warp's 128 dims: 4 n-tiles of 8 rows
    float s[4][4];
    const int lrow = lane & 7, lmat = lane >> 3;  // ldmatrix: this lane's row of matrix lmat
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) s[n][i] = 0.0f;
    const unsigned short* krow = kt + lrow * CSA_TC_KPITCH + 128 * dq + 8 * lmat;
#pragma unroll
    for (int kk = 0; kk < 8; kk += 2) {
      unsigned b4[4][4];  // n-tile n, k-step kk: {b4[n][0], b4[n][1]}; kk + 1: {b4[n][2], b4[n][3]}
#pragma unroll
      for (int n = 0; n < 4; ++n) csa_ldmatrix_x4(b4[n], krow + 8 * n * CSA_TC_KPITCH + 16 * kk);
#pragma unroll
      for (int term = 0; term < CSA_TC_TERMS; ++term)
        if (term < q_terms) {
#pragma unroll
          for (int n = 0; n < 4; ++n) csa_mma_bf16_16816(s[n], qf[term][kk], b4[n]);  // 4 independent chains
#pragma unroll
          for (int n = 0; n < 4; ++n) csa_mma_bf16_16816(s[n], qf[term][kk + 1], b4[n] + 2);
        }
    }
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        sp[(dq * 16 + gid + (i >= 2 ? 8 : 0)) * CSA_TC_SPITCH + 8 * n + 2 * tg + (i & 1)] = s[n][i];
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
    if (corr[0] != 1.0f || corr[1] != 1.0f) {  // the running max moved: rescale (skipped once it settles)
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[j][i] *= corr[i >> 1];
    }

    // O += P V: k-step ks covers rows 16ks..16ks+15 = n-tiles 2ks, 2ks+1 of S
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      unsigned af[CSA_TC_TERMS][4];  // per A register: the split terms of its two elements
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int n = 2 * ks + (r >> 1), i0 = (r & 1) ? 2 : 0;  // a0:(g,lo) a1:(g+8,lo) a2:(g,hi) a3:(g+8,hi)
        unsigned t3[CSA_TC_TERMS];
        attn_tc_split2(s[n][i0], s[n][i0 + 1], p_terms, t3);
#pragma unroll
        for (int term = 0; term < CSA_TC_TERMS; ++term) af[term][r] = t3[term];
      }
      // ldmatrix.trans: matrices (rows 16ks + {0..7 | 8..15}) x (the dims of n-tiles j, j + 1)
      const unsigned short* v0 =
          kt + (16 * ks + 8 * (lmat & 1) + lrow) * CSA_TC_KPITCH + 128 * dq + 8 * (lmat >> 1);
#pragma unroll
      for (int j = 0; j < 16; j += 2) {
        unsigned b4[4];  // n-tile j: {b4[0], b4[1]}; j + 1: {b4[2], b4[3]}
        csa_ldmatrix_x4_trans(b4, v0 + 8 * j);
#pragma unroll
        for (int term = 0; term < CSA_TC_TERMS; ++term)
          if (term < p_terms) {
            csa_mma_bf16_16816(acc[j], af[term], b4);
            csa_mma_bf16_16816(acc[j + 1], af[term], b4 + 2);
          }
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
