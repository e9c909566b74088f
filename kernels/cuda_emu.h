// cuda_emu.h — run plain CUDA C kernels on the CPU with g++ (tests without a GPU).
//
// Each CUDA thread of a block is a cooperative fiber (ucontext). Blocks run one after
// another. __syncthreads() and the warp intrinsics (__shfl_*_sync, __ballot_sync,
// __syncwarp) are barriers that switch fibers; the scheduler releases a barrier only
// when every live thread of the block (or warp) has reached it. A barrier reached by
// only part of a block (some threads exited, others wait), a shuffle reached by only
// part of a warp, or threads waiting at different barriers is reported as an error
// and the launch fails. __shared__ variables become function statics: one copy that
// every fiber of the running block shares (blocks run sequentially, so each block sees
// its own; the storage is not re-poisoned between blocks). Atomics are plain
// read-modify-writes: fibers never preempt each other between barriers.
//
// The kernel sources are included unchanged after this header; nothing in them is
// guarded for emulation. Only full-warp masks are emulated.
//
// Denormals: CuPy compiles every kernel with -ftz=true (single-precision denormal inputs
// and results are flushed to sign-preserving zero). A launch sets the SSE FTZ and DAZ
// bits for its duration (restored after) so float arithmetic here flushes the same way;
// emu::g().ftz = false (csa_emu_set_ftz(0)) turns that off.
// Tensor-core and asynchronous-copy primitives (the sm_80+/sm_89+ PTX the fast kernels use
// through csa_ptx.cuh) are emulated with their documented semantics:
// - csa_mma_bf16_16816 / csa_mma_e4m3_16832 are warp collectives (mma.sync.aligned
//   m16n8k16 .bf16 and m16n8k32 .e4m3, f32 accumulate): every lane of the warp must reach
//   the same mma, each contributes its A/B/C fragment registers in the PTX ISA layout
//   (groupID = lane>>2, threadID_in_group = lane&3), and each gets its D fragment back.
//   Products are exact; each lane's four D values are the C value plus the K products
//   summed in double and rounded once to float (the hardware's order is unspecified).
// - csa_cp_async16 (cp.async.cg 16 B, with the src-size zero-fill operand) requires both
//   addresses 16-byte aligned and copies nothing until the issuing thread waits: copies
//   join the thread's open group, csa_cp_async_commit closes it, csa_cp_async_wait<N>
//   completes all but the newest N committed groups. A read of the destination before the
//   wait (or, for another thread, before the wait and a barrier) sees the old bytes, so a
//   missing wait or barrier shows up as a wrong answer. Pending copies complete at exit.
// - mbarriers and bulk copies (csa_mbar_*, csa_bulk_g2s: mbarrier.init / arrive.expect_tx /
//   try_wait.parity and cp.async.bulk ... mbarrier::complete_tx::bytes): a bulk copy needs
//   16-byte aligned addresses and a size that is a multiple of 16, and lands only when its
//   barrier's phase completes, which happens at a wait once every expected arrival has come
//   and the bytes issued equal the expected tx-count (a mismatch fails the launch); a thread
//   waiting on a phase that cannot complete is a deadlock error. A read of the destination
//   before the wait sees the old bytes.
// - Dynamic shared memory (CSA_DYN_SMEM) is one buffer of the launch's size per block, filled
//   with 0xFF bytes (a NaN pattern) before every block (or cluster).
// - Thread block clusters (launch(..., cluster)): the blocks of one cluster run together, every
//   thread of every block a fiber; __syncthreads releases a block, csa_cluster_sync (barrier.
//   cluster arrive + wait) releases the cluster once every thread of every block has reached it
//   (a thread that exited instead is an error); csa_cluster_map(p, rank) turns a pointer into
//   this block's dynamic shared memory into the same offset in block `rank`'s (mapa), any other
//   pointer is an error; a block whose threads have all exited has its shared memory poisoned
//   again, so a peer reading it without a cluster barrier before that exit reads 0xFF bytes.
//   A kernel launched in clusters keeps all its shared memory dynamic: a
//   static __shared__ array would be one copy for the whole cluster.
// GPU numerics (CSA_EMU_GPU_NUMERICS=1: a second build, backends.build_emulator("gpu"), with
// -mfma -ffp-contract=fast so a * b + c contracts to one FMA as nvcc's default --fmad=true
// does): the departures from correctly rounded fp32 a GPU is allowed, so the tolerances can be
// checked against them instead of against the host's exact arithmetic —
// - mma: D = C + the K products summed exactly, rounded once toward zero (the tensor cores
//   truncate; an accumulation chain of them drifts toward zero);
// - ex2.approx (csa_ex2) and expf, sinf, cosf, rsqrtf (CUDA documents up to 2 ulp for each;
//   under -ftz ex2/rsqrt are the MUFU results): the correctly rounded value moved by -2..+2
//   ulp, the step a deterministic hash of the argument's bits and the function (the same
//   input gives the same output, so a second launch stays bit-identical).
#pragma once
#ifndef __CUDACC__

#include <sys/mman.h>
#include <ucontext.h>
#if defined(__SSE__) || defined(__x86_64__)
#include <xmmintrin.h>
#define CSA_EMU_HAVE_MXCSR 1
#endif

#include <math.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

