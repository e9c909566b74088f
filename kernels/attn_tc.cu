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
// Q (RoPE at pos applied once) and P are split into CSA_TC_TERMS BF16 terms each (1 or 2;
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
#define CSA_TC_MAX_IDS 2048     // rows per split with an index list
#define CSA_TC_NOPE 448          // FP8 dims (7 blocks of 64); the last 64 are the BF16 RoPE tail
#define CSA_TC_NOPE_BLOCKS 7
#define CSA_TC_TERMS 2          // BF16 terms of Q and of P (2: 2^-17 relative; 1: 1.1e-3 on the outputs)

// Shared layout (bytes): stages | K tile | partial S | row offsets | ids
#define CSA_TC_STAGE_BYTES (CSA_TC_TILE * CSA_TC_ROW_SMEM)
#define CSA_TC_K_OFF (CSA_TC_STAGES * CSA_TC_STAGE_BYTES)
#define CSA_TC_S_OFF (CSA_TC_K_OFF + CSA_TC_TILE * CSA_TC_KPITCH * 2)
#define CSA_TC_S_BYTES_PER_MT (4 * 4 * 32 * 16 + 4 * 16 * 4)  // partial S (then P) | row maxima
#define CSA_TC_PPITCH 40        // bf16 per P-tile row (80 B: conflict-free ldmatrix)

__device__ __forceinline__ int attn_tc_s_off(int mt) { return CSA_TC_S_OFF + mt * CSA_TC_S_BYTES_PER_MT; }

// Split (x0, x1) into CSA_TC_TERMS packed BF16 pairs (low half x0) whose sums are
// x0 and x1 to 2^-17 relative: each term is the RNE BF16 of what the earlier terms left.
__device__ __forceinline__ void attn_tc_split2(float x0, float x1, unsigned* out) {
#pragma unroll
  for (int i = 0; i < CSA_TC_TERMS; ++i) {
    out[i] = csa_pack_bf16x2(x0, x1);
    x0 -= __uint_as_float(out[i] << 16);
    x1 -= __uint_as_float(out[i] & 0xffff0000u);
  }
}

// One FP8 block (64 E4M3 codes at `codes`) times 2^(e - 127) to BF16 through fp32 (NaN codes,
// extreme scales). Out of line: the tile loop holds the fast path.
__device__ __noinline__ void attn_tc_dequant_slow(const unsigned char* codes, unsigned e, uint4* dst) {
  const float sc = e ? __uint_as_float(e << 23) : ldexpf(1.0f, -127);
  for (int q = 0; q < 8; ++q) {
    unsigned p[4];
    for (int i = 0; i < 4; ++i) {
      float lo, hi;
      csa_e4m3x2_to_float2((unsigned)codes[8 * q + 2 * i] | ((unsigned)codes[8 * q + 2 * i + 1] << 8), &lo, &hi);
      p[i] = csa_pack_bf16x2(lo * sc, hi * sc);
    }
    dst[q] = make_uint4(p[0], p[1], p[2], p[3]);
  }
}

// The rows of mask m (bit l: row j0 + l of the tile) whose aligned superset would pass their
// buffer's end: the warp copies each in 16-byte cp.async chunks, the last one clipped with
// src-size (nothing past the buffer is read). Out of line: at most the buffer's last row.
__device__ __noinline__ void attn_tc_copy_clipped(unsigned m, int j0, int tb, int win_end, unsigned char* st,
                                                  const unsigned char* rg, const unsigned char* rc,
                                                  const int* descs, const unsigned char* leads, int end_ring,
                                                  int end_rec) {
  const int lane = threadIdx.x & 31;
  for (; m; m &= m - 1u) {
    const int j = j0 + (__ffs(m) - 1), lead = leads[tb + j];
    const bool win = j < win_end;
    const int end = win ? end_ring : end_rec;
    const unsigned char* src = (win ? rg : rc) + descs[tb + j];
    for (int k = lane; 16 * k < lead + CSA_TC_REC; k += 32)
      csa_cp_async16(st + j * CSA_TC_ROW_SMEM + 16 * k, src + 16 * k, min(16, end - (descs[tb + j] + 16 * k)));
  }
}

