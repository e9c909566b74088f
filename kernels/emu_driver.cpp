// emu_driver.cpp — the CUDA C kernels compiled with g++ under cuda_emu.h, one extern "C"
// entry per kernel (grid and block first, then the kernel's own arguments). Each entry
// returns 0, or -1 with the reason in csa_emu_last_error().
#include "cuda_emu.h"

#include "attn.cu"
#include "attn_tc.cu"
#include "emit.cu"
#include "index.cu"
#include "index_tc.cu"
#include "topk.cu"

#define CSA_EMU_LAUNCH(call) return emu::launch(dim3(gx, gy, gz), dim3(bx, 1, 1), [=] { call; })
// Kernels with dynamic shared memory take its size after the block size.
#define CSA_EMU_LAUNCH_SMEM(call) return emu::launch(dim3(gx, gy, gz), dim3(bx, 1, 1), [=] { call; }, smem)

extern "C" {

const char* csa_emu_last_error() { return emu::last_error().c_str(); }
long long csa_emu_barriers() { return emu::g().barriers; }
// Emulate -ftz=true (1, the default, as CuPy compiles) or IEEE denormals (0); returns the old mode.
int csa_emu_set_ftz(int on) {
  int old = emu::g().ftz ? 1 : 0;
  emu::g().ftz = on != 0;
  return old;
}

// Denormal probe: out[i] = in[i] * 1.0f + 0.0f (flushed under -ftz).
__global__ void csa_emu_ftz_probe(const float* in, float* out) { out[threadIdx.x] = in[threadIdx.x] * 1.0f + 0.0f; }
int emu_ftz_probe(unsigned bx, const float* in, float* out) {
  return emu::launch(dim3(1, 1, 1), dim3(bx, 1, 1), [=] { csa_emu_ftz_probe(in, out); });
}

int emu_emit_records(unsigned gx, unsigned gy, unsigned gz, unsigned bx, const float* tok, int cur0, int ratio,
                     int overlap, const float* norm, int normalize, const float* inv_freq, int first_record,
                     int ring_rows, unsigned char* out, int rope_dim) {
  CSA_EMU_LAUNCH(emit_records(tok, cur0, ratio, overlap, norm, normalize, inv_freq, first_record, ring_rows, out,
                              rope_dim));
}

int emu_emit_index_keys(unsigned gx, unsigned gy, unsigned gz, unsigned bx, const float* tok, int cur0,
                        const float* norm, int first_record, unsigned char* out) {
  CSA_EMU_LAUNCH(emit_index_keys(tok, cur0, norm, first_record, out));
}

int emu_index_scores(unsigned gx, unsigned gy, unsigned gz, unsigned bx, const unsigned char* keys,
                     long long key_req_stride, const float* q, const float* w, int heads, int n, float* scores,
                     long long score_req_stride) {
  CSA_EMU_LAUNCH(index_scores(keys, key_req_stride, q, w, heads, n, scores, score_req_stride));
}

int emu_index_tc_scores(unsigned gx, unsigned gy, unsigned gz, unsigned bx, const unsigned char* keys,
                        long long key_req_stride, const float* q, const float* w, int heads, int n, float* scores,
                        long long score_req_stride, unsigned* hist, long long hist_req_stride) {
  CSA_EMU_LAUNCH(index_tc_scores(keys, key_req_stride, q, w, heads, n, scores, score_req_stride, hist,
                                 hist_req_stride));
}

int emu_topk_radix(unsigned gx, unsigned gy, unsigned gz, unsigned bx, const float* scores,
                   long long score_req_stride, int n, int k, int* out, long long out_req_stride) {
  CSA_EMU_LAUNCH(topk_radix(scores, score_req_stride, n, k, out, out_req_stride));
}

int emu_topk_mb_hist(unsigned gx, unsigned gy, unsigned gz, unsigned bx, const float* scores,
                     long long score_req_stride, int n, int k, unsigned* work, long long work_req_stride, int pass,
                     int seg_cap) {
  CSA_EMU_LAUNCH(topk_mb_hist(scores, score_req_stride, n, k, work, work_req_stride, pass, seg_cap));
}
int emu_topk_mb_count(unsigned gx, unsigned gy, unsigned gz, unsigned bx, const float* scores,
                      long long score_req_stride, int n, int k, unsigned* work, long long work_req_stride,
                      int seg_cap) {
  CSA_EMU_LAUNCH(topk_mb_count(scores, score_req_stride, n, k, work, work_req_stride, seg_cap));
}
int emu_topk_mb_write(unsigned gx, unsigned gy, unsigned gz, unsigned bx, const float* scores,
                      long long score_req_stride, int n, int k, const unsigned* work, long long work_req_stride,
                      int seg_cap, int* out, long long out_req_stride) {
  CSA_EMU_LAUNCH(topk_mb_write(scores, score_req_stride, n, k, work, work_req_stride, seg_cap, out, out_req_stride));
}

int emu_attn_partial(unsigned gx, unsigned gy, unsigned gz, unsigned bx, const float* q, const unsigned char* ring,
                     long long ring_req_stride, int n_win, const unsigned char* records, long long rec_req_stride,
                     const int* idx, int use_idx, long long idx_req_stride, int n_sel, int heads, int pos, const float* inv_freq,
                     int rope_dim, float scale, float* part_ml, float* part_o) {
  CSA_EMU_LAUNCH(attn_partial(q, ring, ring_req_stride, n_win, records, rec_req_stride, idx, use_idx, idx_req_stride, n_sel,
                              heads, pos, inv_freq, rope_dim, scale, part_ml, part_o));
}

int emu_attn_tc_partial(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned smem, const float* q,
                        const unsigned char* ring, long long ring_req_stride, int n_win, long long ring_bytes,
                        const unsigned char* records, long long rec_req_stride, long long rec_bytes, const int* idx,
                        int use_idx, long long idx_req_stride, int n_sel, int heads, int pos, const float* inv_freq,
                        int rope_dim, float scale, float* part_ml, float* part_o) {
  CSA_EMU_LAUNCH_SMEM(attn_tc_partial(q, ring, ring_req_stride, n_win, ring_bytes, records, rec_req_stride,
                                      rec_bytes, idx, use_idx, idx_req_stride, n_sel, heads, pos, inv_freq, rope_dim,
                                      scale, part_ml, part_o));
}

// The fused attention (attn_tc_fused1/2/4/8): `cluster` chunks per thread block cluster, gy == cluster.
int emu_attn_tc_fused(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned smem, unsigned cluster,
                      const float* q, const unsigned char* ring, long long ring_req_stride, int n_win,
                      long long ring_bytes, const unsigned char* records, long long rec_req_stride,
                      long long rec_bytes, const int* idx, int use_idx, long long idx_req_stride, int n_sel, int heads,
                      int pos, const float* inv_freq, int rope_dim, float scale,
                      const float* sink, float* y) {
#define CSA_EMU_FUSED(k, c)                                                                                     \
  return emu::launch(                                                                                           \
      dim3(gx, gy, gz), dim3(bx, 1, 1),                                                                         \
      [=] {                                                                                                     \
        k(q, ring, ring_req_stride, n_win, ring_bytes, records, rec_req_stride, rec_bytes, idx, use_idx,        \
          idx_req_stride, n_sel, heads, pos, inv_freq, rope_dim, scale, sink, y);             \
      },                                                                                                        \
      smem, dim3(1, c, 1))
  switch (cluster) {
    case 1: CSA_EMU_FUSED(attn_tc_fused1, 1);
    case 2: CSA_EMU_FUSED(attn_tc_fused2, 2);
    case 4: CSA_EMU_FUSED(attn_tc_fused4, 4);
    case 8: CSA_EMU_FUSED(attn_tc_fused8, 8);
  }
#undef CSA_EMU_FUSED
  emu::last_error() = "attn_tc_fused: no kernel for a cluster of " + std::to_string(cluster);
  return -1;
}

int emu_attn_merge(unsigned gx, unsigned gy, unsigned gz, unsigned bx, const float* part_ml, const float* part_o,
                   int nchunks, int heads, const float* sink, int pos, const float* inv_freq, int rope_dim,
                   float* y) {
  CSA_EMU_LAUNCH(attn_merge(part_ml, part_o, nchunks, heads, sink, pos, inv_freq, rope_dim, y));
}

// A deliberately broken kernel for the emulator's own tests: thread 0 returns early
// and the others wait at __syncthreads.
__global__ void csa_emu_partial_barrier(int* out) {
  if (threadIdx.x == 0) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}
int emu_partial_barrier(unsigned bx, int* out) {
  return emu::launch(dim3(1, 1, 1), dim3(bx, 1, 1), [=] { csa_emu_partial_barrier(out); });
}

// Shuffle/ballot self-test: out[i] = value from lane i^1, ballot of odd lanes.
__global__ void csa_emu_shuffle(int* out, unsigned* ballot) {
  int v = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
  unsigned b = __ballot_sync(0xffffffffu, threadIdx.x & 1);
  out[threadIdx.x] = v;
  if ((threadIdx.x & 31) == 0) ballot[threadIdx.x >> 5] = b;
}
int emu_shuffle(unsigned bx, int* out, unsigned* ballot) {
  return emu::launch(dim3(1, 1, 1), dim3(bx, 1, 1), [=] { csa_emu_shuffle(out, ballot); });
}
}