struct uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
struct alignas(8) float2 {
  float x, y;
};
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __shared__ static
#define __launch_bounds__(...)
#define warpSize 32

namespace emu {

enum class St { Ready, AtBlock, AtWarp, AtMbar, AtCluster, Done };
enum class Xmode { Shfl, Ballot, Coll };

struct AsyncCopy {
  void* dst;
  const void* src;
  int bytes, src_bytes;
};

// A warp collective: every lane passes a pointer to its operands; fn gets all 32.
typedef void (*CollectiveFn)(void* const* lanes);

struct Fiber {
  ucontext_t ctx;
  dim3 tid, bidx;  // threadIdx, blockIdx
  int linear = 0, lane = 0, warp = 0, rank = 0;  // rank: the block's place in its cluster
  St state = St::Ready;
  Xmode mode = Xmode::Shfl;
  uint64_t xval = 0, result = 0;
  int src = 0;
  unsigned mask = 0;
  CollectiveFn coll = nullptr;
  void* coll_arg = nullptr;
  std::vector<AsyncCopy> open_copies;
  std::vector<std::vector<AsyncCopy>> groups;
  const void* mbar = nullptr;  // the barrier this fiber waits on (St::AtMbar) ...
  unsigned mbar_parity = 0;    // ... for the phase of this parity to complete
};

struct Mbar {
  int count = 0, pending = 0;
  long long tx = 0, issued = 0;
  unsigned phase = 0;  // completed phases
  std::vector<AsyncCopy> copies;
};

struct Grid {
  dim3 grid, block, block_idx;  // block_idx: the running cluster's first block (for messages)
  dim3 cluster;                  // blocks per cluster (1, 1, 1 without clusters)
  int csize = 1;
  std::vector<Fiber> fibers;     // csize x threads per block, block by block
  char* stacks = nullptr;        // anonymous mapping: a fiber's untouched stack costs nothing
  size_t stacks_bytes = 0;
  size_t stack_bytes = 256 * 1024;
  ucontext_t sched;
  Fiber* cur = nullptr;
  std::function<void()> body;
  std::string error;
  long long barriers = 0;
  bool ftz = true;  // emulate -ftz=true (see the header comment)
  std::vector<unsigned char> dyn_smem;  // csize x dyn_stride: block `rank`'s dyn_bytes at rank x dyn_stride
  size_t dyn_bytes = 0, dyn_stride = 0;  // the stride keeps every block's buffer 128-byte aligned
  long long collectives = 0, async_copies = 0;
  std::map<const void*, Mbar> mbars;  // this block's mbarriers, by address
};

inline Grid& g() {
  static Grid G;
  return G;
}
inline Fiber* cur() { return g().cur; }
inline std::string& last_error() {
  static std::string e;
  return e;
}

// Called from inside a fiber: record the problem and return control to the scheduler.
inline void fail(const std::string& msg) {
  Grid& G = g();
  if (G.error.empty()) G.error = msg;
  Fiber* f = G.cur;
  f->state = St::Done;
  swapcontext(&f->ctx, &G.sched);
  std::abort();  // never resumed
}

inline void block_sync() {
  Grid& G = g();
  Fiber* f = G.cur;
  f->state = St::AtBlock;
  swapcontext(&f->ctx, &G.sched);
}

inline uint64_t warp_exchange(unsigned mask, Xmode mode, uint64_t val, int src) {
  Grid& G = g();
  Fiber* f = G.cur;
  if (mask != 0xffffffffu) fail("partial-warp masks are not emulated (mask must be 0xffffffff)");
  f->mode = mode;
  f->xval = val;
  f->src = src;
  f->mask = mask;
  f->state = St::AtWarp;
  swapcontext(&f->ctx, &G.sched);
  return f->result;
}

inline void complete_group(std::vector<AsyncCopy>& grp) {
  for (const AsyncCopy& c : grp) {
    std::memcpy(c.dst, c.src, (size_t)c.src_bytes);
    if (c.bytes > c.src_bytes) std::memset((char*)c.dst + c.src_bytes, 0, (size_t)(c.bytes - c.src_bytes));
  }
  grp.clear();
}

inline void trampoline() {
  Grid& G = g();
  G.body();
  for (auto& grp : G.cur->groups) complete_group(grp);
  complete_group(G.cur->open_copies);
  G.cur->groups.clear();
  G.cur->state = St::Done;
  swapcontext(&G.cur->ctx, &G.sched);
}

inline std::string where(const Grid& G) {
  char b[96];
  std::snprintf(b, sizeof b, G.csize > 1 ? " (cluster at block %u,%u,%u)" : " (block %u,%u,%u)", G.block_idx.x,
                G.block_idx.y, G.block_idx.z);
  return b;
}

// Release the warps whose live lanes all wait at a warp barrier; false if none could go.
// Block b of the cluster holds fibers [b * nthreads, (b + 1) * nthreads).
inline bool release_warps(Grid& G, int nthreads) {
  bool progress = false;
  for (int b0 = 0; b0 < G.csize * nthreads; b0 += nthreads)
  for (int w0 = b0; w0 < b0 + nthreads; w0 += 32) {
    int w1 = w0 + 32 < b0 + nthreads ? w0 + 32 : b0 + nthreads;
    int at = 0, done = 0;
    for (int i = w0; i < w1; ++i) {
      at += G.fibers[i].state == St::AtWarp;
      done += G.fibers[i].state == St::Done;
    }
    if (at == 0) continue;
    if (at + done == w1 - w0 && done > 0) {
      G.error = "warp shuffle reached by only part of a warp: " + std::to_string(at) + " lanes wait, " +
                std::to_string(done) + " exited" + where(G);
      return false;
    }
    if (at != w1 - w0) continue;
    bool any_coll = false;
    for (int i = w0; i < w1; ++i) any_coll = any_coll || G.fibers[i].mode == Xmode::Coll;
    if (any_coll) {
      void* args[32] = {};
      for (int i = w0; i < w1; ++i) {
        if (G.fibers[i].mode != Xmode::Coll || G.fibers[i].coll != G.fibers[w0].coll) {
          G.error = "warp collective (mma) reached by some lanes while others wait at a different warp op" + where(G);
          return false;
        }
        args[i - w0] = G.fibers[i].coll_arg;
      }
      if (w1 - w0 != 32) {
        G.error = "warp collective (mma) needs a full warp of 32 lanes" + where(G);
        return false;
      }
      G.fibers[w0].coll(args);
      if (!G.error.empty()) {
        G.error += where(G);
        return false;
      }
      ++G.collectives;
      for (int i = w0; i < w1; ++i) G.fibers[i].state = St::Ready;
      progress = true;
      continue;
    }
    uint64_t ballot = 0;
    for (int i = w0; i < w1; ++i)
      if (G.fibers[i].xval) ballot |= 1ull << (i - w0);
    for (int i = w0; i < w1; ++i) {
      Fiber& f = G.fibers[i];
      if (f.mode == Xmode::Ballot) {
        f.result = ballot;
      } else {
        int s = w0 + f.src;
        f.result = (f.src >= 0 && s < w1) ? G.fibers[s].xval : f.xval;
      }
      f.state = St::Ready;
    }
    progress = true;
  }
  return progress;
}

inline void warp_collective(CollectiveFn fn, void* arg) {
  Grid& G = g();
  Fiber* f = G.cur;
  f->mode = Xmode::Coll;
  f->coll = fn;
  f->coll_arg = arg;
  f->state = St::AtWarp;
  swapcontext(&f->ctx, &G.sched);
  f->mode = Xmode::Shfl;
}

// Complete the barrier's current phase if every arrival came and every expected byte was
// issued (its copies land now); true if a phase completed.
inline bool mbar_try_complete(Grid& G, Mbar& b) {
  if (b.count == 0 || b.pending > 0 || b.issued < b.tx) return false;
  if (b.issued > b.tx) {
    G.error = "mbarrier: bulk copies of more bytes than arrive.expect_tx announced";
    return false;
  }
  for (const AsyncCopy& c : b.copies) std::memcpy(c.dst, c.src, (size_t)c.bytes);
  b.copies.clear();
  b.tx = b.issued = 0;
  b.pending = b.count;
  ++b.phase;
  return true;
}

// Fibers waiting on an mbarrier phase that has completed (or now completes) go on.
inline bool release_mbar_waiters(Grid& G, int nfibers) {
  bool progress = false;
  for (int i = 0; i < nfibers; ++i) {
    Fiber& f = G.fibers[i];
    if (f.state != St::AtMbar) continue;
    Mbar& b = G.mbars[f.mbar];
    if ((b.phase & 1u) == f.mbar_parity) mbar_try_complete(G, b);
    if (!G.error.empty()) return false;
    if ((b.phase & 1u) != f.mbar_parity) {
      f.state = St::Ready;
      progress = true;
    }
  }
  return progress;
}

// Run the blocks of one cluster (one block without clusters) from `base`, together.
inline int run_cluster(Grid& G, int nthreads, dim3 base) {
  const int nf = G.csize * nthreads;
  if (!G.dyn_smem.empty()) std::memset(G.dyn_smem.data(), 0xFF, G.dyn_smem.size());
  G.mbars.clear();
  for (int i = 0; i < nf; ++i) {
    Fiber& f = G.fibers[i];
    const int r = i / nthreads, t = i % nthreads;
    f.open_copies.clear();
    f.groups.clear();
    f.rank = r;
    f.bidx = dim3(base.x + r % G.cluster.x, base.y + (r / G.cluster.x) % G.cluster.y,
                  base.z + r / (G.cluster.x * G.cluster.y));
    f.linear = t;
    f.tid = dim3(t % G.block.x, (t / G.block.x) % G.block.y, t / (G.block.x * G.block.y));
    f.lane = t % 32;
    f.warp = t / 32;
    f.state = St::Ready;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = G.stacks + (size_t)i * G.stack_bytes;
    f.ctx.uc_stack.ss_size = G.stack_bytes;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, (void (*)())trampoline, 0);
  }
  auto count = [&](int lo, int hi, St st) {
    int n = 0;
    for (int i = lo; i < hi; ++i) n += G.fibers[i].state == st;
    return n;
  };
  std::vector<int> exited(G.csize, 0);  // threads of each block that have exited
  for (;;) {
    for (int i = 0; i < nf; ++i) {
      Fiber& f = G.fibers[i];
      if (f.state != St::Ready) continue;
      G.cur = &f;
      swapcontext(&G.sched, &f.ctx);
      if (!G.error.empty()) return -1;
      // a block whose threads have all exited loses its shared memory at once: a cluster peer
      // that still reads it (no cluster barrier before the exit) reads 0xFF bytes
      if (f.state == St::Done && ++exited[f.rank] == nthreads && G.csize > 1)
        std::memset(G.dyn_smem.data() + (size_t)f.rank * G.dyn_stride, 0xFF, G.dyn_bytes);
    }
    const int done = count(0, nf, St::Done);
    if (done == nf) return 0;
    if (release_warps(G, nthreads)) continue;
    if (!G.error.empty()) return -1;
    if (release_mbar_waiters(G, nf)) continue;
    if (!G.error.empty()) {
      G.error += where(G);
      return -1;
    }
    bool released = false;
    for (int b0 = 0; b0 < nf; b0 += nthreads) {
      const int at_block = count(b0, b0 + nthreads, St::AtBlock), done_b = count(b0, b0 + nthreads, St::Done);
      if (at_block == nthreads) {
        ++G.barriers;
        for (int i = b0; i < b0 + nthreads; ++i) G.fibers[i].state = St::Ready;
        released = true;
      } else if (at_block > 0 && at_block + done_b == nthreads) {
        G.error = "barrier reached by only part of a block: " + std::to_string(at_block) + " of " +
                  std::to_string(nthreads) + " threads wait at __syncthreads, " + std::to_string(done_b) +
                  " exited" + where(G);
        return -1;
      }
    }
    if (released) continue;
    const int at_cluster = count(0, nf, St::AtCluster);
    if (at_cluster == nf) {
      ++G.barriers;
      for (int i = 0; i < nf; ++i) G.fibers[i].state = St::Ready;
      continue;
    }
    if (at_cluster > 0 && at_cluster + done == nf) {
      G.error = "cluster barrier reached by only part of a cluster: " + std::to_string(at_cluster) + " of " +
                std::to_string(nf) + " threads wait, " + std::to_string(done) + " exited" + where(G);
    } else {
      const int at_mbar = count(0, nf, St::AtMbar);
      G.error = at_mbar ? "deadlock: " + std::to_string(at_mbar) +
                              " threads wait on an mbarrier phase that cannot complete (arrivals or bytes missing)" +
                              where(G)
                        : "deadlock: threads wait at different barriers (divergent __syncthreads, cluster barrier "
                          "or shuffle)" + where(G);
    }
    return -1;
  }
}

