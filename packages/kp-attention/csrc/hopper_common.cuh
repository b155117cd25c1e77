// What the Hopper kernels (forward and backward) share on the device: the asynchronous warpgroup
// GEMM and the zero-filling cp.async the producers use where TMA cannot (a varlen block past its
// sequence's end). sm_90a instructions: included only by kernel headers.
#pragma once
#include <cute/tensor.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>

#include <cstdint>

namespace kp_attention::hopper {

// One warpgroup GEMM, issued asynchronously (the caller waits): acc (+)= A B over every k-block.
template <bool kZero, class Mma, class TA, class TB, class TC>
__device__ __forceinline__ void wg_gemm(Mma& mma, TA const& a, TB const& b, TC& acc) {
  using namespace cute;
  warpgroup_fence_operand(acc);
  warpgroup_arrive();
  mma.accumulate_ = kZero ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(a); ++k) {
    cute::gemm(mma, a(_, _, k), b(_, _, k), acc);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_fence_operand(acc);
}

// 16 bytes global -> shared with cp.async, zero-filled when !ok (src-size 0 reads nothing).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool ok) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(ok ? 16 : 0) : "memory");
}

}  // namespace kp_attention::hopper