// The fused merge of a cluster's CLUSTER chunks (as attn_merge, with the same arithmetic in
// the same order, so both give the same bits). Each block puts its partial state (max in
// natural-log units, sum, the fp32 output of its heads) in its own shared memory; after the
// cluster barrier, block `rank` reads every block's (max, sum) for the merge weights and
// every block's output for its slice of 512 / CLUSTER dims, over distributed shared memory,
// and writes the final, un-rotated output of that slice; a second cluster barrier keeps every
// block's shared memory alive until the cluster has read it.
#define CSA_TC_OPITCH 520  // floats per head row of the output tile (+8: conflict-free float2 stores)

template <int CLUSTER>
__device__ __forceinline__ void attn_tc_merge_cluster(const float (&acc)[16][4], const float (&m_run)[2],
                                                      const float (&l_part)[2], int heads_per_block, int hgroup,
                                                      int heads, int req, int pos, const float* __restrict__ inv_freq,
                                                      int rope_dim, const float* __restrict__ sink, float* y) {
  CSA_DYN_SMEM(unsigned char, attn_tc_smem);
  const int D = CSA_TC_D, nope = D - rope_dim;
  const int tid = threadIdx.x, nthreads = blockDim.x, lane = tid & 31, warp = tid >> 5;
  const int mt = warp >> 2, dq = warp & 3, gid = lane >> 2, tg = lane & 3;
  float* ot = (float*)attn_tc_smem;                    // [head of the block][OPITCH]: this chunk's output
  float* mlt = ot + heads_per_block * CSA_TC_OPITCH;   // [head][2]: its (max, sum)
  float* wt = mlt + 2 * heads_per_block;               // [chunk][head]: the merge weights
  float* dent = wt + CLUSTER * heads_per_block;         // [head]: the merged denominator
  __syncthreads();  // every warp is done with the last tile (stages and K tile are free)
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const int hl = mt * 16 + gid + 8 * hi;
    if (dq == 0 && tg == 0) {
      mlt[2 * hl] = m_run[hi] * 0.6931471805599453f;  // natural-log units, as the partial state
      mlt[2 * hl + 1] = l_part[hi];
    }
    float* po = ot + hl * CSA_TC_OPITCH + 128 * dq + 2 * tg;
#pragma unroll
    for (int j = 0; j < 16; ++j) *(float2*)(po + 8 * j) = make_float2(acc[j][2 * hi], acc[j][2 * hi + 1]);
  }
  // one chunk: a plain block (no cluster barrier, its own shared memory)
  auto sync = [] { if (CLUSTER > 1) csa_cluster_sync(); else __syncthreads(); };
  auto peer = [](float* p, int c) { return CLUSTER > 1 ? csa_cluster_map(p, (unsigned)c) : p; };
  sync();
  const int rank = CLUSTER > 1 ? (int)csa_cluster_rank() : 0;
  if (tid < heads_per_block && hgroup * heads_per_block + tid < heads) {
    const int h = hgroup * heads_per_block + tid;
    float2 ml[CLUSTER];  // every block's (max, sum) of this head, all loads in flight at once
#pragma unroll
    for (int c = 0; c < CLUSTER; ++c) ml[c] = *(const float2*)(peer(mlt, c) + 2 * tid);
    float M = sink[h];
#pragma unroll
    for (int c = 0; c < CLUSTER; ++c) M = fmaxf(M, ml[c].x);
    float den = expf(sink[h] - M);
#pragma unroll
    for (int c = 0; c < CLUSTER; ++c) {
      const float w = expf(ml[c].x - M);
      wt[c * heads_per_block + tid] = w;
      den += ml[c].y * w;
    }
    dent[tid] = den;
  }
  __syncthreads();
  const int W = D / CLUSTER, d0 = rank * W, pairs = W / 2;
  for (int item = tid; item < heads_per_block * pairs; item += nthreads) {
    const int hl = item / pairs, d = d0 + 2 * (item - hl * pairs), h = hgroup * heads_per_block + hl;
    if (h >= heads) continue;
    float2 o[CLUSTER];
#pragma unroll
    for (int c = 0; c < CLUSTER; ++c) o[c] = *(const float2*)(peer(ot, c) + hl * CSA_TC_OPITCH + d);
    float n0 = 0.0f, n1 = 0.0f;
#pragma unroll
    for (int c = 0; c < CLUSTER; ++c) {
      const float w = wt[c * heads_per_block + hl];
      n0 += o[c].x * w;
      n1 += o[c].y * w;
    }
    float v0 = n0 / dent[hl], v1 = n1 / dent[hl];
    if (d >= nope) csa_unrope_pair(v0, v1, (float)pos * inv_freq[(d - nope) >> 1], &v0, &v1);
    *(float2*)(y + ((long long)req * heads + h) * D + d) = make_float2(v0, v1);
  }
  if (CLUSTER > 1) csa_cluster_sync();
}