// Run body() as a grid (of clusters of `cluster` blocks); returns 0, or -1 with last_error() set.
inline int launch(dim3 grid, dim3 block, std::function<void()> body, size_t dyn_smem_bytes = 0,
                  dim3 cluster = dim3(1, 1, 1)) {
  Grid& G = g();
  const int csize = (int)(cluster.x * cluster.y * cluster.z);
  if (csize < 1 || csize > 8 || grid.x % cluster.x || grid.y % cluster.y || grid.z % cluster.z) {
    last_error() = "invalid cluster " + std::to_string(cluster.x) + "x" + std::to_string(cluster.y) + "x" +
                   std::to_string(cluster.z) + " for the grid (at most 8 blocks, each grid dimension a multiple)";
    return -1;
  }
  if (dyn_smem_bytes > 227 * 1024) {
    last_error() = "dynamic shared memory " + std::to_string(dyn_smem_bytes) + " B exceeds sm_90's 227 KB";
    return -1;
  }
  G.dyn_bytes = dyn_smem_bytes;
  G.dyn_stride = (dyn_smem_bytes + 127) & ~(size_t)127;
  G.dyn_smem.assign(G.dyn_stride * (size_t)csize, 0xFF);
  int nthreads = (int)(block.x * block.y * block.z);
  if (nthreads <= 0 || nthreads > 1024) {
    last_error() = "invalid block size " + std::to_string(nthreads);
    return -1;
  }
  G.grid = grid;
  G.block = block;
  G.cluster = cluster;
  G.csize = csize;
  G.body = std::move(body);
#ifdef CSA_EMU_HAVE_MXCSR
  struct Csr {  // FTZ (bit 15) and DAZ (bit 6) for the launch; fibers inherit it via getcontext
    unsigned saved;
    explicit Csr(bool on) : saved(_mm_getcsr()) {
      if (on) _mm_setcsr(saved | 0x8040u);
    }
    ~Csr() { _mm_setcsr(saved); }
  } csr(G.ftz);
#endif
  G.error.clear();
  G.fibers.assign((size_t)csize * nthreads, Fiber());
  const size_t need = (size_t)csize * nthreads * G.stack_bytes;
  if (G.stacks_bytes < need) {
    if (G.stacks) munmap(G.stacks, G.stacks_bytes);
    void* m = mmap(nullptr, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      G.stacks = nullptr;
      G.stacks_bytes = 0;
      last_error() = "cannot map " + std::to_string(need) + " B of fiber stacks";
      return -1;
    }
    G.stacks = (char*)m;
    G.stacks_bytes = need;
  }
  for (unsigned z = 0; z < grid.z; z += cluster.z)
    for (unsigned y = 0; y < grid.y; y += cluster.y)
      for (unsigned x = 0; x < grid.x; x += cluster.x) {
        G.block_idx = dim3(x, y, z);
        if (run_cluster(G, nthreads, dim3(x, y, z)) != 0) {
          last_error() = G.error;
          G.cur = nullptr;
          return -1;
        }
      }
  G.cur = nullptr;
  last_error().clear();
  return 0;
}

