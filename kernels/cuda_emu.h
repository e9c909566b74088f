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
#pragma once
#ifndef __CUDACC__

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
#include <string>
#include <vector>

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

enum class St { Ready, AtBlock, AtWarp, Done };
enum class Xmode { Shfl, Ballot };

struct Fiber {
  ucontext_t ctx;
  dim3 tid;
  int linear = 0, lane = 0, warp = 0;
  St state = St::Ready;
  Xmode mode = Xmode::Shfl;
  uint64_t xval = 0, result = 0;
  int src = 0;
  unsigned mask = 0;
};

struct Grid {
  dim3 grid, block, block_idx;
  std::vector<Fiber> fibers;
  std::vector<char> stacks;
  size_t stack_bytes = 256 * 1024;
  ucontext_t sched;
  Fiber* cur = nullptr;
  std::function<void()> body;
  std::string error;
  long long barriers = 0;
  bool ftz = true;  // emulate -ftz=true (see the header comment)
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

inline void trampoline() {
  Grid& G = g();
  G.body();
  G.cur->state = St::Done;
  swapcontext(&G.cur->ctx, &G.sched);
}

inline std::string where(const Grid& G) {
  char b[96];
  std::snprintf(b, sizeof b, " (block %u,%u,%u)", G.block_idx.x, G.block_idx.y, G.block_idx.z);
  return b;
}

// Release the warps whose live lanes all wait at a warp barrier; false if none could go.
inline bool release_warps(Grid& G, int nthreads) {
  bool progress = false;
  for (int w0 = 0; w0 < nthreads; w0 += 32) {
    int w1 = w0 + 32 < nthreads ? w0 + 32 : nthreads;
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

inline int run_block(Grid& G, int nthreads) {
  for (int i = 0; i < nthreads; ++i) {
    Fiber& f = G.fibers[i];
    f.linear = i;
    f.tid = dim3(i % G.block.x, (i / G.block.x) % G.block.y, i / (G.block.x * G.block.y));
    f.lane = i % 32;
    f.warp = i / 32;
    f.state = St::Ready;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = G.stacks.data() + (size_t)i * G.stack_bytes;
    f.ctx.uc_stack.ss_size = G.stack_bytes;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, (void (*)())trampoline, 0);
  }
  for (;;) {
    for (int i = 0; i < nthreads; ++i) {
      Fiber& f = G.fibers[i];
      if (f.state != St::Ready) continue;
      G.cur = &f;
      swapcontext(&G.sched, &f.ctx);
      if (!G.error.empty()) return -1;
    }
    int done = 0, at_block = 0;
    for (int i = 0; i < nthreads; ++i) {
      done += G.fibers[i].state == St::Done;
      at_block += G.fibers[i].state == St::AtBlock;
    }
    if (done == nthreads) return 0;
    if (release_warps(G, nthreads)) continue;
    if (!G.error.empty()) return -1;
    if (at_block == nthreads) {
      ++G.barriers;
      for (int i = 0; i < nthreads; ++i) G.fibers[i].state = St::Ready;
      continue;
    }
    if (at_block > 0 && at_block + done == nthreads) {
      G.error = "barrier reached by only part of a block: " + std::to_string(at_block) + " of " +
                std::to_string(nthreads) + " threads wait at __syncthreads, " + std::to_string(done) +
                " exited" + where(G);
    } else {
      G.error = "deadlock: threads wait at different barriers (divergent __syncthreads or shuffle)" + where(G);
    }
    return -1;
  }
}

// Run body() as a grid; returns 0, or -1 with last_error() set.
inline int launch(dim3 grid, dim3 block, std::function<void()> body) {
  Grid& G = g();
  int nthreads = (int)(block.x * block.y * block.z);
  if (nthreads <= 0 || nthreads > 1024) {
    last_error() = "invalid block size " + std::to_string(nthreads);
    return -1;
  }
  G.grid = grid;
  G.block = block;
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
  G.fibers.assign(nthreads, Fiber());
  if (G.stacks.size() < (size_t)nthreads * G.stack_bytes) G.stacks.resize((size_t)nthreads * G.stack_bytes);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        G.block_idx = dim3(x, y, z);
        if (run_block(G, nthreads) != 0) {
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

}  // namespace emu

#define threadIdx (emu::cur()->tid)
#define blockIdx (emu::g().block_idx)
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
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
#endif  // __CUDACC__