// The parameters every entry point shares, and their names (the entry points forward them).
#define ATTN_TC_PARAMS                                                                                            \
  const float *__restrict__ q, const unsigned char *__restrict__ ring, long long ring_req_stride, int n_win,      \
      long long ring_bytes, const unsigned char *__restrict__ records, long long rec_req_stride, long long rec_bytes, \
      const int *__restrict__ idx, int use_idx, long long idx_req_stride, int n_sel, int heads, int pos,          \
      const float *__restrict__ inv_freq, int rope_dim, float scale
#define ATTN_TC_ARGS                                                                                          \
  q, ring, ring_req_stride, n_win, ring_bytes, records, rec_req_stride, rec_bytes, idx, use_idx, idx_req_stride, \
      n_sel, heads, pos, inv_freq, rope_dim, scale

// CLUSTER 0: write the partial state (pass 1 of two; attn_merge is pass 2). CLUSTER >= 1: the
// launch's gridDim.y == CLUSTER chunks of a (request, head group) are one thread block cluster,
// and merge in it (attn_tc_merge_cluster): one launch, no partial state in global memory.
template <int CLUSTER>
__device__ __forceinline__ void attn_tc_body(ATTN_TC_PARAMS, float* part_ml, float* part_o,
                                             const float* __restrict__ sink, float* y) {
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
  float4* sp = (float4*)(attn_tc_smem + attn_tc_s_off(mt));  // [quarter][n-tile][lane]: partial S; then P
  float* smax = (float*)(sp + 4 * 4 * 32);                    // [warp][head]: row maxima; at the end, sums
  unsigned* ptile = (unsigned*)sp;                          // [term][head][PPITCH bf16]: P (after the max)
  unsigned char* leads = attn_tc_smem + attn_tc_s_off(m_tiles);  // [row of the split]: superset lead
  int* descs = (int*)(leads + CSA_TC_MAX_IDS);                     // [row]: superset start in its region
  unsigned long long* bars = (unsigned long long*)(descs + CSA_TC_MAX_IDS);  // [stage]: its bulk copies' mbarrier
  // a zero row (scale bytes 127, codes and tail 0): rows past the split dequantize from it to
  // exact zeros (their P is 0, and 0 x stale bytes could be NaN)
  unsigned char* zrow = (unsigned char*)(bars + CSA_TC_STAGES);
  const int zrow_off = (int)(zrow - attn_tc_smem);
  if (csa_dynamic_smem_bytes() < (unsigned)(zrow_off + CSA_TC_ROW_SMEM)) __trap();  // the launcher's size is short
  for (int i = tid; i < CSA_TC_ROW_SMEM; i += nthreads) zrow[i] = (i < CSA_TC_NOPE_BLOCKS * 65 && i % 65 == 0) ? 127 : 0;
  if (tid == 0) {
    for (int st = 0; st < CSA_TC_STAGES; ++st) csa_mbar_init(&bars[st], CSA_TC_TILE);  // one arrival per row slot
    csa_fence_mbar_init();
  }

  // once per split: every row's source (the CSA index list read here), as the offset of its
  // aligned 16-byte superset within its region (ring or records) and the row's lead in it.
  // Offsets are 32-bit within a request's region (a request's rows span < 2 GB); the superset
  // is aligned on absolute addresses: mis_* = the region base's offset from 16.
  const int mis_ring = (int)((unsigned long long)rg & 15ull), mis_rec = (int)((unsigned long long)rc & 15ull);
  for (int r = r0 + tid; r < r1; r += nthreads) {
    const bool win = r < n_win;
    const int id = win ? r : (use_idx ? idx[(long long)req * idx_req_stride + (r - n_win)] : r - n_win);
    const int off = id * CSA_TC_REC, lead = (off + (win ? mis_ring : mis_rec)) & 15;
    leads[r - r0] = (unsigned char)lead;
    descs[r - r0] = off - lead;
  }
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
        attn_tc_split2(x0, x1, t3);
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
  const float scale_l2 = scale * 1.4426950408889634f;  // logits in log2 units: p = 2^(x - max)
  // ldmatrix row addresses in the shared window (32-bit), worked out once
  const int lrow = lane & 7, lmat = lane >> 3;  // ldmatrix: this lane's row of matrix lmat
  const csa_saddr kt_s = csa_smem_addr(kt);
  const csa_saddr krow_s = kt_s + 2 * (lrow * CSA_TC_KPITCH + 128 * dq + 8 * lmat);
  // P's A fragments: lane l gives row (l & 7) + 8 ((l >> 3) & 1), column 8 (l >> 4) of a k-step
  const csa_saddr prow_s = csa_smem_addr(ptile) + 2 * ((lrow + 8 * (lmat & 1)) * CSA_TC_PPITCH + 8 * (lmat >> 1));

  // issue the copies of tile `t` into stage t % STAGES. Row j of the tile belongs to lane
  // j % (TILE / warps) of warp j / (TILE / warps): it arrives on the stage's mbarrier with the
  // row's byte count and copies the row's aligned superset (lead + 583 bytes rounded up to
  // 16) with one bulk copy. A row whose superset would pass its buffer's end (the buffer's
  // last row, at most) arrives with 0 bytes and is copied by its warp in 16-byte cp.async
  // chunks, the last one clipped with src-size. Always one cp.async commit per tile.
  const int end_ring = (int)ring_bytes, end_rec = (int)rec_bytes;
  const int rows_per_warp = CSA_TC_TILE / (nthreads >> 5);
  auto load_tile = [&](int t) {
    if (t < ntiles) {
      const int tb = t * CSA_TC_TILE, nv = min(CSA_TC_TILE, r1 - r0 - tb), win_end = n_win - r0 - tb;
      unsigned char* st = attn_tc_smem + (t % CSA_TC_STAGES) * CSA_TC_STAGE_BYTES;
      bool clip = false;
      if (lane < rows_per_warp) {
        const int j = warp * rows_per_warp + lane;
        unsigned bytes = 0u;
        const unsigned char* src = rg;
        if (j < nv) {
          const bool win = j < win_end;
          const int d = descs[tb + j], size = (leads[tb + j] + CSA_TC_REC + 15) & ~15;
          src = (win ? rg : rc) + d;
          if (d + size <= (win ? end_ring : end_rec))
            bytes = (unsigned)size;
          else
            clip = true;
        }
        csa_fence_proxy_async();  // this stage's earlier reads (a barrier ago) before the async writes
        csa_mbar_arrive_expect_tx(&bars[t % CSA_TC_STAGES], bytes);
        if (bytes) csa_bulk_g2s(st + j * CSA_TC_ROW_SMEM, src, bytes, &bars[t % CSA_TC_STAGES]);
      }
      const unsigned m = __ballot_sync(CSA_FULL_MASK, clip);
      if (m) attn_tc_copy_clipped(m, warp * rows_per_warp, tb, win_end, st, rg, rc, descs, leads, end_ring, end_rec);
    }
    csa_cp_async_commit();
  };

  for (int t = 0; t < CSA_TC_STAGES - 1; ++t) load_tile(t);

  for (int t = 0; t < ntiles; ++t) {
    const int base = r0 + t * CSA_TC_TILE, nv = min(CSA_TC_TILE, r1 - base);
    csa_cp_async_wait<CSA_TC_STAGES - 2>();                                   // clipped rows
    csa_mbar_wait(&bars[t % CSA_TC_STAGES], (unsigned)(t / CSA_TC_STAGES) & 1u);  // bulk rows
    __syncthreads();  // tile t landed for every thread; K tile and partial S are free
    load_tile(t + CSA_TC_STAGES - 1);

    // dequantize. A task is one FP8 block of a row (scale byte + 64 codes) or half of its BF16
    // RoPE tail (64 bytes). The block's bytes come in as 17 aligned 32-bit words; prmt with a
    // selector worked out once per block (the codes' offset o from 4) picks each pair of codes
    // straight out of two words, sign-replicated into the high byte, which two logic ops turn
    // into BF16 bits of the code's value x 2^-120 (zero and subnormal codes included); one
    // packed BF16 multiply by 2^(e - 7) applies the E8M0 scale exactly. A running packed max of
    // the placed magnitudes finds NaN codes (0x7F/0xFF: placed 0x07f0, above every number);
    // they, or scales outside [7, 134], send the block to the fp32 path.
    {
      const int stb = (t % CSA_TC_STAGES) * CSA_TC_STAGE_BYTES;
      const unsigned char* offs = leads + t * CSA_TC_TILE;
      for (int task = tid; task < CSA_TC_TILE * CSA_TC_NOPE_BLOCKS; task += nthreads) {
        const int j = task / CSA_TC_NOPE_BLOCKS, blk = task - j * CSA_TC_NOPE_BLOCKS;
        uint4* dst = (uint4*)(kt + j * CSA_TC_KPITCH + 64 * blk);
        const int bs = (j < nv ? stb + j * CSA_TC_ROW_SMEM + offs[j] : zrow_off) + 65 * blk;
        const unsigned e = attn_tc_smem[bs];
        const int cs = bs + 1, o = cs & 3;
        const unsigned* w = (const unsigned*)(attn_tc_smem + (cs - o));
        const unsigned sel0 = (unsigned)o * 0x1111u + 0x9180u, sel1 = sel0 + 0x2222u;
        const unsigned f = (e + 120u) * 0x00800080u;  // BF16 2^(e - 7) in both halves
        unsigned mx = 0u, wk = w[0];  // the largest |code| placed: 0x07f0 only for a NaN code
#pragma unroll
        for (int q = 0; q < 8; ++q) {
          const unsigned w1 = w[2 * q + 1], w2 = w[2 * q + 2];
          const unsigned y0 = (csa_prmt(wk, w1, sel0) & 0x087f087fu) << 4, y1 = (csa_prmt(wk, w1, sel1) & 0x087f087fu) << 4;
          const unsigned y2 = (csa_prmt(w1, w2, sel0) & 0x087f087fu) << 4, y3 = (csa_prmt(w1, w2, sel1) & 0x087f087fu) << 4;
          mx = csa_hmax2_abs_bf16(csa_hmax2_abs_bf16(mx, y0), csa_hmax2_abs_bf16(y1, csa_hmax2_abs_bf16(y2, y3)));
          dst[q] = make_uint4(csa_hmul2_bf16(y0, f), csa_hmul2_bf16(y1, f), csa_hmul2_bf16(y2, f), csa_hmul2_bf16(y3, f));
          wk = w2;
        }
        const bool nan = (((mx & 0x07ff07ffu) + 0x00100010u) & 0x08000800u) != 0u;  // a half at 0x07f0
        if (nan || e < 7u || e > 134u) attn_tc_dequant_slow(attn_tc_smem + cs, e, dst);
      }
      // the BF16 RoPE tails: 64 bytes per task, realigned with prmt
      for (int task = tid; task < CSA_TC_TILE * 2; task += nthreads) {
        const int j = task >> 1, half = task & 1;
        uint4* dst = (uint4*)(kt + j * CSA_TC_KPITCH + CSA_TC_NOPE + 32 * half);
        const int cs = (j < nv ? stb + j * CSA_TC_ROW_SMEM + offs[j] : zrow_off) + CSA_TC_NOPE_BLOCKS * 65 + 64 * half,
                  o = cs & 3;
        const unsigned* w = (const unsigned*)(attn_tc_smem + (cs - o));
        const unsigned sel = (unsigned)o * 0x1111u + 0x3210u;
        unsigned wk = w[0];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const unsigned w1 = w[4 * q + 1], w2 = w[4 * q + 2], w3 = w[4 * q + 3], w4 = w[4 * q + 4];
          dst[q] = make_uint4(csa_prmt(wk, w1, sel), csa_prmt(w1, w2, sel), csa_prmt(w2, w3, sel),
                              csa_prmt(w3, w4, sel));
          wk = w4;
        }
      }
    }
    __syncthreads();

    // S partial over this warp's 128 dims: 4 n-tiles of 8 rows
    float s[4][4];
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) s[n][i] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 8; kk += 2) {
      unsigned b4[4][4];  // n-tile n, k-step kk: {b4[n][0], b4[n][1]}; kk + 1: {b4[n][2], b4[n][3]}
#pragma unroll
      for (int n = 0; n < 4; ++n) csa_ldsm_x4(b4[n], krow_s + 2 * (8 * n * CSA_TC_KPITCH + 16 * kk));
#pragma unroll
      for (int term = 0; term < CSA_TC_TERMS; ++term) {
#pragma unroll
        for (int n = 0; n < 4; ++n) csa_mma_bf16_16816(s[n], qf[term][kk], b4[n]);  // 4 independent chains
#pragma unroll
        for (int n = 0; n < 4; ++n) csa_mma_bf16_16816(s[n], qf[term][kk + 1], b4[n] + 2);
      }
    }
    // the quarters' partial S meet in shared memory: each n-tile's D fragment as the lane's
    // 16 bytes (every warp's lane l holds the same heads and columns of an n-tile)
