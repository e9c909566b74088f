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
// Candidate compaction (seg_cap > 0: a segment of seg_cap (id, key) entries per block in the
// work): pass 1 also appends, in ascending id order (ranked by warp ballots), every key of
// its slice in hist0's threshold bin or above — every key the later passes can still split
// or will choose — to the block's segment, and records how many there were. A block whose
// entries fit its segment reads the segment in pass 2, topk_mb_count and topk_mb_write
// instead of its slice of the scores; a block whose entries did not fit (a slice with more
// such keys than seg_cap) reads its slice as without compaction, so every input gets the
// same answer.
// topk_mb_count gives each slice's keys > T and == T (T the k-th largest key); topk_mb_write
// gives each block its output base from the earlier slices' counts and writes its chosen
// ids in ascending order: keys > T, and keys == T while fewer than `take` equal keys precede
// them (ties to the lower id), ranked within a block by warp ballots. The result equals
// topk_radix's (and oracle.topk_ids) for every input, NaN and -0 included (csa_order_key).
// Work (unsigned, per request, its header zeroed by the launcher): hist0[2048] hist1[2048]
// hist2[1024] counts[2 * B] entries[B] (how many keys each block's pass 1 found for its
// segment, stored or not), then from the next multiple of 4 words B segments of seg_cap
// entries, 64 bits each (id low, key high): tc_geometry.TopkLayout.
#define CSA_TK_H1 2048
#define CSA_TK_H2 4096
#define CSA_TK_COUNTS 5120

__device__ __forceinline__ int topk_mb_bits(int pass) { return pass < 2 ? 11 : 10; }
__device__ __forceinline__ int topk_mb_shift(int pass) { return pass == 0 ? CSA_TK_SHIFT0 : (pass == 1 ? 10 : 0); }
__device__ __forceinline__ int topk_mb_hoff(int pass) { return pass == 0 ? 0 : (pass == 1 ? CSA_TK_H1 : CSA_TK_H2); }
__device__ __forceinline__ int topk_mb_entries_off() { return CSA_TK_COUNTS + 2 * (int)gridDim.x; }
__device__ __forceinline__ int topk_mb_seg_off() { return (CSA_TK_COUNTS + 3 * (int)gridDim.x + 3) & ~3; }

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

// The block's slice of the request's scores: [lo, hi), lo a multiple of 4.
__device__ __forceinline__ void topk_mb_slice(int n, int* lo, int* hi) {
  const int per = ((n + (int)gridDim.x - 1) / (int)gridDim.x + 3) & ~3;
  *lo = min(n, (int)blockIdx.x * per);
  *hi = min(n, *lo + per);
}

// The block's segment (its entries ascending by id) and how many entries it holds, or -1
// when the block reads its slice of the scores instead (no compaction, or they did not fit).
__device__ __forceinline__ const unsigned* topk_mb_segment(const unsigned* wk, int seg_cap) {
  return wk + topk_mb_seg_off() + 2LL * seg_cap * blockIdx.x;
}
__device__ __forceinline__ int topk_mb_seg_entries(const unsigned* wk, int seg_cap) {
  if (seg_cap <= 0) return -1;
  const unsigned c = wk[topk_mb_entries_off() + blockIdx.x];
  return c <= (unsigned)seg_cap ? (int)c : -1;
}

// Loads a scan keeps in flight per thread: the scans below issue CSA_TK_INFLIGHT 16-byte loads
// (of the next CSA_TK_INFLIGHT trips' worth of keys) before they use the first, so a thread
// waits one DRAM latency per CSA_TK_INFLIGHT loads, not per load (the throughput model reads
// this from the SASS: benchmarks/throughput_model.py, _load_waits).
// The topk_mb kernels are __launch_bounds__(256, 2): the grid is sized for two resident
// blocks per SM (tc_geometry.topk_blocks), and without that minimum ptxas held topk_mb_count
// to 32 registers (eight blocks per SM) and issued its last two loads after the first uses.
#define CSA_TK_INFLIGHT 4
// Warps of a topk_mb block (256 threads, as the launcher runs them: backends.TOPK_THREADS);
// the per-round warp sums loop over a compile-time count, fully unrolled. The kernels that
// rely on it trap on any other block size rather than answer wrongly.
#define CSA_TK_WARPS 8

