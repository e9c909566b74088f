// topk.cu — top-k by radix select (no sort). One block per request.
// Four 8-bit passes over order-preserving keys find the k-th largest key T and how
// many keys equal to T to take; a second scan writes the chosen ids in ascending id
// order (every key > T, then the lowest-id keys == T), so the result is deterministic.
// Read passes over the scores: four histogram passes, the count pass and the write pass (6).
#include "csa_common.cuh"

// The order key: csa_order_key (csa_common.cuh; the indexer's fused histogram uses it too).

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

// ---------------------------------------------------------------------------------------
// Multi-block radix select (topk_mb_*): B blocks per request (sized from the SM count by
// the launcher, tc_geometry.topk_blocks), each over a contiguous slice of the scores read
// with 16-byte loads where the slice start is 16-byte aligned. Three radix digits of the
// order keys, 11, 11 and 10 bits, each histogrammed in shared memory and merged into the
// request's global histogram with one atomic per non-empty bin; every block re-derives the
// selection so far (desired prefix, mask, keys still to take) from the earlier histograms,
// so no launch is spent on a scan. The first digit's histogram (hist0) comes from
// topk_mb_hist pass 0, or from the indexer's epilogue as it writes the scores
// (index_tc_scores with hist: then pass 0 is not launched).
// Candidate compaction (cand_cap > 0, room for cand_cap (id, key) pairs in the work): pass 1
// also appends every key of the threshold bin of hist0 — the only keys the later digits can
// still split — to the request's candidate list (warp-aggregated slots from one global
// count), and counts per slice the keys of higher bins (all chosen). When the count fits
// cand_cap, pass 2 and topk_mb_count read the candidates instead of the scores; when it does
// not (more keys share the threshold bin than the work holds), they read the scores as
// without compaction, so every input gets the same answer.
// topk_mb_count gives each slice's keys > T and == T (T the k-th largest key); topk_mb_write
// gives each block its output base from the earlier slices' counts and writes its chosen
// ids in ascending order: keys > T, and keys == T while fewer than `take` equal keys precede
// them (ties to the lower id), ranked within a block by warp ballots. The result equals
// topk_radix's (and oracle.topk_ids) for every input, NaN and -0 included (csa_order_key).
// Work (unsigned, per request, zeroed up to the candidates by the launcher): hist0[2048]
// hist1[2048] hist2[1024] counts[2 * B] the candidate count, then from the next multiple of
// 4 words the candidates, 64 bits each (id low, key high): tc_geometry.TopkLayout.
#define CSA_TK_H1 2048
#define CSA_TK_H2 4096
#define CSA_TK_COUNTS 5120
#define CSA_TK_MAX_BLOCKS 1024  // topk_mb_count's shared slice counters (tc_geometry.TOPK_MB_MAX_BLOCKS)

__device__ __forceinline__ int topk_mb_bits(int pass) { return pass < 2 ? 11 : 10; }
__device__ __forceinline__ int topk_mb_shift(int pass) { return pass == 0 ? CSA_TK_SHIFT0 : (pass == 1 ? 10 : 0); }
__device__ __forceinline__ int topk_mb_hoff(int pass) { return pass == 0 ? 0 : (pass == 1 ? CSA_TK_H1 : CSA_TK_H2); }
__device__ __forceinline__ int topk_mb_ccount() { return CSA_TK_COUNTS + 2 * (int)gridDim.x; }
__device__ __forceinline__ int topk_mb_coff() { return (CSA_TK_COUNTS + 2 * (int)gridDim.x + 1 + 3) & ~3; }

// The selection after `passes` histogram passes, for every thread of the (256-thread) block:
// sel[0] desired prefix, sel[1] mask, sel[2] keys still to take among those matching.
__device__ void topk_mb_state(const unsigned* wk, int passes, unsigned k, unsigned* sel, unsigned* part) {
  const int t = threadIdx.x, nt = blockDim.x;
  if (t == 0) {
    sel[0] = 0u;
    sel[1] = 0u;
    sel[2] = k;
  }
  __syncthreads();
  for (int p = 0; p < passes; ++p) {
    const int nb = 1 << topk_mb_bits(p), g = nb / nt, shift = topk_mb_shift(p);
    const unsigned* h = wk + topk_mb_hoff(p);
    // thread t sums bins [nb - (t + 1) g, nb - t g): groups in descending digit order
    unsigned local = 0u;
    for (int i = 0; i < g; ++i) local += h[nb - 1 - (t * g + i)];
    part[t] = local;
    __syncthreads();
    if (t == 0) {  // the first group (from the top) where the running count reaches `need`
      unsigned need = sel[2], above = 0u;
      int grp = 0;
      for (; grp < nt - 1; ++grp) {
        if (above + part[grp] >= need) break;
        above += part[grp];
      }
      int b = nb - 1 - grp * g;
      for (int i = 0; i < g - 1; ++i, --b) {
        const unsigned c = h[b];
        if (above + c >= need) break;
        above += c;
      }
      sel[0] |= (unsigned)b << shift;
      sel[1] |= (unsigned)(nb - 1) << shift;
      sel[2] = need - above;
    }
    __syncthreads();
  }
}