#pragma unroll
    for (int n = 0; n < 4; ++n) sp[(dq * 4 + n) * 32 + lane] = make_float4(s[n][0], s[n][1], s[n][2], s[n][3]);
    __syncthreads();

    // warp dq takes the softmax of n-tile dq (rows 8dq..8dq+7) for its 16 heads: full logits
    // (log2 units) of heads gid (hi = 0) and gid + 8 (hi = 1) at columns 8dq + 2tg + {0, 1},
    // summed over the quarters in order; the tile's max per head meets across the 4 warps
    float x[2][2], tmax[2];
    float4 v = sp[dq * 32 + lane];
#pragma unroll
    for (int p = 1; p < 4; ++p) {
      const float4 w4 = sp[(p * 4 + dq) * 32 + lane];
      v.x += w4.x;
      v.y += w4.y;
      v.z += w4.z;
      v.w += w4.w;
    }
    const int col = 8 * dq + 2 * tg;
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      x[hi][0] = col < nv ? (hi ? v.z : v.x) * scale_l2 : CSA_NEG_INF;
      x[hi][1] = col + 1 < nv ? (hi ? v.w : v.y) * scale_l2 : CSA_NEG_INF;
      float mx = fmaxf(x[hi][0], x[hi][1]);
      mx = fmaxf(mx, __shfl_xor_sync(CSA_FULL_MASK, mx, 1));
      tmax[hi] = fmaxf(mx, __shfl_xor_sync(CSA_FULL_MASK, mx, 2));
      if (tg == 0) smax[dq * 16 + gid + 8 * hi] = tmax[hi];
    }
    __syncthreads();  // every warp's row max is in; the partial S is read (its space takes P)
    float corr[2];
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int h = gid + 8 * hi;
      const float mx = fmaxf(fmaxf(smax[h], smax[16 + h]), fmaxf(smax[32 + h], smax[48 + h]));
      const float mn = fmaxf(m_run[hi], mx);
      corr[hi] = csa_ex2(m_run[hi] - mn);
      m_run[hi] = mn;
      l_part[hi] *= corr[hi];
    }
    // P of this warp's rows, split into BF16 terms, to the P tile: [term][head][PPITCH]
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const float p0 = csa_ex2(x[hi][0] - m_run[hi]), p1 = csa_ex2(x[hi][1] - m_run[hi]);
      l_part[hi] += p0 + p1;
      unsigned t3[CSA_TC_TERMS];
      attn_tc_split2(p0, p1, t3);