// CSA_TK_INFLIGHT 16-byte loads (s4[0], s4[step], s4[2 step] ...) issued together, then every
// load's order keys: all loads are in flight before the first key is used.
__device__ __forceinline__ void topk_mb_load_inflight(const float4* s4, int step, unsigned (&key)[CSA_TK_INFLIGHT][4]) {
  float4 x[CSA_TK_INFLIGHT];
#pragma unroll
  for (int u = 0; u < CSA_TK_INFLIGHT; ++u) x[u] = s4[u * step];
#pragma unroll
  for (int u = 0; u < CSA_TK_INFLIGHT; ++u) {
    key[u][0] = csa_order_key(x[u].x);
    key[u][1] = csa_order_key(x[u].y);
    key[u][2] = csa_order_key(x[u].z);
    key[u][3] = csa_order_key(x[u].w);
  }
}

// f(i, key) for every i of [lo, hi), 16-byte loads when the slice start is aligned: a main
// loop of CSA_TK_INFLIGHT float4 per thread per trip (all loaded, then used), then the rest
// of the float4 one at a time, then the scalar tail. The order f sees the keys in is not the
// id order (f only counts).
template <class F>
__device__ __forceinline__ void topk_mb_scan(const float* s, int lo, int hi, F f) {
  const int t = threadIdx.x, nt = blockDim.x;
  int i0 = lo;
  if ((((unsigned long long)(s + lo)) & 15ull) == 0ull) {
    const int n4 = (hi - lo) >> 2;
    const float4* s4 = (const float4*)(s + lo);
    int v = t;
#pragma unroll 1
    for (; v + (CSA_TK_INFLIGHT - 1) * nt < n4; v += CSA_TK_INFLIGHT * nt) {
      unsigned key[CSA_TK_INFLIGHT][4];
      topk_mb_load_inflight(s4 + v, nt, key);
#pragma unroll
      for (int u = CSA_TK_INFLIGHT - 1; u >= 0; --u) {  // the last load's keys first
        const int i = lo + 4 * (v + u * nt);
#pragma unroll
        for (int j = 0; j < 4; ++j) f(i + j, key[u][j]);
      }
    }
#pragma unroll 1
    for (; v < n4; v += nt) {
      const float4 x = s4[v];
      const int i = lo + 4 * v;
      f(i, csa_order_key(x.x));
      f(i + 1, csa_order_key(x.y));
      f(i + 2, csa_order_key(x.z));
      f(i + 3, csa_order_key(x.w));
    }
    i0 = lo + 4 * n4;
  }
#pragma unroll 1
  for (int i = i0 + t; i < hi; i += nt) f(i, csa_order_key(s[i]));
}

// One round of topk_mb_rounds at r: this thread's ids r + 4t .. r + 4t + 3 and their keys.
__device__ __forceinline__ void topk_mb_round_keys(const float* s, int hi, bool vec, int r, unsigned* id,
                                                   unsigned* key, bool* in) {
  const int i0 = r + 4 * (int)threadIdx.x;
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
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    id[j] = (unsigned)(i0 + j);
    in[j] = i0 + j < hi;
  }
}

// f(id[4], key[4], in[4]) in rounds of 4 * nt ids over [lo, hi) of the scores, in ascending
// round order: thread t holds ids r + 4t .. r + 4t + 3 (id order is thread-major; in[j] false
// past hi, key 0). Every thread runs every round, so f may use warp ballots and block
// barriers. While CSA_TK_INFLIGHT whole rounds remain and the slice is 16-byte aligned, a trip
// loads CSA_TK_INFLIGHT rounds' float4 first and then runs f on each round in order; the rest
// (and unaligned slices) one round at a time.
template <class F>
__device__ __forceinline__ void topk_mb_rounds(const float* s, int lo, int hi, F f) {
  const int t = threadIdx.x, nt = blockDim.x;
  const bool vec = (((unsigned long long)(s + lo)) & 15ull) == 0ull;
  int r = lo;
  if (vec) {
#pragma unroll 1
    for (; r + CSA_TK_INFLIGHT * 4 * nt <= hi; r += CSA_TK_INFLIGHT * 4 * nt) {
      unsigned key[CSA_TK_INFLIGHT][4];
      topk_mb_load_inflight((const float4*)(s + r) + t, nt, key);
#pragma unroll
      for (int u = 0; u < CSA_TK_INFLIGHT; ++u) {
        const unsigned i0 = (unsigned)(r + 4 * (u * nt + t));
        const unsigned id[4] = {i0, i0 + 1u, i0 + 2u, i0 + 3u};
        const bool in[4] = {true, true, true, true};
        f(id, key[u], in);
      }
    }
  }
#pragma unroll 1
  for (; r < hi; r += 4 * nt) {
    unsigned id[4], key[4];
    bool in[4];
    topk_mb_round_keys(s, hi, vec, r, id, key, in);
    f(id, key, in);
  }
}