template <class T>
inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}
template <class T>
inline T from_bits(uint64_t u) {
  T v;
  std::memcpy(&v, &u, sizeof(T));
  return v;
}

// --- tensor cores: mma.sync.aligned fragments (PTX ISA "Matrix fragments for mma.m16n8k16"
// with .bf16 and "mma.m16n8k32" with .e4m3); groupID g = lane >> 2, thread-in-group t = lane & 3.
struct MmaLane {
  float* d;
  const unsigned* a;
  const unsigned* b;
  const float* c;
};

inline float bf16_value(unsigned bits16) {
  unsigned u = (bits16 & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float e4m3_value(unsigned c) {  // E4M3FN: no infinities, S.1111.111 is NaN
  c &= 0xffu;
  if ((c & 0x7fu) == 0x7fu) return NAN;
  unsigned e = (c >> 3) & 15u, m = c & 7u;
  float v = e == 0 ? (float)m * 0.001953125f : std::ldexp(1.0f + (float)m * 0.125f, (int)e - 7);
  return (c & 0x80u) ? -v : v;
}

// The mma's one rounding of the exact sum: to nearest, or under GPU numerics toward zero.
inline float mma_round(double v) {
  float f = (float)v;
#if CSA_EMU_GPU_NUMERICS
  if (std::isfinite(f) && std::fabs((double)f) > std::fabs(v)) f = std::nextafter(f, 0.0f);
#endif
  return f;
}

// GPU numerics: r moved by -2..+2 ulp (in magnitude, never across zero or to infinity), the step
// from a hash of x's bits and fn; the identity otherwise.
inline float ulp_jitter(float r, float x, unsigned fn) {
#if CSA_EMU_GPU_NUMERICS
  if (!std::isfinite(r) || r == 0.0f) return r;
  unsigned h, u;
  std::memcpy(&h, &x, 4);
  h = h * 0x9E3779B1u ^ (fn + 1u) * 0x85EBCA77u;
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 12;
  const int k = (int)(h % 5u) - 2;
  std::memcpy(&u, &r, 4);
  long long m = (long long)(u & 0x7fffffffu) + k;
  m = m < 1 ? 1 : (m > 0x7f7fffffLL ? 0x7f7fffffLL : m);
  u = (u & 0x80000000u) | (unsigned)m;
  std::memcpy(&r, &u, 4);
#else
  (void)x;
  (void)fn;
#endif
  return r;
}

// A 16xK row-major, B Kx8 column-major, C/D 16x8 f32: element getters per the fragment layouts.
template <int K, float (*A)(void* const*, int, int), float (*B)(void* const*, int, int)>
inline void mma_run(void* const* lanes) {
  float out[32][4];
  for (int lane = 0; lane < 32; ++lane) {
    const MmaLane* L = (const MmaLane*)lanes[lane];
    int gid = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; ++i) {
      int row = gid + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
      double acc = 0.0;
      for (int k = 0; k < K; ++k) acc += (double)A(lanes, row, k) * (double)B(lanes, k, col);
      out[lane][i] = mma_round(acc + (double)L->c[i]);
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    const MmaLane* L = (const MmaLane*)lanes[lane];
    for (int i = 0; i < 4; ++i) L->d[i] = out[lane][i];
  }
}

// m16n8k16 .bf16: A regs a0..a3 hold pairs (row g | g+8, col 2t+{0,1} | +8); B regs b0,b1 hold
// (row 2t+{0,1} | +8, col g). The lower half of a register is the lower column / row index.
inline float a_bf16(void* const* lanes, int row, int k) {
  int gid = row & 7, t = (k & 7) >> 1, reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
  unsigned r = ((const MmaLane*)lanes[gid * 4 + t])->a[reg];
  return bf16_value((k & 1) ? r >> 16 : r);
}
inline float b_bf16(void* const* lanes, int k, int col) {
  int t = (k & 7) >> 1, reg = k >= 8 ? 1 : 0;
  unsigned r = ((const MmaLane*)lanes[col * 4 + t])->b[reg];
  return bf16_value((k & 1) ? r >> 16 : r);
}
// m16n8k32 .e4m3: A regs a0..a3 hold 4 bytes each (row g | g+8, col 4t+{0..3} | +16); B regs
// b0,b1 hold 4 bytes (row 4t+{0..3} | +16, col g). Byte i of a register is element i.
inline float a_e4m3(void* const* lanes, int row, int k) {
  int gid = row & 7, t = (k & 15) >> 2, reg = (row >= 8 ? 1 : 0) + (k >= 16 ? 2 : 0);
  unsigned r = ((const MmaLane*)lanes[gid * 4 + t])->a[reg];
  return e4m3_value(r >> (8 * (k & 3)));
}
inline float b_e4m3(void* const* lanes, int k, int col) {
  int t = (k & 15) >> 2, reg = k >= 16 ? 1 : 0;
  unsigned r = ((const MmaLane*)lanes[col * 4 + t])->b[reg];
  return e4m3_value(r >> (8 * (k & 3)));
}

inline void cp_async(void* dst, const void* src, int bytes, int src_bytes) {
  Fiber* f = cur();
  if (((uintptr_t)dst & 15u) || ((uintptr_t)src & 15u)) {
    char b[128];
    std::snprintf(b, sizeof b, "cp.async 16 B with a misaligned address (shared %p, global %p)", dst, src);
    fail(b);
  }
  if (src_bytes < 0 || src_bytes > bytes) fail("cp.async src-size outside 0..16");
  f->open_copies.push_back(AsyncCopy{dst, src, bytes, src_bytes});
  ++g().async_copies;
}

// ldmatrix .x4 (.trans): lane l supplies row l % 8 of matrix l / 8.
struct LdmLane {
  const unsigned short* row;
  unsigned* r;
};
template <bool Trans>
inline void ldmatrix_run(void* const* lanes) {
  for (int i = 0; i < 32; ++i)
    if ((uintptr_t)((const LdmLane*)lanes[i])->row & 15u) {
      g().error = "ldmatrix with a row address that is not 16-byte aligned";
      return;
    }
  unsigned out[32][4];
  for (int l = 0; l < 32; ++l)
    for (int m = 0; m < 4; ++m) {
      const unsigned short* rows[8];
      for (int r = 0; r < 8; ++r) rows[r] = ((const LdmLane*)lanes[8 * m + r])->row;
      unsigned lo, hi;
      if (Trans) {
        lo = rows[2 * (l & 3)][l >> 2];
        hi = rows[2 * (l & 3) + 1][l >> 2];
      } else {
        lo = rows[l >> 2][2 * (l & 3)];
        hi = rows[l >> 2][2 * (l & 3) + 1];
      }
      out[l][m] = lo | (hi << 16);
    }
  for (int l = 0; l < 32; ++l)
    for (int m = 0; m < 4; ++m) ((const LdmLane*)lanes[l])->r[m] = out[l][m];
}

}  // namespace emu

inline void csa_ldmatrix_x4(unsigned r[4], const void* row) {
  emu::LdmLane L{(const unsigned short*)row, r};
  emu::warp_collective(emu::ldmatrix_run<false>, &L);
}
inline void csa_ldmatrix_x4_trans(unsigned r[4], const void* row) {
  emu::LdmLane L{(const unsigned short*)row, r};
  emu::warp_collective(emu::ldmatrix_run<true>, &L);
}
// Shared-window addresses are plain pointers here (csa_saddr arithmetic is in bytes).
typedef const char* csa_saddr;
inline csa_saddr csa_smem_addr(const void* p) { return (csa_saddr)p; }
inline void csa_ldsm_x4(unsigned r[4], csa_saddr a) { csa_ldmatrix_x4(r, a); }
inline void csa_ldsm_x4_trans(unsigned r[4], csa_saddr a) { csa_ldmatrix_x4_trans(r, a); }
inline float csa_ex2(float x) { return emu::ulp_jitter(exp2f(x), x, 0); }
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
  return (unsigned)((((uint64_t)hi << 32) | lo) >> (shift & 31u));
}