#pragma unroll
      for (int term = 0; term < CSA_TC_TERMS; ++term)
        ptile[(term * 16 + gid + 8 * hi) * (CSA_TC_PPITCH / 2) + 4 * dq + tg] = t3[term];
    }
    if (corr[0] != 1.0f || corr[1] != 1.0f) {  // the running max moved: rescale (skipped once it settles)
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[j][i] *= corr[i >> 1];
    }
    __syncthreads();  // the P tile is whole

    // O += P V: k-step ks covers rows 16ks..16ks+15; P's A fragments by ldmatrix from the P tile
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      unsigned af[CSA_TC_TERMS][4];
#pragma unroll
      for (int term = 0; term < CSA_TC_TERMS; ++term)
        csa_ldsm_x4(af[term], prow_s + 2 * (term * 16 * CSA_TC_PPITCH + 16 * ks));
      // ldmatrix.trans: matrices (rows 16ks + {0..7 | 8..15}) x (the dims of n-tiles j, j + 1)
      const csa_saddr v0 =
          kt_s + 2 * ((16 * ks + 8 * (lmat & 1) + lrow) * CSA_TC_KPITCH + 128 * dq + 8 * (lmat >> 1));
#pragma unroll
      for (int j = 0; j < 16; j += 2) {
        unsigned b4[4];  // n-tile j: {b4[0], b4[1]}; j + 1: {b4[2], b4[3]}
        csa_ldsm_x4_trans(b4, v0 + 16 * j);
#pragma unroll
        for (int term = 0; term < CSA_TC_TERMS; ++term) {
          csa_mma_bf16_16816(acc[j], af[term], b4);
          csa_mma_bf16_16816(acc[j + 1], af[term], b4 + 2);
        }
      }
    }
  }
  csa_cp_async_wait<0>();

  // partial state: l summed over the 4 lanes of a group, then over the 4 warps of the m-tile
  // (each summed its own rows); heads beyond `heads` are padding
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    l_part[hi] += __shfl_xor_sync(CSA_FULL_MASK, l_part[hi], 1);
    l_part[hi] += __shfl_xor_sync(CSA_FULL_MASK, l_part[hi], 2);
    if (tg == 0) smax[dq * 16 + gid + 8 * hi] = l_part[hi];
  }
  __syncthreads();
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const int h = gid + 8 * hi;
    l_part[hi] = ((smax[h] + smax[16 + h]) + smax[32 + h]) + smax[48 + h];
  }

  if constexpr (CLUSTER > 0) {
    attn_tc_merge_cluster<CLUSTER>(acc, m_run, l_part, heads_per_block, hgroup, heads, req, pos, inv_freq, rope_dim,
                                   sink, y);
  } else {
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int h = h0 + gid + 8 * hi;
      if (h >= heads) continue;
      const long long slot = ((long long)req * nchunks + chunk) * heads + h;
      if (dq == 0 && tg == 0) {
        part_ml[2 * slot] = m_run[hi] * 0.6931471805599453f;  // back to natural-log units for the merge
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
}

extern "C" __global__ void __launch_bounds__(256) attn_tc_partial(ATTN_TC_PARAMS, float* part_ml, float* part_o) {
  attn_tc_body<0>(ATTN_TC_ARGS, part_ml, part_o, nullptr, nullptr);
}

// Fused: one chunk (no cluster), or clusters of 2, 4 or 8 chunks (gridDim.y == the cluster).
extern "C" __global__ void __launch_bounds__(256) attn_tc_fused1(ATTN_TC_PARAMS, const float* __restrict__ sink,
                                                                 float* y) {
  attn_tc_body<1>(ATTN_TC_ARGS, nullptr, nullptr, sink, y);
}
extern "C" __global__ void __cluster_dims__(1, 2, 1) __launch_bounds__(256)
    attn_tc_fused2(ATTN_TC_PARAMS, const float* __restrict__ sink, float* y) {
  attn_tc_body<2>(ATTN_TC_ARGS, nullptr, nullptr, sink, y);
}
extern "C" __global__ void __cluster_dims__(1, 4, 1) __launch_bounds__(256)
    attn_tc_fused4(ATTN_TC_PARAMS, const float* __restrict__ sink, float* y) {
  attn_tc_body<4>(ATTN_TC_ARGS, nullptr, nullptr, sink, y);
}
extern "C" __global__ void __cluster_dims__(1, 8, 1) __launch_bounds__(256)
    attn_tc_fused8(ATTN_TC_PARAMS, const float* __restrict__ sink, float* y) {
  attn_tc_body<8>(ATTN_TC_ARGS, nullptr, nullptr, sink, y);
}
