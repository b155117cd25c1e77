// The CuTe types of the forward kernel of one head dim and dtype: the MMA, the shared-memory
// layouts and the ldmatrix copies from shared memory to registers. Sizes come from
// fwd_tiles.h. sm_80 instructions only (mma.sync m16n8k16, cp.async, ldmatrix), so the same
// kernels run on sm_80 to sm_90.
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include "fwd_tiles.h"
#include "kp/dtype.cuh"

namespace kp_attention::fwd {

template <int DType> struct Element;
template <> struct Element<kp::kF16> {
  using type = cutlass::half_t;
  using Mma = cute::SM80_16x8x16_F32F16F16F32_TN;
};
template <> struct Element<kp::kBF16> {
  using type = cutlass::bfloat16_t;
  using Mma = cute::SM80_16x8x16_F32BF16BF16F32_TN;
};

template <int HeadDim, int DType>
struct Traits {
  static constexpr FwdTile kTile = *fwd_tile(HeadDim);
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kBlockM = kTile.block_m;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kWarps = kTile.warps;
  static constexpr int kThreads = kTile.threads();
  static constexpr int kSmemBytes = kTile.smem_bytes();
  static_assert(kBlockM % (16 * kWarps) == 0, "block_m: whole 16-row MMA tiles for every warp");
  static_assert(kBlockN % 16 == 0, "block_n: P V's k-steps are 16 keys (two 8-key score tiles)");
  static_assert(HeadDim % 32 == 0, "head_dim: whole 32-column swizzle atoms");

  using T = typename Element<DType>::type;

  // Warps side by side along the query rows; each covers 16 rows and every column of a step.
  // N = 16 (two 8-wide atoms a warp) lets one ldmatrix.x4 feed a k16 x n16 B operand.
  using TiledMma = cute::TiledMMA<cute::MMA_Atom<typename Element<DType>::Mma>,
                                  cute::Layout<cute::Shape<cute::Int<kWarps>, cute::_1, cute::_1>>,
                                  cute::Tile<cute::Int<16 * kWarps>, cute::_16, cute::_16>>;

  // Shared tiles are head-dim contiguous, in atoms of 8 rows x 64 columns (128-byte rows) XOR-
  // swizzled so the 8 rows of an ldmatrix fall in 8 different bank groups (no bank conflict); a
  // head dim that is not a multiple of 64 (96) takes 32-column atoms (64-byte rows, 4 groups).
  static constexpr int kAtomCols = HeadDim % 64 == 0 ? 64 : 32;
  using SmemAtom = decltype(cute::composition(
      cute::Swizzle<kAtomCols == 64 ? 3 : 2, 3, 3>{},
      cute::Layout<cute::Shape<cute::_8, cute::Int<kAtomCols>>, cute::Stride<cute::Int<kAtomCols>, cute::_1>>{}));
  using SmemQ = decltype(cute::tile_to_shape(SmemAtom{}, cute::Shape<cute::Int<kBlockM>, cute::Int<HeadDim>>{}));
  using SmemKV = decltype(cute::tile_to_shape(SmemAtom{}, cute::Shape<cute::Int<kBlockN>, cute::Int<HeadDim>>{}));
  // V read as the B operand of P V ([d, keys], keys the k dimension): the same bytes transposed,
  // loaded with ldmatrix.trans. The fragment takes its shape from the layout without the swizzle.
  using SmemVt = decltype(cute::composition(
      SmemKV{}, cute::make_layout(cute::Shape<cute::Int<HeadDim>, cute::Int<kBlockN>>{}, cute::GenRowMajor{})));
  using SmemVtShape = decltype(cute::get_nonswizzle_portion(SmemVt{}));

  // smem -> registers: ldmatrix.x4 (four 8x8 16-bit matrices a warp, one instruction).
  using LdsmQK = cute::Copy_Atom<cute::SM75_U32x4_LDSM_N, T>;
  using LdsmVt = cute::Copy_Atom<cute::SM75_U16x8_LDSM_T, T>;

  // global -> smem (fwd_gemm.cuh load_rows): cp.async of 16 bytes a thread (8 elements), a row of
  // an atom taken by kAtomCols / 8 neighbouring threads (coalesced 64- or 128-byte runs).
  static constexpr int kRowThreads = kAtomCols / 8;
  static_assert(kBlockM % (kThreads / kRowThreads) == 0 && kBlockN % (kThreads / kRowThreads) == 0,
                "block_m, block_n: whole cp.async passes (every thread copies as many rows)");
};

}  // namespace kp_attention::fwd