// The block's slice of the request's scores: [lo, hi), lo a multiple of 4, `per` ids each.
__device__ __forceinline__ int topk_mb_per(int n) { return ((n + (int)gridDim.x - 1) / (int)gridDim.x + 3) & ~3; }
__device__ __forceinline__ void topk_mb_slice(int n, int* lo, int* hi) {
  const int per = topk_mb_per(n);
  *lo = min(n, (int)blockIdx.x * per);
  *hi = min(n, *lo + per);
}

// f(i, key) for every i of [lo, hi), 16-byte loads when the slice start is aligned.
template <class F>
__device__ __forceinline__ void topk_mb_scan(const float* s, int lo, int hi, F f) {
  const int t = threadIdx.x, nt = blockDim.x;
  int i0 = lo;
  if ((((unsigned long long)(s + lo)) & 15ull) == 0ull) {
    const int n4 = (hi - lo) >> 2;
    const float4* s4 = (const float4*)(s + lo);
    for (int v = t; v < n4; v += nt) {
      const float4 x = s4[v];
      const int i = lo + 4 * v;
      f(i, csa_order_key(x.x));
      f(i + 1, csa_order_key(x.y));
      f(i + 2, csa_order_key(x.z));
      f(i + 3, csa_order_key(x.w));
    }
    i0 = lo + 4 * n4;
  }
  for (int i = i0 + t; i < hi; i += nt) f(i, csa_order_key(s[i]));
}

// f(i0, key[4]) in rounds of 4 * nt ids over [lo, hi): thread t holds ids i0 = r + 4t ..
// i0 + 3 (id order is thread-major; keys of ids past hi are 0, the caller tests i0 + j < hi).
// Every thread runs every round, so f may use warp ballots and block barriers.
template <class F>
__device__ __forceinline__ void topk_mb_rounds(const float* s, int lo, int hi, F f) {
  const int t = threadIdx.x, nt = blockDim.x;
  const bool vec = (((unsigned long long)(s + lo)) & 15ull) == 0ull;
  for (int r = lo; r < hi; r += 4 * nt) {
    const int i0 = r + 4 * t;
    unsigned key[4];
    if (vec && i0 + 3 < hi) {
      const float4 x = *(const float4*)(s + i0);
      key[0] = csa_order_key(x.x);
      key[1] = csa_order_key(x.y);
      key[2] = csa_order_key(x.z);
      key[3] = csa_order_key(x.w);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) key[j] = i0 + j < hi ? csa_order_key(s[i0 + j]) : 0u;
    }
    f(i0, key);
  }
}

// The compacted candidates: how many the request has, or -1 when they overflowed cand_cap
// (or none were compacted); the block's share [lo, hi) of them (lo even).
__device__ __forceinline__ int topk_mb_cands(const unsigned* wk, int cand_cap) {
  if (cand_cap <= 0) return -1;
  const unsigned c = wk[topk_mb_ccount()];
  return c <= (unsigned)cand_cap ? (int)c : -1;
}
__device__ __forceinline__ void topk_mb_cand_share(int c, int* lo, int* hi) {
  const int per = ((c + (int)gridDim.x - 1) / (int)gridDim.x + 1) & ~1;
  *lo = min(c, (int)blockIdx.x * per);
  *hi = min(c, *lo + per);
}

// f(id, key) for every candidate of [lo, hi), two per 16-byte load.
template <class F>
__device__ __forceinline__ void topk_mb_cand_scan(const unsigned* wk, int lo, int hi, F f) {
  const int t = threadIdx.x, nt = blockDim.x;
  const unsigned* c = wk + topk_mb_coff();
  const int n2 = (hi - lo) >> 1;
  const uint4* c4 = (const uint4*)(c + 2 * lo);
  for (int v = t; v < n2; v += nt) {
    const uint4 x = c4[v];
    f(x.x, x.y);
    f(x.z, x.w);
  }
  if (((hi - lo) & 1) && t == 0) f(c[2 * (hi - 1)], c[2 * (hi - 1) + 1]);
}

