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

// ---------------------------------------------------------------------------------------
// Multi-block radix select (topk_mb_*): B blocks per request (sized from the SM count by
// the launcher, tc_geometry.topk_blocks), each over a contiguous slice of the scores read
// with 16-byte loads where the slice start is 16-byte aligned. Three launches of
// topk_mb_hist histogram 11, 11 and 10 bits of the order keys (shared-memory histograms,
// merged into the request's global histogram with one atomic per non-empty bin); every
// block re-derives the selection so far (desired prefix, mask, keys still to take) from
// the earlier passes' histograms, so no launch is spent on a scan. topk_mb_count counts
// each slice's keys > T and == T (T the k-th largest key); topk_mb_write gives each block
// its output base from the earlier slices' counts and writes its chosen ids in ascending
// order: keys > T, and keys == T while fewer than `take` equal keys precede them (ties to
// the lower id), ranked within a block by warp ballots. The result equals topk_radix's
// (and oracle.topk_ids) for every input, NaN and -0 included (csa_order_key).
// Work (unsigned, per request; the launcher zeroes hist0, pass 0 zeroes hist1 and hist2):
// hist0[2048] hist1[2048] hist2[1024] counts[2 * B].
#define CSA_TK_H1 2048
#define CSA_TK_H2 4096
#define CSA_TK_COUNTS 5120

__device__ __forceinline__ int topk_mb_bits(int pass) { return pass < 2 ? 11 : 10; }
__device__ __forceinline__ int topk_mb_shift(int pass) { return pass == 0 ? 21 : (pass == 1 ? 10 : 0); }
__device__ __forceinline__ int topk_mb_hoff(int pass) { return pass == 0 ? 0 : (pass == 1 ? CSA_TK_H1 : CSA_TK_H2); }

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

extern "C" __global__ void __launch_bounds__(256) topk_mb_hist(
    const float* __restrict__ scores, long long score_req_stride, int n, int k, unsigned* work,
    long long work_req_stride, int pass) {
  __shared__ unsigned hist[2048];
  __shared__ unsigned sel[3];
  __shared__ unsigned part[256];
  const float* s = scores + (long long)blockIdx.y * score_req_stride;
  unsigned* wk = work + (long long)blockIdx.y * work_req_stride;
  const int t = threadIdx.x, nt = blockDim.x;
  const int nb = 1 << topk_mb_bits(pass), shift = topk_mb_shift(pass);
  for (int i = t; i < nb; i += nt) hist[i] = 0u;
  if (pass == 0)  // the next passes' histograms, zeroed here for the later launches
    for (int i = (int)blockIdx.x * nt + t; i < CSA_TK_COUNTS - CSA_TK_H1; i += (int)gridDim.x * nt)
      wk[CSA_TK_H1 + i] = 0u;
  topk_mb_state(wk, pass, (unsigned)k, sel, part);  // its barriers also order the zeroing of hist
  const unsigned desired = sel[0], mask = sel[1], dmask = (unsigned)(nb - 1);
  int lo, hi;
  topk_mb_slice(n, &lo, &hi);
  topk_mb_scan(s, lo, hi, [&](int, unsigned key) {
    if ((key & mask) == desired) atomicAdd(&hist[(key >> shift) & dmask], 1u);
  });
  __syncthreads();
  unsigned* gh = wk + topk_mb_hoff(pass);
  for (int i = t; i < nb; i += nt)
    if (hist[i]) atomicAdd(&gh[i], hist[i]);
}

extern "C" __global__ void __launch_bounds__(256) topk_mb_count(
    const float* __restrict__ scores, long long score_req_stride, int n, int k, unsigned* work,
    long long work_req_stride) {
  __shared__ unsigned sel[3];
  __shared__ unsigned part[256];
  __shared__ unsigned red[2][8];
  const float* s = scores + (long long)blockIdx.y * score_req_stride;
  unsigned* wk = work + (long long)blockIdx.y * work_req_stride;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  topk_mb_state(wk, 3, (unsigned)k, sel, part);
  const unsigned T = sel[0];
  int lo, hi;
  topk_mb_slice(n, &lo, &hi);
  unsigned gt = 0u, eq = 0u;
  topk_mb_scan(s, lo, hi, [&](int, unsigned key) {
    gt += key > T;
    eq += key == T;
  });
  for (int o = 16; o > 0; o >>= 1) {
    gt += __shfl_xor_sync(CSA_FULL_MASK, gt, o);
    eq += __shfl_xor_sync(CSA_FULL_MASK, eq, o);
  }
  if (lane == 0) {
    red[0][warp] = gt;
    red[1][warp] = eq;
  }
  __syncthreads();
  if (t == 0) {
    unsigned a = 0u, b = 0u;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w) {
      a += red[0][w];
      b += red[1][w];
    }
    wk[CSA_TK_COUNTS + 2 * blockIdx.x] = a;
    wk[CSA_TK_COUNTS + 2 * blockIdx.x + 1] = b;
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
  const int t = threadIdx.x, nt = blockDim.x, lane = t & 31, warp = t >> 5, nw = nt >> 5;
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
  const bool vec = (((unsigned long long)(s + lo)) & 15ull) == 0ull;
  // rounds of 4 * nt ids: thread t holds ids r + 4t .. r + 4t + 3 (id order is thread-major)
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
  }
}