// The csa_ptx.cuh primitives, emulated (same names and arguments as the device versions).
inline void csa_mma_bf16_16816(float d[4], const unsigned a[4], const unsigned b[2]) {
  float c[4] = {d[0], d[1], d[2], d[3]};
  emu::MmaLane L{d, a, b, c};
  emu::warp_collective(emu::mma_run<16, emu::a_bf16, emu::b_bf16>, &L);
}
inline void csa_mma_e4m3_16832(float d[4], const unsigned a[4], const unsigned b[2]) {
  float c[4] = {d[0], d[1], d[2], d[3]};
  emu::MmaLane L{d, a, b, c};
  emu::warp_collective(emu::mma_run<32, emu::a_e4m3, emu::b_e4m3>, &L);
}
inline void csa_cp_async16(void* smem, const void* gmem, int src_bytes) { emu::cp_async(smem, gmem, 16, src_bytes); }
inline void csa_cp_async_commit() {
  emu::Fiber* f = emu::cur();
  f->groups.push_back(std::move(f->open_copies));
  f->open_copies.clear();
}
template <int N>
inline void csa_cp_async_wait() {
  emu::Fiber* f = emu::cur();
  while ((int)f->groups.size() > N) {
    emu::complete_group(f->groups.front());
    f->groups.erase(f->groups.begin());
  }
}
// mbarriers and bulk copies (see the header comment).
inline void csa_mbar_init(unsigned long long* bar, unsigned count) {
  emu::Mbar& b = emu::g().mbars[bar];
  b = emu::Mbar{};
  b.count = b.pending = (int)count;
}
inline void csa_fence_mbar_init() {}
inline void csa_fence_proxy_async() {}
inline void csa_mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
  auto it = emu::g().mbars.find(bar);
  if (it == emu::g().mbars.end() || it->second.count == 0) emu::fail("mbarrier arrive on an uninitialized barrier");
  if (it->second.pending <= 0) emu::fail("mbarrier: more arrivals than its count in one phase");
  it->second.tx += bytes;
  --it->second.pending;
}
inline void csa_bulk_g2s(void* smem, const void* gmem, unsigned bytes, unsigned long long* bar) {
  if (((uintptr_t)smem & 15u) || ((uintptr_t)gmem & 15u) || (bytes & 15u) || bytes == 0)
    emu::fail("cp.async.bulk needs 16-byte aligned addresses and a nonzero multiple of 16 bytes");
  auto it = emu::g().mbars.find(bar);
  if (it == emu::g().mbars.end() || it->second.count == 0) emu::fail("cp.async.bulk on an uninitialized mbarrier");
  it->second.copies.push_back(emu::AsyncCopy{smem, gmem, (int)bytes, (int)bytes});
  it->second.issued += bytes;
  ++emu::g().async_copies;
}
inline void csa_mbar_wait(unsigned long long* bar, unsigned parity) {
  emu::Grid& G = emu::g();
  auto it = G.mbars.find(bar);
  if (it == G.mbars.end() || it->second.count == 0) emu::fail("mbarrier wait on an uninitialized barrier");
  if ((it->second.phase & 1u) != (parity & 1u)) return;  // that phase completed
  emu::Fiber* f = G.cur;
  f->mbar = bar;
  f->mbar_parity = parity & 1u;
  f->state = emu::St::AtMbar;
  swapcontext(&f->ctx, &G.sched);
}