// Sum of v over the (256-thread) block, for thread 0.
__device__ __forceinline__ unsigned topk_mb_block_sum(unsigned v, unsigned* red /* [8] */) {
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(CSA_FULL_MASK, v, o);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  unsigned a = 0u;
  if (t == 0)
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) a += red[w];
  return a;
}

extern "C" __global__ void __launch_bounds__(256) topk_mb_hist(
    const float* __restrict__ scores, long long score_req_stride, int n, int k, unsigned* work,
    long long work_req_stride, int pass, int cand_cap) {
  __shared__ unsigned hist[2048];
  __shared__ unsigned sel[3];
  __shared__ unsigned part[256];
  __shared__ unsigned red[8];
  const float* s = scores + (long long)blockIdx.y * score_req_stride;
  unsigned* wk = work + (long long)blockIdx.y * work_req_stride;
  const int t = threadIdx.x, nt = blockDim.x, lane = t & 31;
  const int nb = 1 << topk_mb_bits(pass), shift = topk_mb_shift(pass);
  for (int i = t; i < nb; i += nt) hist[i] = 0u;
  topk_mb_state(wk, pass, (unsigned)k, sel, part);  // its barriers also order the zeroing of hist
  const unsigned desired = sel[0], mask = sel[1], dmask = (unsigned)(nb - 1);
  const int cands = pass == 2 ? topk_mb_cands(wk, cand_cap) : -1;
  if (cands >= 0) {  // pass 2 over the candidates
    int lo, hi;
    topk_mb_cand_share(cands, &lo, &hi);
    topk_mb_cand_scan(wk, lo, hi, [&](unsigned, unsigned key) {
      if ((key & mask) == desired) atomicAdd(&hist[(key >> shift) & dmask], 1u);
    });
  } else if (pass == 1 && cand_cap > 0) {  // pass 1, compacting the threshold bin's keys
    int lo, hi;
    topk_mb_slice(n, &lo, &hi);
    unsigned* count = wk + topk_mb_ccount();
    unsigned long long* cand = (unsigned long long*)(wk + topk_mb_coff());
    const unsigned above = desired | ~mask, below = (1u << lane) - 1u;  // keys past `above`: a higher bin
    unsigned gt = 0u;
    topk_mb_rounds(s, lo, hi, [&](int i0, const unsigned* key) {
      unsigned bm[4], tot = 0u;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const bool in = i0 + j < hi, m = in && (key[j] & mask) == desired;
        gt += in && key[j] > above;
        if (m) atomicAdd(&hist[(key[j] >> shift) & dmask], 1u);
        bm[j] = __ballot_sync(CSA_FULL_MASK, m);
        tot += __popc(bm[j]);
      }
      if (tot == 0u) return;  // warp-uniform
      unsigned base = 0u;
      if (lane == 0) base = atomicAdd(count, tot);
      base = __shfl_sync(CSA_FULL_MASK, base, 0);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const unsigned pos = base + __popc(bm[j] & below);
        if (((bm[j] >> lane) & 1u) && pos < (unsigned)cand_cap)
          cand[pos] = ((unsigned long long)key[j] << 32) | (unsigned)(i0 + j);
        base += __popc(bm[j]);
      }
    });
    gt = topk_mb_block_sum(gt, red);
    if (t == 0) wk[CSA_TK_COUNTS + 2 * blockIdx.x] = gt;  // topk_mb_count adds the candidates'
  } else {
    int lo, hi;
    topk_mb_slice(n, &lo, &hi);
    topk_mb_scan(s, lo, hi, [&](int, unsigned key) {
      if ((key & mask) == desired) atomicAdd(&hist[(key >> shift) & dmask], 1u);
    });
  }
  __syncthreads();
  unsigned* gh = wk + topk_mb_hoff(pass);
  for (int i = t; i < nb; i += nt)
    if (hist[i]) atomicAdd(&gh[i], hist[i]);
}

