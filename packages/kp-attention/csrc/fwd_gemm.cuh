// The forward's data movement and MMAs on CuTe: the CTA's shared tiles, cp.async loads of q, k
// and v tiles (rows past the sequence zero-filled), S = Q K^T from shared memory and O += P V with
// P from registers, each k-step's ldmatrix issued one step ahead of its MMAs.
#pragma once
#include <cute/tensor.hpp>

#include <cstdint>

#include "fwd_traits.cuh"

namespace kp_attention::fwd {

// The dynamic shared memory of a CTA: q, then k, then v (fwd_tiles.h: smem_bytes).
template <class Tr>
struct Smem {
  using T = typename Tr::T;
  T* base;
  __device__ __forceinline__ auto q() const {
    return cute::make_tensor(cute::make_smem_ptr(base), typename Tr::SmemQ{});
  }
  __device__ __forceinline__ auto k() const {
    return cute::make_tensor(cute::make_smem_ptr(base + Tr::kBlockM * Tr::kHeadDim), typename Tr::SmemKV{});
  }
  __device__ __forceinline__ T* v_base() const { return base + (Tr::kBlockM + Tr::kBlockN) * Tr::kHeadDim; }
  __device__ __forceinline__ auto v() const {
    return cute::make_tensor(cute::make_smem_ptr(v_base()), typename Tr::SmemKV{});
  }
  __device__ __forceinline__ auto vt() const {
    return cute::make_tensor(cute::make_smem_ptr(v_base()), typename Tr::SmemVt{});
  }
  __device__ __forceinline__ auto vt_shape() const {
    return cute::make_tensor(cute::make_smem_ptr(v_base()), typename Tr::SmemVtShape{});
  }
};

// Rows [0, rows) of the [kRows, head_dim] global tile at `src` (row stride `stride`, elements)
// into the shared tile `dst`, rows from `rows` on zero-filled (cp.async with src-size 0 reads
// nothing, so their addresses may lie past the tensor). Asynchronous: the caller commits.
// Thread t copies 16 bytes at column 8 (t % kRowThreads) of every atom of rows t / kRowThreads +
// i kRowStep: one pointer walks down its rows (a register pair, not one per row: the d128 kernel
// spilled with the addresses of every row kept live across the key loop).
template <class Tr, class Dst>
__device__ __forceinline__ void load_rows(const typename Tr::T* src, int64_t stride, int64_t rows, Dst&& dst) {
  using namespace cute;
  using T = typename Tr::T;
  using Op = SM80_CP_ASYNC_CACHEGLOBAL_ZFILL<uint128_t>;
  constexpr int kRows = decltype(size<0>(dst))::value;
  constexpr int kRowStep = Tr::kThreads / Tr::kRowThreads;
  static_assert(kRows % kRowStep == 0, "every thread copies the same number of rows");
  const int row = threadIdx.x / Tr::kRowThreads;
  const int col = threadIdx.x % Tr::kRowThreads * 8;
  const T* g = src + row * stride + col;
  T* s = raw_pointer_cast(dst.data());
  CUTE_UNROLL
  for (int i = 0; i < kRows / kRowStep; ++i) {
    const bool ok = row + i * kRowStep < rows;
    CUTE_UNROLL
    for (int j = 0; j < Tr::kHeadDim; j += Tr::kAtomCols)
      Op::copy(*reinterpret_cast<const uint128_t*>(g + j),
               *reinterpret_cast<uint128_t*>(s + dst.layout()(row + i * kRowStep, col + j)), ok);
    g += kRowStep * stride;
  }
}

// acc += A B^T, A [rows, k] and B [cols, k] in shared memory (q and k), through ldmatrix.
template <class Tr, class Acc, class SA, class SB>
__device__ __forceinline__ void gemm_smem(Acc& acc, SA const& sA, SB const& sB) {
  using namespace cute;
  typename Tr::TiledMma mma;
  auto thr = mma.get_slice(threadIdx.x);
  Tensor rA = thr.partition_fragment_A(sA);  // (MMA, MMA_M, MMA_K)
  Tensor rB = thr.partition_fragment_B(sB);  // (MMA, MMA_N, MMA_K)
  auto copy_a = make_tiled_copy_A(typename Tr::LdsmQK{}, mma);
  auto copy_b = make_tiled_copy_B(typename Tr::LdsmQK{}, mma);
  auto ta = copy_a.get_thread_slice(threadIdx.x);
  auto tb = copy_b.get_thread_slice(threadIdx.x);
  Tensor sa = ta.partition_S(sA);
  Tensor ra = ta.retile_D(rA);
  Tensor sb = tb.partition_S(sB);
  Tensor rb = tb.retile_D(rB);
  constexpr int kSteps = decltype(size<2>(rA))::value;
  cute::copy(copy_a, sa(_, _, 0), ra(_, _, 0));
  cute::copy(copy_b, sb(_, _, 0), rb(_, _, 0));
  CUTE_UNROLL
  for (int k = 0; k < kSteps; ++k) {
    if (k + 1 < kSteps) {  // the next k-step's fragments load while this one's MMAs run
      cute::copy(copy_a, sa(_, _, k + 1), ra(_, _, k + 1));
      cute::copy(copy_b, sb(_, _, k + 1), rb(_, _, k + 1));
    }
    cute::gemm(mma, rA(_, _, k), rB(_, _, k), acc);
  }
}

// acc += P V: P (registers, A-operand layout: fwd_softmax.cuh scores_as_a) times V, read from
// shared memory transposed (ldmatrix.trans) as the B operand [head_dim, keys].
template <class Tr, class Acc, class RA, class SB, class SBShape>
__device__ __forceinline__ void gemm_pv(Acc& acc, RA const& rA, SB const& sVt, SBShape const& sVt_shape) {
  using namespace cute;
  typename Tr::TiledMma mma;
  auto thr = mma.get_slice(threadIdx.x);
  Tensor rB = thr.partition_fragment_B(sVt_shape);  // (MMA, MMA_N = head_dim, MMA_K = keys)
  auto copy_b = make_tiled_copy_B(typename Tr::LdsmVt{}, mma);
  auto tb = copy_b.get_thread_slice(threadIdx.x);
  Tensor sb = tb.partition_S(sVt);
  Tensor rb = tb.retile_D(rB);
  constexpr int kSteps = decltype(size<2>(rA))::value;
  static_assert(kSteps == decltype(size<2>(rB))::value, "P and V^T: one k extent");
  cute::copy(copy_b, sb(_, _, 0), rb(_, _, 0));
  CUTE_UNROLL
  for (int k = 0; k < kSteps; ++k) {
    if (k + 1 < kSteps) cute::copy(copy_b, sb(_, _, k + 1), rb(_, _, k + 1));
    cute::gemm(mma, rA(_, _, k), rB(_, _, k), acc);
  }
}

}  // namespace kp_attention::fwd