// Thread block clusters (see the header comment): barrier.cluster arrive + wait, the block's
// rank (%cluster_ctarank) and mapa of a pointer into this block's dynamic shared memory.
inline void csa_cluster_sync() {
  emu::Grid& G = emu::g();
  emu::Fiber* f = G.cur;
  f->state = emu::St::AtCluster;
  swapcontext(&f->ctx, &G.sched);
}
inline unsigned csa_cluster_rank() { return (unsigned)emu::cur()->rank; }
inline unsigned csa_dynamic_smem_bytes() { return (unsigned)emu::g().dyn_bytes; }
template <class T>
inline T* csa_cluster_map(T* p, unsigned rank) {
  emu::Grid& G = emu::g();
  unsigned char* own = G.dyn_smem.data() + (size_t)emu::cur()->rank * G.dyn_stride;
  const unsigned char* c = (const unsigned char*)p;
  if (c < own || c >= own + G.dyn_bytes) emu::fail("mapa: the pointer is not in this block's dynamic shared memory");
  if ((int)rank >= G.csize) emu::fail("mapa: rank " + std::to_string(rank) + " is outside the cluster");
  return (T*)(G.dyn_smem.data() + (size_t)rank * G.dyn_stride + (c - own));
}

// E4M3 pair (low byte first) to two floats, as cvt.rn.f16x2.e4m3x2 then f16 -> f32.
inline void csa_e4m3x2_to_float2(unsigned pair, float* lo, float* hi) {
  *lo = emu::e4m3_value(pair);
  *hi = emu::e4m3_value(pair >> 8);
}
// Two floats to packed BF16 (round to nearest even, low half = lo), as cvt.rn.bf16x2.f32.
inline unsigned csa_pack_bf16x2(float lo, float hi) {
  auto rn = [](float x) {
    unsigned u;
    std::memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;  // NaN stays NaN
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  };
  return rn(lo) | (rn(hi) << 16);
}
// prmt.b32 (default mode), as csa_prmt in csa_ptx.cuh: selector bit 3 replicates the sign.
inline unsigned csa_prmt(unsigned a, unsigned b, unsigned sel) {
  uint64_t v = ((uint64_t)b << 32) | a;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) {
    unsigned nib = (sel >> (4 * i)) & 15u, byte = (unsigned)(v >> (8 * (nib & 7u))) & 0xffu;
    if (nib & 8u) byte = (byte & 0x80u) ? 0xffu : 0u;
    r |= byte << (8 * i);
  }
  return r;
}
namespace emu {
// BF16 <-> double by integer arithmetic, so the launch's FTZ/DAZ mode cannot flush a BF16
// subnormal (every BF16 value is a normal double; a product of two is exact in double).
inline double bf16_to_double(unsigned h) {
  unsigned e = (h >> 7) & 0xffu, m = h & 0x7fu;
  double v = e == 0xffu ? (m ? NAN : INFINITY)
                        : (e == 0 ? std::ldexp((double)m, -133) : std::ldexp((double)(m | 0x80u), (int)e - 134));
  return (h & 0x8000u) ? -v : v;
}
inline unsigned double_to_bf16(double x) {
  if (std::isnan(x)) return 0x7fc0u;
  unsigned sign = std::signbit(x) ? 0x8000u : 0u;
  double a = std::fabs(x);
  if (a == 0.0) return sign;
  if (std::isinf(a)) return sign | 0x7f80u;
  int e;
  std::frexp(a, &e);
  int u = e - 1;  // a = 1.f x 2^u
  if (u < -126) u = -126;  // subnormal: quantum 2^-133
  double r = std::nearbyint(std::ldexp(a, 7 - u));  // significand in units of the quantum, ties to even
  if (r >= 256.0) {
    r /= 2.0;  // exactly 256 after rounding up: one binade up
    ++u;
  }
  if (u > 127) return sign | 0x7f80u;
  unsigned bits = r >= 128.0 ? ((unsigned)(u + 127) << 7) | ((unsigned)r - 128u) : (unsigned)r;
  return sign | bits;
}
}  // namespace emu
// max.xorsign.abs.bf16x2, as csa_hmax2_abs_bf16: per half the larger magnitude (BF16
// magnitudes order as integers), the sign the XOR of the inputs'; one NaN input gives the
// other operand, two give the canonical NaN.
inline unsigned csa_hmax2_abs_bf16(unsigned a, unsigned b) {
  unsigned out = 0;
  for (int h = 0; h < 2; ++h) {
    unsigned x = (a >> (16 * h)) & 0xffffu, y = (b >> (16 * h)) & 0xffffu, r;
    bool xn = (x & 0x7fffu) > 0x7f80u, yn = (y & 0x7fffu) > 0x7f80u;
    if (xn && yn) r = 0x7fffu;
    else if (xn) r = y;
    else if (yn) r = x;
    else r = ((x & 0x7fffu) > (y & 0x7fffu) ? (x & 0x7fffu) : (y & 0x7fffu)) | ((x ^ y) & 0x8000u);
    out |= r << (16 * h);
  }
  return out;
}
// mul.rn.bf16x2, as csa_hmul2_bf16 in csa_ptx.cuh.
inline unsigned csa_hmul2_bf16(unsigned a, unsigned b) {
  unsigned lo = emu::double_to_bf16(emu::bf16_to_double(a & 0xffffu) * emu::bf16_to_double(b & 0xffffu));
  unsigned hi = emu::double_to_bf16(emu::bf16_to_double(a >> 16) * emu::bf16_to_double(b >> 16));
  return lo | (hi << 16);
}
#define CSA_DYN_SMEM(T, name) \
  T* name = (T*)(emu::g().dyn_smem.data() + (size_t)emu::cur()->rank * emu::g().dyn_stride)
