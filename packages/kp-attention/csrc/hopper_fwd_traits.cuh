// The CuTe types of the Hopper forward of one head dim and dtype (hopper_fwd.h has the tile table):
// shared-memory layouts in wgmma's 128-byte swizzle, the two warpgroup MMAs, the TMA copies, and the
// register-layout views the softmax works through. Compiles on every arch (types only); the kernel
// body that uses wgmma is sm_90a-only (hopper_fwd_kernel.cuh).
#pragma once
#include <cute/tensor.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/numeric_types.h>

#include <cstdint>

#include "hopper_fwd.h"
#include "kp/dtype.cuh"

namespace kp_attention::hopper {

template <int DType> struct Element;
template <> struct Element<kp::kF16> { using type = cutlass::half_t; };
template <> struct Element<kp::kBF16> { using type = cutlass::bfloat16_t; };

template <int HeadDim, int DType>
struct Traits {
  static constexpr HopperTile kTile = *hopper_tile(HeadDim);
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kBlockM = kTile.block_m;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kStages = kTile.stages;
  static constexpr int kThreads = kTile.threads();
  // setmaxnreg: the producer keeps 72 (hopper_fwd.h: what spilled below), the consumers take the
  // rest of the 168 x 384 registers the launch holds: 72 x 128 + 216 x 256 = 64512.
  static constexpr int kProducerRegs = 72;
  static constexpr int kConsumerRegs = 216;
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * HopperTile::kConsumers <= 168 * kThreads,
                "setmaxnreg: no more registers than the launch holds");
  static_assert(kBlockM == 64 * HopperTile::kConsumers, "one 64-row wgmma M a consumer warpgroup");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "block_n: whole PV k-steps, one wgmma N, one TMA box");
  static_assert(HeadDim % 64 == 0 && HeadDim <= 256, "head_dim: whole 128-byte swizzle atoms");

  using T = typename Element<DType>::type;

  // K-major tiles (head dim contiguous) in atoms of 8 rows x 64 columns, 128-byte rows swizzled: the
  // layout TMA writes and wgmma reads without bank conflicts. V is read as PV's B operand [d, keys]
  // through a transposed view of the same bytes (an MN-major operand: wgmma transposes 16-bit B).
  using Atom = cute::GMMA::Layout_K_SW128_Atom<T>;
  using SmemQ = decltype(cute::tile_to_shape(Atom{}, cute::Shape<cute::Int<kBlockM>, cute::Int<HeadDim>>{}));
  using SmemKVStage = decltype(cute::tile_to_shape(Atom{}, cute::Shape<cute::Int<kBlockN>, cute::Int<HeadDim>>{}));
  using SmemKV = decltype(cute::tile_to_shape(
      Atom{}, cute::Shape<cute::Int<kBlockN>, cute::Int<HeadDim>, cute::Int<kStages>>{}));
  using SmemVt = decltype(cute::composition(
      SmemKV{}, cute::make_ordered_layout(cute::Shape<cute::Int<HeadDim>, cute::Int<kBlockN>, cute::Int<kStages>>{},
                                          cute::Step<cute::_2, cute::_1, cute::_3>{})));

  // A consumer warpgroup's GEMMs: S (64 x block_n) = Q (64 x d) K^T from smem; O (64 x d) += P V
  // with P (64 x block_n) from registers.
  using MmaS = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<T, T, float, cute::Shape<cute::_64, cute::Int<kBlockN>, cute::Int<HeadDim>>>()));
  using MmaO = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<T, T, float, cute::Shape<cute::_64, cute::Int<HeadDim>, cute::Int<kBlockN>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>()));

  // The global tensors as TMA sees them: (rows, d, heads, batch), d contiguous, other strides any
  // multiple of 16 bytes (packed QKV, GQA heads read in place).
  using GShape = cute::Shape<int32_t, int32_t, int32_t, int32_t>;
  using GStride = cute::Stride<int64_t, cute::_1, int64_t, int64_t>;
  using GLayout = cute::Layout<GShape, GStride>;
  static auto gtensor(const void* ptr, GLayout const& l) {
    return cute::make_tensor(cute::make_gmem_ptr(static_cast<const T*>(ptr)), l);
  }
  using TmaQ = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, gtensor(nullptr, GLayout{}), SmemQ{}));
  using TmaKV = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, gtensor(nullptr, GLayout{}), SmemKVStage{}));

  static constexpr uint32_t kQBytes = kBlockM * HeadDim * sizeof(T);
  static constexpr uint32_t kKVBytes = kBlockN * HeadDim * sizeof(T);
  static constexpr int kTileBytes = (kBlockM + 2 * kStages * kBlockN) * HeadDim * int(sizeof(T));
  static_assert(kTileBytes == kTile.smem_bytes(), "hopper_fwd.h's smem formula");
  // q_full, q_empty, then k_full, k_empty, v_full, v_empty of every stage (8 bytes each), after the tiles
  static constexpr int kBarriers = 2 + 4 * kStages;
  // + 1 KB: the dynamic smem base is aligned up to the swizzle's 1024 bytes in the kernel
  static constexpr int kSmemBytes = kTileBytes + 8 * kBarriers + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "a CTA's smem on sm_90");
};

// What a kernel gets: the TMA descriptors (__grid_constant__: the hardware reads them in parameter
// space), the forward's parameters, and the TMA tensors' extents (their coordinate tensors).
template <class Tr>
struct Params {
  typename Tr::TmaQ tma_q;
  typename Tr::TmaKV tma_k, tma_v;
  FwdParams p;
  int32_t q_rows, q_batches, k_rows, k_batches, heads_kv;
};

// Views of a wgmma accumulator fragment ((2 cols, 2 rows, n/8 column groups), M, N) per thread:
// by (row, column), and as the A operand of the next GEMM (the same registers: a k16 A fragment is
// ((2 k, 2 rows, 2 k-halves)), the values of two neighbouring 8-column groups).
template <class L>
__host__ __device__ constexpr auto rows_cols(L const& l) {
  using cute::get;
  return cute::make_layout(cute::make_layout(get<0, 1>(l), get<1>(l)),
                           cute::make_layout(get<0, 0>(l), get<0, 2>(l), get<2>(l)));
}

template <class L>
__host__ __device__ constexpr auto acc_as_a(L const& l) {
  using cute::get;
  auto groups = cute::logical_divide(get<0, 2>(l), cute::Tile<cute::_2>{});  // ((2, n / 16))
  return cute::make_layout(cute::make_layout(get<0, 0>(l), get<0, 1>(l), get<0, 0>(groups)), get<1>(l),
                           cute::make_layout(get<0, 1>(groups), get<2>(l)));
}

}  // namespace kp_attention::hopper
