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