#define __cluster_dims__(...)
#define __align__(n) __attribute__((aligned(n)))

#define threadIdx (emu::cur()->tid)
#define blockIdx (emu::cur()->bidx)
#define blockDim (emu::g().block)
#define gridDim (emu::g().grid)

inline void __syncthreads() { emu::block_sync(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_exchange(mask, emu::Xmode::Shfl, 0, -1); }
inline void __threadfence() {}
inline void __trap() { emu::fail("__trap() called"); }

template <class T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  int lane = emu::cur()->lane;
  int s = (lane & ~(width - 1)) + (src % width);
  return emu::from_bits<T>(emu::warp_exchange(mask, emu::Xmode::Shfl, emu::to_bits(v), s));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  int lane = emu::cur()->lane;
  int s = lane ^ lane_mask;
  if ((s & ~(width - 1)) != (lane & ~(width - 1))) s = lane;
  return emu::from_bits<T>(emu::warp_exchange(mask, emu::Xmode::Shfl, emu::to_bits(v), s));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  int lane = emu::cur()->lane;
  int s = ((lane % width) + (int)delta < width) ? lane + (int)delta : lane;
  return emu::from_bits<T>(emu::warp_exchange(mask, emu::Xmode::Shfl, emu::to_bits(v), s));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  int lane = emu::cur()->lane;
  int s = ((lane % width) >= (int)delta) ? lane - (int)delta : lane;
  return emu::from_bits<T>(emu::warp_exchange(mask, emu::Xmode::Shfl, emu::to_bits(v), s));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return (unsigned)emu::warp_exchange(mask, emu::Xmode::Ballot, pred ? 1 : 0, 0);
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) {
  int n = (int)blockDim.x * blockDim.y * blockDim.z;
  int w0 = emu::cur()->warp * 32;
  int lanes = n - w0 < 32 ? n - w0 : 32;
  unsigned full = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1);
  return __ballot_sync(mask, pred) == full;
}