// mma self-test: one warp multiplies A (16xK, row-major) by B (Kx8, row-major here) with the
// fragments assembled per the PTX ISA layouts; bf16 (K=16, A/B given as bf16 bits) or e4m3
// (K=32, A/B given as bytes). D comes back row-major 16x8.
extern "C" {
__global__ void csa_emu_mma_bf16(const unsigned short* A, const unsigned short* B, float* D) {
  int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  unsigned a[4], b[2];
  for (int r = 0; r < 4; ++r) {
    int row = g + ((r & 1) ? 8 : 0), col = 2 * t + ((r & 2) ? 8 : 0);
    a[r] = A[row * 16 + col] | ((unsigned)A[row * 16 + col + 1] << 16);
  }
  for (int r = 0; r < 2; ++r) {
    int k = 2 * t + (r ? 8 : 0);
    b[r] = B[k * 8 + g] | ((unsigned)B[(k + 1) * 8 + g] << 16);
  }
  float d[4] = {0, 0, 0, 0};
  csa_mma_bf16_16816(d, a, b);
  csa_mma_bf16_16816(d, a, b);  // accumulates: D = 2 A B
  for (int i = 0; i < 4; ++i) D[(g + (i >= 2 ? 8 : 0)) * 8 + 2 * t + (i & 1)] = d[i];
}
int emu_mma_bf16(const unsigned short* A, const unsigned short* B, float* D) {
  return emu::launch(dim3(1, 1, 1), dim3(32, 1, 1), [=] { csa_emu_mma_bf16(A, B, D); });
}
__global__ void csa_emu_mma_e4m3(const unsigned char* A, const unsigned char* B, float* D) {
  int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  unsigned a[4], b[2];
  for (int r = 0; r < 4; ++r) {
    int row = g + ((r & 1) ? 8 : 0), col = 4 * t + ((r & 2) ? 16 : 0);
    a[r] = 0;
    for (int i = 0; i < 4; ++i) a[r] |= (unsigned)A[row * 32 + col + i] << (8 * i);
  }
  for (int r = 0; r < 2; ++r) {
    int k = 4 * t + (r ? 16 : 0);
    b[r] = 0;
    for (int i = 0; i < 4; ++i) b[r] |= (unsigned)B[(k + i) * 8 + g] << (8 * i);
  }
  float d[4] = {0, 0, 0, 0};
  csa_mma_e4m3_16832(d, a, b);
  for (int i = 0; i < 4; ++i) D[(g + (i >= 2 ? 8 : 0)) * 8 + 2 * t + (i & 1)] = d[i];
}
int emu_mma_e4m3(const unsigned char* A, const unsigned char* B, float* D) {
  return emu::launch(dim3(1, 1, 1), dim3(32, 1, 1), [=] { csa_emu_mma_e4m3(A, B, D); });
}

// cp.async self-test (64 threads, 16 B each of a 1 KiB source, two groups): before[i] is what
// thread i reads of its own destination right after issuing (old bytes: 0xFF), mid[i] after
// wait_group<1> (first group landed, second not), out the destination after wait<0> + barrier
// read by a different thread. misalign != 0 offsets the global address by that many bytes.
__global__ void csa_emu_cp_async(const unsigned char* src, unsigned char* before, unsigned char* mid,
                                 unsigned char* out, int misalign) {
  CSA_DYN_SMEM(unsigned char, cpbuf);
  int t = threadIdx.x;
  csa_cp_async16(cpbuf + 16 * t, src + 16 * t + misalign, 16);
  csa_cp_async_commit();
  csa_cp_async16(cpbuf + 1024 + 16 * t, src + 16 * t, 8);  // 8 bytes read, 8 zero-filled
  csa_cp_async_commit();
  before[t] = cpbuf[16 * t];
  csa_cp_async_wait<1>();
  mid[2 * t] = cpbuf[16 * t];
  mid[2 * t + 1] = cpbuf[1024 + 16 * t];
  csa_cp_async_wait<0>();
  __syncthreads();
  int o = (t + 1) % 64;
  for (int i = 0; i < 16; ++i) {
    out[16 * o + i] = cpbuf[16 * o + i];
    out[1024 + 16 * o + i] = cpbuf[1024 + 16 * o + i];
  }
}
int emu_cp_async(const unsigned char* src, unsigned char* before, unsigned char* mid, unsigned char* out,
                 int misalign) {
  return emu::launch(dim3(1, 1, 1), dim3(64, 1, 1), [=] { csa_emu_cp_async(src, before, mid, out, misalign); },
                     2048);
}

// mul.rn.bf16x2, max.xorsign.abs.bf16x2 and prmt (default mode) on n operand triples, one thread.
__global__ void csa_emu_bf16x2_prmt(const unsigned* a, const unsigned* b, const unsigned* sel, unsigned* mul,
                                    unsigned* perm, unsigned* mx, int n) {
  for (int i = 0; i < n; ++i) {
    mul[i] = csa_hmul2_bf16(a[i], b[i]);
    perm[i] = csa_prmt(a[i], b[i], sel[i]);
    mx[i] = csa_hmax2_abs_bf16(a[i], b[i]);
  }
}
int emu_bf16x2_prmt(const unsigned* a, const unsigned* b, const unsigned* sel, unsigned* mul, unsigned* perm,
                    unsigned* mx, int n) {
  return emu::launch(dim3(1, 1, 1), dim3(32, 1, 1), [=] {
    if (threadIdx.x == 0) csa_emu_bf16x2_prmt(a, b, sel, mul, perm, mx, n);
  });
}

// mbarrier + bulk copies: 64 threads; thread 0 arrives expecting `expect` bytes (the count
// is 2: thread 32 arrives with 0); lanes 0 and 1 each bulk-copy 16 bytes of src into
// shared memory; `before` is read before the wait, `after` after it. wait_parity 1 waits on
// a phase that never completes.
__global__ void csa_emu_bulk(const unsigned char* src, unsigned char* before, unsigned char* after, int expect,
                             int wait_parity) {
  CSA_DYN_SMEM(unsigned char, buf);
  unsigned long long* bar = (unsigned long long*)(buf + 64);
  const int t = threadIdx.x;
  if (t == 0) {
    csa_mbar_init(bar, 2);
    csa_fence_mbar_init();
  }
  __syncthreads();
  if (t == 0) csa_mbar_arrive_expect_tx(bar, (unsigned)expect);
  if (t == 32) csa_mbar_arrive_expect_tx(bar, 0u);
  if (t < 2) csa_bulk_g2s(buf + 16 * t, src + 16 * t, 16u, bar);
  if (t < 32) before[t] = buf[t];
  csa_mbar_wait(bar, (unsigned)wait_parity);
  if (t < 32) after[t] = buf[t];
}
int emu_bulk(const unsigned char* src, unsigned char* before, unsigned char* after, int expect, int wait_parity) {
  return emu::launch(dim3(1, 1, 1), dim3(64, 1, 1), [=] { csa_emu_bulk(src, before, after, expect, wait_parity); },
                     128);
}

// Thread block cluster self-test: grid (gx) in clusters of csize along x, 64 threads each. Every
// thread writes (block x 100 + thread) into its block's shared memory, passes the cluster barrier
// (unless barrier == 0), then reads the same slot of the next block of its cluster (mapa) into
// out[block x 64 + thread]. mode 1: thread 0 of the cluster's last block exits before the barrier;
// mode 2: thread 0 maps a pointer that is not shared memory; mode 3: no second cluster barrier
// (a block may exit while a peer still has to read its shared memory).
__global__ void csa_emu_cluster(int* out, unsigned n, int barrier, int mode) {
  CSA_DYN_SMEM(int, slot);
  const int t = threadIdx.x, b = blockIdx.x;
  const unsigned rank = csa_cluster_rank();
  slot[t] = b * 100 + t;
  if (mode == 1 && t == 0 && rank == n - 1) return;
  if (barrier) csa_cluster_sync();
  const int* peer = csa_cluster_map(mode == 2 && t == 0 ? out : slot, (rank + 1) % n);
  out[b * 64 + t] = peer[t];
  if (barrier && mode != 3) csa_cluster_sync();
}
int emu_cluster(unsigned gx, unsigned csize, int* out, int barrier, int mode) {
  return emu::launch(dim3(gx, 1, 1), dim3(64, 1, 1), [=] { csa_emu_cluster(out, csize, barrier, mode); }, 256,
                     dim3(csize, 1, 1));
}
}