// The same rounds over the c entries of a segment (entry e = words 2e, 2e + 1: id, key):
// thread t holds entries r + 4t .. r + 4t + 3, two 16-byte loads when all four are there.
template <class F>
__device__ __forceinline__ void topk_mb_seg_rounds(const unsigned* seg, int c, F f) {
  const int t = threadIdx.x, nt = blockDim.x;
  for (int r = 0; r < c; r += 4 * nt) {
    const int e0 = r + 4 * t;
    unsigned id[4], key[4];
    bool in[4];
    if (e0 + 3 < c) {
      const uint4 a = ((const uint4*)seg)[e0 >> 1], b = ((const uint4*)seg)[(e0 >> 1) + 1];
      id[0] = a.x, key[0] = a.y, id[1] = a.z, key[1] = a.w;
      id[2] = b.x, key[2] = b.y, id[3] = b.z, key[3] = b.w;
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        id[j] = e0 + j < c ? seg[2 * (e0 + j)] : 0u;
        key[j] = e0 + j < c ? seg[2 * (e0 + j) + 1] : 0u;
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) in[j] = e0 + j < c;
    f(id, key, in);
  }
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

// Per round: this thread's rank among the block's flagged items (bm[j]: the warp's ballot
// of item j; id order is warp, lane, then j) and the round's total, via wsum[8] (two barriers).
__device__ __forceinline__ unsigned topk_mb_rank(const unsigned* bm, unsigned* wsum, unsigned* all) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned below = (1u << lane) - 1u;
  unsigned before = 0u, w = 0u;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    before += __popc(bm[j] & below);
    w += __popc(bm[j]);
  }
  if (lane == 0) wsum[warp] = w;
  __syncthreads();
  unsigned tot = 0u;
#pragma unroll
  for (int i = 0; i < CSA_TK_WARPS; ++i) {
    const unsigned v = wsum[i];
    if (i < warp) before += v;
    tot += v;
  }
  __syncthreads();  // wsum is rewritten next round
  *all = tot;
  return before;
}

extern "C" __global__ void __launch_bounds__(256, 2) topk_mb_hist(
    const float* __restrict__ scores, long long score_req_stride, int n, int k, unsigned* work,
    long long work_req_stride, int pass, int seg_cap) {
  __shared__ unsigned hist[2048];
  __shared__ unsigned sel[3];
  __shared__ unsigned part[256];
  __shared__ unsigned wsum[8];
  const float* s = scores + (long long)blockIdx.y * score_req_stride;
  unsigned* wk = work + (long long)blockIdx.y * work_req_stride;
  const int t = threadIdx.x, nt = blockDim.x, lane = t & 31;
  if (nt != CSA_TK_WARPS * 32) __trap();  // topk_mb_rank's warp count
  const int nb = 1 << topk_mb_bits(pass), shift = topk_mb_shift(pass);
  for (int i = t; i < nb; i += nt) hist[i] = 0u;
  topk_mb_state(wk, pass, (unsigned)k, sel, part);  // its barriers also order the zeroing of hist
  const unsigned desired = sel[0], mask = sel[1], dmask = (unsigned)(nb - 1);
  int lo, hi;
  topk_mb_slice(n, &lo, &hi);
  const int c = pass == 2 ? topk_mb_seg_entries(wk, seg_cap) : -1;
  if (c >= 0) {  // pass 2 over the block's segment
    topk_mb_seg_rounds(topk_mb_segment(wk, seg_cap), c, [&](const unsigned*, const unsigned* key, const bool* in) {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (in[j] && (key[j] & mask) == desired) atomicAdd(&hist[(key[j] >> shift) & dmask], 1u);
    });
  } else if (pass == 1 && seg_cap > 0) {  // pass 1, compacting the keys of the threshold bin and above
    unsigned long long* seg = (unsigned long long*)topk_mb_segment(wk, seg_cap);
    unsigned total = 0u;  // entries found so far (the same in every thread)
    topk_mb_rounds(s, lo, hi, [&](const unsigned* id, const unsigned* key, const bool* in) {
      unsigned bm[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (in[j] && (key[j] & mask) == desired) atomicAdd(&hist[(key[j] >> shift) & dmask], 1u);
        bm[j] = __ballot_sync(CSA_FULL_MASK, in[j] && key[j] >= desired);  // top digit >= the threshold bin
      }
      unsigned all;
      unsigned pos = total + topk_mb_rank(bm, wsum, &all);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if ((bm[j] >> lane) & 1u) {
          if (pos < (unsigned)seg_cap) seg[pos] = ((unsigned long long)key[j] << 32) | id[j];
          ++pos;
        }
      total += all;
    });
    if (t == 0) wk[topk_mb_entries_off() + blockIdx.x] = total;
  } else {
    topk_mb_scan(s, lo, hi, [&](int, unsigned key) {
      if ((key & mask) == desired) atomicAdd(&hist[(key >> shift) & dmask], 1u);
    });
  }
  __syncthreads();
  unsigned* gh = wk + topk_mb_hoff(pass);
  for (int i = t; i < nb; i += nt)
    if (hist[i]) atomicAdd(&gh[i], hist[i]);
}

