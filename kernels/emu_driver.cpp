// emu_driver.cpp — the CUDA C kernels compiled with g++ under cuda_emu.h, one extern "C"
// entry per kernel (grid and block first, then the kernel's own arguments). Each entry
// returns 0, or -1 with the reason in csa_emu_last_error().
#include "cuda_emu.h"

#include "attn.cu"
#include "emit.cu"
#include "index.cu"
#include "topk.cu"

#define CSA_EMU_LAUNCH(call) return emu::launch(dim3(gx, gy, gz), dim3(bx, 1, 1), [=] { call; })

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

int emu_topk_radix(unsigned gx, unsigned gy, unsigned gz, unsigned bx, const float* scores,
                   long long score_req_stride, int n, int k, int* out, long long out_req_stride) {
  CSA_EMU_LAUNCH(topk_radix(scores, score_req_stride, n, k, out, out_req_stride));
}

int emu_attn_partial(unsigned gx, unsigned gy, unsigned gz, unsigned bx, const float* q, const unsigned char* ring,
                     long long ring_req_stride, int n_win, const unsigned char* records, long long rec_req_stride,
                     const int* idx, int use_idx, long long idx_req_stride, int n_sel, int heads, int pos, const float* inv_freq,
                     int rope_dim, float scale, float* part_ml, float* part_o) {
  CSA_EMU_LAUNCH(attn_partial(q, ring, ring_req_stride, n_win, records, rec_req_stride, idx, use_idx, idx_req_stride, n_sel,
                              heads, pos, inv_freq, rope_dim, scale, part_ml, part_o));
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
