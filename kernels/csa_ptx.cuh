// csa_ptx.cuh — the tensor-core, asynchronous-copy and FP8-conversion primitives of the
// fast kernels (attn_tc.cu, index_tc.cu), as inline PTX for sm_90 (mma.sync m16n8k16 .bf16
// needs sm_80, m16n8k32 .e4m3 and cvt .e4m3x2 need sm_89). Under g++ the same names come
// from cuda_emu.h, which emulates them with the PTX ISA's fragment layouts and the
// commit/wait semantics of cp.async; this file is the only place guarded for emulation.
#pragma once
#ifdef __CUDACC__

// d (16x8 f32) += a (16x16 bf16, row) * b (16x8 bf16, col); fragments per the PTX ISA.
__device__ __forceinline__ void csa_mma_bf16_16816(float d[4], const unsigned a[4], const unsigned b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d (16x8 f32) += a (16x32 e4m3, row) * b (32x8 e4m3, col).
__device__ __forceinline__ void csa_mma_e4m3_16832(float d[4], const unsigned a[4], const unsigned b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ unsigned csa_smem_addr(const void* p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

// Four 8x8 b16 matrices from shared memory; lane l gives the address of row l % 8 of matrix
// l / 8 (16-byte aligned). r[i]: matrix i, row lane/4, columns 2*(lane%4) + {0,1} (the A/B
// fragment of one 8x8 block); _trans: rows 2*(lane%4) + {0,1}, column lane/4.
__device__ __forceinline__ void csa_ldmatrix_x4(unsigned r[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(csa_smem_addr(row)));
}
__device__ __forceinline__ void csa_ldmatrix_x4_trans(unsigned r[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(csa_smem_addr(row)));
}

// The same with the row address as a 32-bit shared-window address (csa_smem_addr of the
// tile plus a byte offset), so the tile loop does no 64-bit address arithmetic.
typedef unsigned csa_saddr;
__device__ __forceinline__ void csa_ldsm_x4(unsigned r[4], csa_saddr a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void csa_ldsm_x4_trans(unsigned r[4], csa_saddr a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// 2^x, ex2.approx.ftz.f32 (one MUFU.EX2; relative error below 2^-22).
__device__ __forceinline__ float csa_ex2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// 16 bytes global -> shared, bypassing L1; bytes past src_bytes are zero-filled (not read).
__device__ __forceinline__ void csa_cp_async16(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(csa_smem_addr(smem)), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void csa_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void csa_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Packed BF16 max of magnitudes (max.xorsign.abs.bf16x2: |d| = max(|a|, |b|), sign a ^ b).
__device__ __forceinline__ unsigned csa_hmax2_abs_bf16(unsigned a, unsigned b) {
  unsigned r;
  asm("max.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

// mbarriers (shared::cta, 8 bytes) and bulk copies global -> shared that complete on one.
__device__ __forceinline__ void csa_mbar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(csa_smem_addr(bar)), "r"(count) : "memory");
}
// Makes initialized barriers visible to the async proxy (before any bulk copy uses them).
__device__ __forceinline__ void csa_fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
// Orders this thread's generic-proxy accesses of shared memory before later async-proxy writes.
__device__ __forceinline__ void csa_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void csa_mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(csa_smem_addr(bar)), "r"(bytes)
               : "memory");
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared; the
// barrier's tx-count drops by `bytes` when they have landed.
__device__ __forceinline__ void csa_bulk_g2s(void* smem, const void* gmem, unsigned bytes, unsigned long long* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   csa_smem_addr(smem)),
               "l"(gmem), "r"(bytes), "r"(csa_smem_addr(bar))
               : "memory");
}
// Spins until the barrier's phase of this parity has completed.
__device__ __forceinline__ void csa_mbar_wait(unsigned long long* bar, unsigned parity) {
  asm volatile(
      "{ .reg .pred p;\n"
      "CSA_MBAR_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra CSA_MBAR_WAIT;\n"
      "}\n" ::"r"(csa_smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// Two E4M3FN codes (low byte first) to floats through one cvt.rn.f16x2.e4m3x2.
__device__ __forceinline__ void csa_e4m3x2_to_float2(unsigned pair, float* lo, float* hi) {
  unsigned h2;
  unsigned short p16 = (unsigned short)(pair & 0xffffu);
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(p16));
  float a, b;
  asm("{ .reg .f16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }"
      : "=f"(a), "=f"(b)
      : "r"(h2));
  *lo = a;
  *hi = b;
}

// Two floats to packed BF16, round to nearest even, lo in the low half (cvt puts its first
// source in the upper half).
__device__ __forceinline__ unsigned csa_pack_bf16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// prmt.b32 in its default mode: result byte i = byte (sel >> 4i) & 7 of {b:a} (a bytes 0..3),
// or, when bit 3 of that selector nibble is set, that byte's sign bit replicated over 8 bits.
__device__ __forceinline__ unsigned csa_prmt(unsigned a, unsigned b, unsigned sel) {
  unsigned r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// Packed BF16 multiply, round to nearest even (mul.rn.bf16x2, sm_90; subnormals kept: there
// is no .ftz for bf16).
__device__ __forceinline__ unsigned csa_hmul2_bf16(unsigned a, unsigned b) {
  unsigned r;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

// Thread block clusters (sm_90; the kernel declares __cluster_dims__): the cluster barrier
// (every thread of every block arrives, release/acquire: shared-memory writes before it are
// seen by the cluster after it), the block's rank in its cluster, and mapa: the address in
// block `rank`'s shared memory of what `p` points to in this block's (generic loads reach it).
__device__ __forceinline__ void csa_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ unsigned csa_cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
template <class T>
__device__ __forceinline__ T* csa_cluster_map(T* p, unsigned rank) {
  unsigned long long a;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(a) : "l"(p), "r"(rank));
  return (T*)a;
}
// The launch's dynamic shared memory in bytes (%dynamic_smem_size).
__device__ __forceinline__ unsigned csa_dynamic_smem_bytes() {
  unsigned r;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
  return r;
}
#define CSA_DYN_SMEM(T, name) extern __shared__ __align__(16) T name[]
#endif  // __CUDACC__