extern "C" __global__ void __launch_bounds__(256, 2) topk_mb_count(
    const float* __restrict__ scores, long long score_req_stride, int n, int k, unsigned* work,
    long long work_req_stride, int seg_cap) {
  __shared__ unsigned sel[3];
  __shared__ unsigned part[256];
  __shared__ unsigned red[2][8];
  const float* s = scores + (long long)blockIdx.y * score_req_stride;
  unsigned* wk = work + (long long)blockIdx.y * work_req_stride;
  const int t = threadIdx.x;
  topk_mb_state(wk, 3, (unsigned)k, sel, part);
  const unsigned T = sel[0];
  unsigned gt = 0u, eq = 0u;
  const int c = topk_mb_seg_entries(wk, seg_cap);
  if (c >= 0) {  // every key >= T of the slice is in its segment
    topk_mb_seg_rounds(topk_mb_segment(wk, seg_cap), c, [&](const unsigned*, const unsigned* key, const bool* in) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        gt += in[j] && key[j] > T;
        eq += in[j] && key[j] == T;
      }
    });
  } else {
    int lo, hi;
    topk_mb_slice(n, &lo, &hi);
    topk_mb_scan(s, lo, hi, [&](int, unsigned key) {
      gt += key > T;
      eq += key == T;
    });
  }
  gt = topk_mb_block_sum(gt, red[0]);
  eq = topk_mb_block_sum(eq, red[1]);
  if (t == 0) {
    wk[CSA_TK_COUNTS + 2 * blockIdx.x] = gt;
    wk[CSA_TK_COUNTS + 2 * blockIdx.x + 1] = eq;
  }
}

extern "C" __global__ void __launch_bounds__(256, 2) topk_mb_write(
    const float* __restrict__ scores, long long score_req_stride, int n, int k, const unsigned* work,
    long long work_req_stride, int seg_cap, int* __restrict__ out, long long out_req_stride) {
  __shared__ unsigned sel[3];
  __shared__ unsigned part[256];
  __shared__ unsigned base[2];  // ids chosen before this slice, equal keys before it
  __shared__ unsigned wsum[2][8];
  const float* s = scores + (long long)blockIdx.y * score_req_stride;
  const unsigned* wk = work + (long long)blockIdx.y * work_req_stride;
  int* o = out + (long long)blockIdx.y * out_req_stride;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  if ((int)blockDim.x != CSA_TK_WARPS * 32) __trap();  // the rounds' warp count
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
  const unsigned below = (1u << lane) - 1u;
  // one round of ids in ascending order (warp, lane, then j), from the slice or the segment
  auto round = [&](const unsigned* id, const unsigned* key, const bool* in) {
    unsigned bg[4], be[4], gw = 0u, ew = 0u;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      bg[j] = __ballot_sync(CSA_FULL_MASK, in[j] && key[j] > T);
      be[j] = __ballot_sync(CSA_FULL_MASK, in[j] && key[j] == T);
      gw += __popc(bg[j]);
      ew += __popc(be[j]);
    }
    if (lane == 0) {
      wsum[0][warp] = gw;
      wsum[1][warp] = ew;
    }
    __syncthreads();
    unsigned gbefore = 0u, ebefore = 0u, gall = 0u, eall = 0u;
#pragma unroll
    for (int w = 0; w < CSA_TK_WARPS; ++w) {
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
      if (g || (e && eq_rank < take)) o[pos + gbefore + min(eq_rank, take) - min(eqb, take)] = (int)id[j];
      gbefore += g;
      ebefore += e;
    }
    pos += gall + min(eqb + eall, take) - min(eqb, take);
    eqb += eall;
    __syncthreads();  // wsum is rewritten next round
  };
  const int c = topk_mb_seg_entries(wk, seg_cap);
  if (c >= 0) {
    topk_mb_seg_rounds(topk_mb_segment(wk, seg_cap), c, round);
  } else {
    int lo, hi;
    topk_mb_slice(n, &lo, &hi);
    topk_mb_rounds(s, lo, hi, round);
  }
}
