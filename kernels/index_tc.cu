// index_tc.cu — the lightning indexer's score scan on the tensor cores.
// score[c] = sum_h relu(q_h . k_c) * w_h over FP4 block-32 keys (68 B), as a GEMM of
// (heads x 128) by (128 x keys) with mma.sync m16n8k16 BF16, f32 accumulate.
//
// The query is staged once per block, rounded to BF16 (round to nearest even: the
// oracle's index_query does the same), into registers as A fragments for all heads (up to
// 64: four 16-head m-tiles). Keys stream through a 4-stage cp.async pipeline of 128-key
// tiles (three in flight; an aligned 16-byte superset of the tile's bytes; the last chunk is
// clipped at key n, so nothing past the last key is read). The K dimension is permuted so that
// lane t of a quad owns FP4 block t of its key: its B fragments are that block's 16 bytes,
// decoded a 32-bit word (8 codes) at a time by prmt lookups in the block scale's table of the
// eight scaled magnitudes (FP4 x E8M0 is exact in BF16), one 16-byte shared load from the 256
// tables the block builds once. The query's A fragments use the same permutation, so the dot
// products are unchanged. Epilogue: relu, times w_h, summed over heads in one FMA chain per key
// and across the 8 head groups by a transposing shuffle butterfly; lanes 0..15 store one score
// each per 64-key half.
// Fused top-k histogram (hist != null: the caller lends the multi-block top-k's work buffer,
// hist = each request's hist0, zeroed by the launcher): each stored score's first radix digit
// (the top 11 bits of csa_order_key, the key topk.cu ranks by) is counted in a shared
// histogram, merged into hist0 with one global atomic per non-empty bin when the block ends,
// so top-k skips its first pass over the scores. The scores are the same bits either way.
// Grid: (blocks over key tiles, requests); blockDim.x == 128.
#include "csa_common.cuh"
#include "csa_ptx.cuh"

#define CSA_IX_TILE 128  // keys per pipeline stage: 64-key halves, each warp two 8-key n-tiles of each
#define CSA_IX_KEY 68
#define CSA_IX_STAGES 4
#define CSA_IX_STAGE_BYTES (CSA_IX_TILE * CSA_IX_KEY + 16)  // + the superset's leading offset
#define CSA_IX_MAX_HEADS 64
#define CSA_IX_THREADS 128  // blockDim.x (the launcher's INDEX_TC_THREADS)
static_assert(CSA_IX_TILE * CSA_IX_KEY % 16 == 0, "a tile's first key keeps the request's offset from 16");

// The table of one E8M0 scale sc: BF16 bits of E2M1 magnitude c (0..7) times 2^(sc - 127),
// split into low bytes (lo0: c 0..3, lo1: c 4..7) and high bytes (hi0, hi1) for prmt lookups.
// Each entry through fp32, RNE to BF16 (exact for 2 <= sc <= 252; below, subnormal products
// flush under -ftz; above, infinities and NaN as in fp32). The block builds all 256 tables
// once into shared memory; a block of codes looks its scale's table up with one 16-byte load.
struct IndexTcTable {
  unsigned lo0, lo1, hi0, hi1;
};

__device__ __noinline__ IndexTcTable index_tc_table(unsigned sc) {
  IndexTcTable t = {0u, 0u, 0u, 0u};
  const float s = ldexpf(1.0f, (int)sc - 127);
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    const unsigned v = csa_bf16_bits(csa_e2m1_decode((unsigned)c) * s), sh = 8 * (c & 3);
    if (c < 4) {
      t.lo0 |= (v & 0xffu) << sh;
      t.hi0 |= (v >> 8) << sh;
    } else {
      t.lo1 |= (v & 0xffu) << sh;
      t.hi1 |= (v >> 8) << sh;
    }
  }
  return t;
}

// Eight FP4 codes (one 32-bit word, element 0 in the low nibble) to four BF16 pairs: b[0],
// b[1] codes 0..3, b[2], b[3] codes 4..7. The magnitudes (m = w & 0x7777_7777; prmt reads
// the low 16 bits of its selector) index the table; the signs: code 2i + 1's is the top bit
// of byte i of w, code 2i's that of byte i of w << 4; prmt in its sign-replicate mode
// spreads them over the bytes, one logic op puts them into the high bytes.
__device__ __forceinline__ void index_tc_word(unsigned w, const uint4& t, unsigned b[4]) {
  const unsigned m = w & 0x77777777u, mh = m >> 16, w4 = w << 4;
  const unsigned s0 = csa_prmt(w4, w, 0xD9C8u), s1 = csa_prmt(w4, w, 0xFBEAu);  // byte i: 0xff if negative
  const unsigned lo0 = __byte_perm(t.x, t.y, m), hi0 = __byte_perm(t.z, t.w, m) | (s0 & 0x80808080u);
  const unsigned lo1 = __byte_perm(t.x, t.y, mh), hi1 = __byte_perm(t.z, t.w, mh) | (s1 & 0x80808080u);
  b[0] = __byte_perm(lo0, hi0, 0x5140u);
  b[1] = __byte_perm(lo0, hi0, 0x7362u);
  b[2] = __byte_perm(lo1, hi1, 0x5140u);
  b[3] = __byte_perm(lo1, hi1, 0x7362u);
}

