// 16-byte global loads/stores with cache hints, and fp32 views of them.
// One 16-byte access per thread per instruction is what lets a warp move 512 B per request; the
// hints keep read-once streams from evicting what is reused (weights in L1, re-read rows in L2).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kp/dtype.cuh"

namespace kp {

// Cache policy of a load:
//   Stream: read once (ld.global.cs, evict-first in L1 and L2).
//   L2:     read again soon by this kernel (ld.global.cg: skip L1, keep in L2).
//   RO:     small read-only data every CTA re-reads, e.g. weights (ld.global.nc, cached in L1).
//   Plain:  the default policy (ld.global).
// The L2 eviction-priority variants (sm80+; a plain access elsewhere) mark only the L2 lines:
//   L2First / L2Last: ld.global.L2::cache_hint with an evict_first / evict_last policy.
enum class Ld { Stream, L2, RO, Plain, L2First, L2Last };
// Cache policy of a store: Plain (st.global), Stream (st.global.cs), L2First / L2Last as above.
enum class St { Plain, Stream, L2First, L2Last };

namespace detail {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
template <bool FIRST> __device__ __forceinline__ uint64_t l2_policy() {
  uint64_t pol;
  if constexpr (FIRST) asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  else asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}
template <bool FIRST> __device__ __forceinline__ uint4 ld16_l2hint(const void* p) {
  uint4 v;
  asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p), "l"(l2_policy<FIRST>()));
  return v;
}
template <bool FIRST> __device__ __forceinline__ void st16_l2hint(void* p, const uint4& v) {
  asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;"
               :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "l"(l2_policy<FIRST>()) : "memory");
}
#endif
}  // namespace detail

template <Ld H> __device__ __forceinline__ uint4 ld16(const void* p) {
  const uint4* q = reinterpret_cast<const uint4*>(p);
  if constexpr (H == Ld::Stream) return __ldcs(q);
  else if constexpr (H == Ld::L2) return __ldcg(q);
  else if constexpr (H == Ld::RO) return __ldg(q);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  else if constexpr (H == Ld::L2First || H == Ld::L2Last) return detail::ld16_l2hint<H == Ld::L2First>(p);
#endif
  else return *q;
}
template <St H = St::Plain> __device__ __forceinline__ void st16(void* p, const uint4& v) {
  uint4* q = reinterpret_cast<uint4*>(p);
  if constexpr (H == St::Stream) __stcs(q, v);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  else if constexpr (H == St::L2First || H == St::L2Last) detail::st16_l2hint<H == St::L2First>(p, v);
#endif
  else *q = v;
}

template <typename S, Ld H> __device__ __forceinline__ S ld1(const S* p) {
  if constexpr (H == Ld::Stream) return __ldcs(p);
  else if constexpr (H == Ld::L2) return __ldcg(p);
  else if constexpr (H == Ld::RO) return __ldg(p);
  else return *p;
}

// N consecutive elements of S at p (16-byte aligned, N * sizeof(S) a multiple of 16) -> N floats.
template <typename S, int N, Ld H> __device__ __forceinline__ void ld_chunk(const S* p, float* v) {
  constexpr int P = Packet<S>::N;
  static_assert(N % P == 0, "chunk must be whole 16-byte packets");
#pragma unroll
  for (int j = 0; j < N / P; ++j) unpack<S>(ld16<H>(p + j * P), v + j * P);
}
template <typename S, int N, St H = St::Plain> __device__ __forceinline__ void st_chunk(S* p, const float* v) {
  constexpr int P = Packet<S>::N;
  static_assert(N % P == 0, "chunk must be whole 16-byte packets");
#pragma unroll
  for (int j = 0; j < N / P; ++j) st16<H>(p + j * P, pack<S>(v + j * P));
}

// A register packet the compiler must treat as changed here (no instruction is emitted): keeps a
// loop-invariant packet from being decoded once and its floats hoisted out of a loop, which would
// hold twice the registers for the whole loop.
__device__ __forceinline__ void opaque(uint4& v) { asm volatile("" : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)); }

// ---- cp.async (sm80+): global -> shared copies that complete in the background -------------------
// A thread that copies a packet and later reads it back itself needs only cp.async.wait_group, no
// CTA barrier: that is how kp kernels keep several rows in flight without spending registers.
// `ok == false` writes zeros and reads nothing (src-size 0); `src` must still be a valid address.
__device__ __forceinline__ void cp_async16(void* smem, const void* src, bool ok) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async4(void* smem, const void* src, bool ok) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(ok ? 4 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Wait until at most `n` of this thread's committed groups are pending (n is a small runtime value).
__device__ __forceinline__ void cp_async_wait(int n) {
  switch (n) {
    case 0: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;\n" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;\n" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;\n" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 7;\n" ::: "memory"); break;
  }
}

// Host: can a tensor take the 16-byte path? Its base and every row start must be 16-byte aligned.
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
inline bool rows_aligned16(const void* p, int64_t stride_elems, int elem_size) {
  return p == nullptr || (aligned16(p) && (stride_elems * elem_size) % 16 == 0);
}

}  // namespace kp
