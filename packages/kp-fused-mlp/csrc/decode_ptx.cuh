// The decode kernels' PTX helpers (decode_gemv.cu; tools/decode_variants.cu, its microbenchmark,
// includes them too, so both measure the same instructions): the weight stream's loads, the x
// chunks' cp.async, and the m16n8k16 MMA step on fragments straight from global memory.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace kp_fused_mlp {
namespace decode_ptx {

// L2 evict_first policy for the weight stream (sm80+).
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}

// 16 bytes of weights, or zeros where `ok` is false (no access then). Predicated in PTX, not a
// branch: the ring's refill stays one straight block of loads.
__device__ __forceinline__ uint4 ld_weight(const void* p, bool ok, uint64_t pol) {
  uint4 v;
  asm volatile(
      "{\n .reg .pred q;\n setp.ne.b32 q, %5, 0;\n"
      " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
      " @q ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %6;\n}\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"(static_cast<int>(ok)), "l"(pol));
  return v;
}

// 16 bytes copied to shared memory asynchronously (cp.async, through L2 only), or 16 zero bytes
// where `ok` is false (source size 0: nothing is read). Completion: cp_async_wait<N>.
__device__ __forceinline__ void cp_async_16(void* smem, const void* p, bool ok) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(p), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Wait until at most N of this thread's most recent cp.async groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- the weight stream through shared memory (sm90: bulk copies completing on mbarriers) --------
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 || !defined(__CUDA_ARCH__)

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// Makes the initialized mbarriers visible to the async proxy (the bulk copies) and the CTA.
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// One arrival that also announces `bytes` of bulk copies completing on this phase.
__device__ __forceinline__ void mbar_arrive_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// One arrival (release: this thread's earlier shared-memory reads are done before it counts).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// Spins until the phase of parity `parity` has completed (a fresh mbarrier counts its phase -1,
// parity 1, as completed: a producer's first pass over an empty ring does not wait).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred done;\n"
      "WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n @!done bra WAIT;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
// A 2-D tile of a tensor map (TMA) into shared memory at column c0, row c1, completing as
// transaction bytes on `bar` (the whole box counts, out-of-bounds parts arrive as zeros).
__device__ __forceinline__ void tma_load_2d(void* smem, const void* map, int c0, int c1, uint64_t* bar, uint64_t pol) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(smem_addr(smem)),
      "l"(map), "r"(c0), "r"(c1), "r"(smem_addr(bar)), "l"(pol)
      : "memory");
}
// A 4-D box of a tensor map at coordinates (c0 innermost .. c3), as tma_load_2d.
__device__ __forceinline__ void tma_load_4d(void* smem, const void* map, int c0, int c1, int c2, int c3, uint64_t* bar,
                                            uint64_t pol) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(smem_addr(smem)),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar)), "l"(pol)
      : "memory");
}
// A ring of ST shared-memory stages, each with a full mbarrier (one arrival, the producer's, plus
// the transaction bytes of its copies) and an empty one (`consumers` arrivals). The stages start at
// `raw` rounded up to 1 KB (the 128-byte swizzle's period; the caller reserves the slack), the
// mbarriers after them. Thread 0 initializes them; every thread of the CTA must call this (it
// ends in __syncthreads).
struct SmemRing {
  unsigned char* stages;
  uint64_t* full;
  uint64_t* empty;
};
template <int ST>
__device__ __forceinline__ SmemRing init_ring(unsigned char* raw, int stage_bytes, int consumers) {
  SmemRing r;
  r.stages = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t{1023});
  r.full = reinterpret_cast<uint64_t*>(r.stages + ST * stage_bytes);
  r.empty = r.full + ST;
  if (threadIdx.x == 0) {
    for (int s = 0; s < ST; ++s) {
      mbar_init(&r.full[s], 1);
      mbar_init(&r.empty[s], consumers);
    }
    mbar_init_fence();
  }
  __syncthreads();
  return r;
}
// L2 evict_last policy (x: every CTA reads it).
__device__ __forceinline__ uint64_t evict_last_policy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}
#endif  // sm90

template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// One k-step of one 16-row tile: rows g (lo) and g + 8 (hi), x row g (xv), 8 k values each: the
// k order (8t, 8t + 1 | 8t + 2, 8t + 3) is the first MMA's (2t, 2t + 1 | 2t + 8, 2t + 9).
template <typename T>
__device__ __forceinline__ void mma_step(float (&c)[4], const uint4& lo, const uint4& hi, const uint4& xv) {
  mma16816<T>(c, lo.x, hi.x, lo.y, hi.y, xv.x, xv.y);
  mma16816<T>(c, lo.z, hi.z, lo.w, hi.w, xv.z, xv.w);
}

}  // namespace decode_ptx
}  // namespace kp_fused_mlp