extern "C" __global__ void __launch_bounds__(256) topk_mb_count(
    const float* __restrict__ scores, long long score_req_stride, int n, int k, unsigned* work,
    long long work_req_stride, int cand_cap) {
  __shared__ unsigned sel[3];
  __shared__ unsigned part[256];
  __shared__ unsigned red[2][8];
  __shared__ unsigned sc[2 * CSA_TK_MAX_BLOCKS];  // candidates > T and == T per slice
  const float* s = scores + (long long)blockIdx.y * score_req_stride;
  unsigned* wk = work + (long long)blockIdx.y * work_req_stride;
  const int t = threadIdx.x, nt = blockDim.x;
  topk_mb_state(wk, 3, (unsigned)k, sel, part);
  const unsigned T = sel[0];
  const int cands = topk_mb_cands(wk, cand_cap);
  if (cands >= 0) {  // the candidates' counts, added to pass 1's per-slice counts of higher bins
    const int nsl = 2 * (int)gridDim.x;
    for (int i = t; i < nsl; i += nt) sc[i] = 0u;
    __syncthreads();
    const unsigned per = (unsigned)topk_mb_per(n);
    int lo, hi;
    topk_mb_cand_share(cands, &lo, &hi);
    topk_mb_cand_scan(wk, lo, hi, [&](unsigned id, unsigned key) {
      if (key >= T) atomicAdd(&sc[2 * (id / per) + (key == T ? 1u : 0u)], 1u);
    });
    __syncthreads();
    for (int i = t; i < nsl; i += nt)
      if (sc[i]) atomicAdd(&wk[CSA_TK_COUNTS + i], sc[i]);
    return;
  }
  int lo, hi;
  topk_mb_slice(n, &lo, &hi);
  unsigned gt = 0u, eq = 0u;
  topk_mb_scan(s, lo, hi, [&](int, unsigned key) {
    gt += key > T;
    eq += key == T;
  });
  gt = topk_mb_block_sum(gt, red[0]);
  eq = topk_mb_block_sum(eq, red[1]);
  if (t == 0) {
    wk[CSA_TK_COUNTS + 2 * blockIdx.x] = gt;
    wk[CSA_TK_COUNTS + 2 * blockIdx.x + 1] = eq;
  }
}

extern "C" __global__ void __launch_bounds__(256) topk_mb_write(
    const float* __restrict__ scores, long long score_req_stride, int n, int k, const unsigned* work,
    long long work_req_stride, int* __restrict__ out, long long out_req_stride) {
  __shared__ unsigned sel[3];
  __shared__ unsigned part[256];
  __shared__ unsigned base[2];  // ids chosen before this slice, equal keys before it
  __shared__ unsigned wsum[2][8];
  const float* s = scores + (long long)blockIdx.y * score_req_stride;
  const unsigned* wk = work + (long long)blockIdx.y * work_req_stride;
  int* o = out + (long long)blockIdx.y * out_req_stride;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, nw = (int)blockDim.x >> 5;
  topk_mb_state(wk, 3, (unsigned)k, sel, part);
  const unsigned T = sel[0], take = sel[2];
  if (t == 0) {
    unsigned pos = 0u, eqb = 0u;
    for (int b = 0; b < (int)blockIdx.x; ++b) {
      const unsigned g = wk[CSA_TK_COUNTS + 2 * b], e = wk[CSA_TK_COUNTS + 2 * b + 1];
      pos += g + min(e, take > eqb ? take - eqb : 0u);
      eqb += e;
    }
    base[0] = pos;
    base[1] = eqb;
  }
  __syncthreads();
  unsigned pos = base[0], eqb = base[1];
  int lo, hi;
  topk_mb_slice(n, &lo, &hi);
  const unsigned below = (1u << lane) - 1u;
  topk_mb_rounds(s, lo, hi, [&](int i0, const unsigned* key) {
    unsigned bg[4], be[4], gw = 0u, ew = 0u;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const bool in = i0 + j < hi;
      bg[j] = __ballot_sync(CSA_FULL_MASK, in && key[j] > T);
      be[j] = __ballot_sync(CSA_FULL_MASK, in && key[j] == T);
      gw += __popc(bg[j]);
      ew += __popc(be[j]);
    }
    if (lane == 0) {
      wsum[0][warp] = gw;
      wsum[1][warp] = ew;
    }
    __syncthreads();
    unsigned gbefore = 0u, ebefore = 0u, gall = 0u, eall = 0u;
    for (int w = 0; w < nw; ++w) {
      const unsigned a = wsum[0][w], b = wsum[1][w];
      if (w < warp) {
        gbefore += a;
        ebefore += b;
      }
      gall += a;
      eall += b;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {  // lower lanes hold lower ids at every j; this lane's earlier j below
      gbefore += __popc(bg[j] & below);
      ebefore += __popc(be[j] & below);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const bool g = (bg[j] >> lane) & 1u, e = (be[j] >> lane) & 1u;
      const unsigned eq_rank = eqb + ebefore;  // equal keys before this id in the request
      // position: everything chosen before this round, the greater keys before this id in
      // the round, and the equal keys before it in the round that were taken
      if (g || (e && eq_rank < take)) o[pos + gbefore + min(eq_rank, take) - min(eqb, take)] = i0 + j;
      gbefore += g;
      ebefore += e;
    }
    pos += gall + min(eqb + eall, take) - min(eqb, take);
    eqb += eall;
    __syncthreads();  // wsum is rewritten next round
  });
}