template <class T>
inline T atomicAdd(T* p, T v) {
  T old = *p;
  *p = old + v;
  return old;
}
template <class T>
inline T atomicMax(T* p, T v) {
  T old = *p;
  if (v > old) *p = v;
  return old;
}
template <class T>
inline T atomicMin(T* p, T v) {
  T old = *p;
  if (v < old) *p = v;
  return old;
}

inline unsigned __float_as_uint(float f) { return emu::from_bits<unsigned>(emu::to_bits(f)); }
inline float __uint_as_float(unsigned u) { return emu::from_bits<float>((uint64_t)u); }
inline float rsqrtf(float x) { return emu::ulp_jitter(1.0f / std::sqrt(x), x, 4); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
// Byte permute (prmt.b32 without a mode): result byte i = byte ((s >> 4i) & 7) of {y, x}
// (x bytes 0..3, y bytes 4..7). The selectors' sign-replicate bit is not emulated.
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  uint64_t v = ((uint64_t)y << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
  return r;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
#if CSA_EMU_GPU_NUMERICS
// the kernels' calls of the libm functions CUDA gives to within 2 ulp (after every std header)
inline float csa_emu_expf(float x) { return emu::ulp_jitter(std::exp(x), x, 1); }
inline float csa_emu_sinf(float x) { return emu::ulp_jitter(std::sin(x), x, 2); }
inline float csa_emu_cosf(float x) { return emu::ulp_jitter(std::cos(x), x, 3); }
#define expf(x) csa_emu_expf(x)
#define sinf(x) csa_emu_sinf(x)
#define cosf(x) csa_emu_cosf(x)
#endif
#endif  // __CUDACC__