extern "C" __global__ void __launch_bounds__(128) index_tc_scores(
    const unsigned char* __restrict__ keys, long long key_req_stride, const float* __restrict__ q,
    const float* __restrict__ w, int heads, int n, float* __restrict__ scores, long long score_req_stride,
    unsigned* __restrict__ hist, long long hist_req_stride) {
  __shared__ __align__(16) unsigned char stage[CSA_IX_STAGES][CSA_IX_STAGE_BYTES];
  __shared__ uint4 tables[256];  // [E8M0 scale]: its IndexTcTable (read after the loop's first barrier)
  __shared__ unsigned khist[CSA_TK_BINS0];  // the fused histogram (hist != null)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gid = lane >> 2, tg = lane & 3;
  const int req = blockIdx.y;
  const unsigned char* kr = keys + (long long)req * key_req_stride;
  float* sr = scores + (long long)req * score_req_stride;

  // query A fragments: head 16*mt + gid (+8), permuted k: lane tg's block, dims 32*tg + 4*kk + {0,1} (+2)
  unsigned qf[4][8][4];
  float wv[4][2];
  {
    const float* qr = q + (long long)req * heads * 128;
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const int h = 16 * mt + gid + 8 * hi;
        wv[mt][hi] = h < heads ? w[(long long)req * heads + h] : 0.0f;
      }
#pragma unroll
      for (int kk = 0; kk < 8; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int h = 16 * mt + gid + ((r & 1) ? 8 : 0), d = 32 * tg + 4 * kk + ((r & 2) ? 2 : 0);
          float x0 = 0.0f, x1 = 0.0f;
          if (h < heads) {
            x0 = qr[h * 128 + d];
            x1 = qr[h * 128 + d + 1];
          }
          qf[mt][kk][r] = csa_bf16_bits(x0) | (csa_bf16_bits(x1) << 16);
        }
    }
  }

  for (int sc = tid; sc < 256; sc += blockDim.x) {
    const IndexTcTable t = index_tc_table((unsigned)sc);
    tables[sc] = make_uint4(t.lo0, t.lo1, t.hi0, t.hi1);
  }
  const bool fuse = hist != nullptr;  // uniform
  if (fuse)  // ordered before the first count by the loop's first barrier (or the final one)
    for (int i = tid; i < CSA_TK_BINS0; i += CSA_IX_THREADS) khist[i] = 0u;

  const int ntiles = (n + CSA_IX_TILE - 1) / CSA_IX_TILE;
  // 32-bit offsets within the request's keys (n * 68 < 2^31, the launcher checks); the aligned
  // superset is taken on absolute addresses: mis = the request base's offset from 16, the same
  // for every tile (a tile is 4352 = 272 x 16 bytes), so a tile's key 0 sits at byte mis of its
  // stage. Its at most 273 16-byte chunks go round the threads, the last one clipped at key n
  // by src-size (nothing past the last key is read).
  const int mis = (int)((unsigned long long)kr & 15ull), kbytes = n * CSA_IX_KEY;
  auto load_tile = [&](int i, int slot) {
    const int t = blockIdx.x + i * gridDim.x;
    if (t < ntiles) {
      const int first = t * (CSA_IX_TILE * CSA_IX_KEY), last = min(kbytes, first + CSA_IX_TILE * CSA_IX_KEY);
      const int a0 = first - mis, chunks = (last - a0 + 15) >> 4;
#pragma unroll 1
      for (int c = tid; c < chunks; c += CSA_IX_THREADS)
        csa_cp_async16(&stage[slot][16 * c], kr + (a0 + 16 * c), min(16, last - (a0 + 16 * c)));
    }
    csa_cp_async_commit();
  };

  const int my_tiles = ntiles > (int)blockIdx.x ? (ntiles - 1 - (int)blockIdx.x) / (int)gridDim.x + 1 : 0;
  for (int i = 0; i < CSA_IX_STAGES - 1; ++i) load_tile(i, i);

  for (int i = 0; i < my_tiles; ++i) {
    const int slot = i % CSA_IX_STAGES;
    csa_cp_async_wait<CSA_IX_STAGES - 2>();
    __syncthreads();
    load_tile(i + CSA_IX_STAGES - 1, (i + CSA_IX_STAGES - 1) % CSA_IX_STAGES);
    const int t = blockIdx.x + i * gridDim.x, key0 = t * CSA_IX_TILE;
    const unsigned char* tile = &stage[slot][mis];
#pragma unroll
    for (int half = 0; half < CSA_IX_TILE / 64; ++half) {
      float part[2][2];  // [sub][key 2*tg + i of the n-tile]: this lane's heads, summed
#pragma unroll
      for (int sub = 0; sub < 2; ++sub) {  // this warp's two 8-key n-tiles of this half
        const int nt = 8 * half + 2 * warp + sub, kl = 8 * nt + gid;  // this lane's key within the tile
        // the lane's 16 code bytes (its block's bytes 1..16) as four words, realigned by funnel
        // shifts of five aligned words; the block's scale byte picks its table
        const int a = (int)(tile - &stage[0][0]) + kl * CSA_IX_KEY + 17 * tg, c0 = a + 1, o = c0 & 3;
        const unsigned* wp = (const unsigned*)(&stage[0][0] + (c0 - o));
        const unsigned sh = 8u * (unsigned)o;
        const uint4 tab = tables[(&stage[0][0])[a]];
        unsigned b[8][2];
#pragma unroll
        for (int wi = 0; wi < 4; ++wi) {  // word wi: codes 8wi..8wi+7 = k-steps 2wi, 2wi + 1
          unsigned bw[4];
          index_tc_word(__funnelshift_r(wp[wi], wp[wi + 1], sh), tab, bw);
          b[2 * wi][0] = bw[0];
          b[2 * wi][1] = bw[1];
          b[2 * wi + 1][0] = bw[2];
          b[2 * wi + 1][1] = bw[3];
        }
        float d[4][4];  // all four m-tiles (heads past `heads` have q = 0, w = 0): independent chains
#pragma unroll
        for (int mt = 0; mt < 4; ++mt)
#pragma unroll
          for (int i = 0; i < 4; ++i) d[mt][i] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < 8; ++kk)
#pragma unroll
          for (int mt = 0; mt < 4; ++mt) csa_mma_bf16_16816(d[mt], qf[mt][kk], b[kk]);
        // relu, times w_h, summed over this lane's eight heads in one FMA chain per key
        part[sub][0] = fmaxf(d[0][0], 0.0f) * wv[0][0];
        part[sub][1] = fmaxf(d[0][1], 0.0f) * wv[0][0];
#pragma unroll
        for (int mt = 0; mt < 4; ++mt) {
          if (mt) {
            part[sub][0] = fmaf(fmaxf(d[mt][0], 0.0f), wv[mt][0], part[sub][0]);
            part[sub][1] = fmaf(fmaxf(d[mt][1], 0.0f), wv[mt][0], part[sub][1]);
          }
          part[sub][0] = fmaf(fmaxf(d[mt][2], 0.0f), wv[mt][1], part[sub][0]);
          part[sub][1] = fmaf(fmaxf(d[mt][3], 0.0f), wv[mt][1], part[sub][1]);
        }
      }
      // sum the four values over the 8 head groups (lane bits 2..4) by a transposing butterfly:
      // at xor 4 a lane keeps one sub's pair, at xor 8 one key of it, at xor 16 it completes;
      // lane bit 2 = sub, bit 3 = key, so lanes 0..15 hold the 16 scores of the warp's two n-tiles
      {
        const bool b2 = (lane >> 2) & 1, b3 = (lane >> 3) & 1;
        const float k0 = b2 ? part[1][0] : part[0][0], k1 = b2 ? part[1][1] : part[0][1];
        const float s0 = b2 ? part[0][0] : part[1][0], s1 = b2 ? part[0][1] : part[1][1];
        const float q0 = k0 + __shfl_xor_sync(CSA_FULL_MASK, s0, 4), q1 = k1 + __shfl_xor_sync(CSA_FULL_MASK, s1, 4);
        float r = (b3 ? q1 : q0) + __shfl_xor_sync(CSA_FULL_MASK, b3 ? q0 : q1, 8);
        r += __shfl_xor_sync(CSA_FULL_MASK, r, 16);
        const int c = key0 + 64 * half + 8 * (2 * warp + (int)b2) + 2 * tg + (int)b3;
        if (lane < 16 && c < n) {
          sr[c] = r;
          if (fuse) atomicAdd(&khist[csa_order_key(r) >> CSA_TK_SHIFT0], 1u);
        }
      }
    }
  }
  csa_cp_async_wait<0>();
  if (fuse) {
    __syncthreads();
    unsigned* gh = hist + (long long)req * hist_req_stride;
    for (int i = tid; i < CSA_TK_BINS0; i += CSA_IX_THREADS) {
      const unsigned v = khist[i];
      if (v) atomicAdd(&gh[i], v);
    }
  }
}
