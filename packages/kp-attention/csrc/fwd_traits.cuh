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

// m16n8k16 MMAs on a grid of WM x WN warps; N = 16 a warp (two 8-wide atoms) so one ldmatrix.x4
// feeds a k16 x n16 B operand.
template <class Atom, int WM, int WN>
using MmaGrid = cute::TiledMMA<cute::MMA_Atom<Atom>, cute::Layout<cute::Shape<cute::Int<WM>, cute::Int<WN>, cute::_1>>,
                               cute::Tile<cute::Int<16 * WM>, cute::Int<16 * WN>, cute::_16>>;

// Shared tiles are head-dim contiguous, in atoms of 8 rows x 64 columns (128-byte rows) XOR-
// swizzled so the 8 rows of an ldmatrix fall in 8 different bank groups (no bank conflict); a
// head dim that is not a multiple of 64 (96) takes 32-column atoms (64-byte rows, 4 groups).
template <int Cols>
using SwizzleAtom = decltype(cute::composition(
    cute::Swizzle<Cols == 64 ? 3 : 2, 3, 3>{},
    cute::Layout<cute::Shape<cute::_8, cute::Int<Cols>>, cute::Stride<cute::Int<Cols>, cute::_1>>{}));

template <class L, int Rows, int Cols>
using SmemTile = decltype(cute::tile_to_shape(L{}, cute::Shape<cute::Int<Rows>, cute::Int<Cols>>{}));

// The [R, C] transposed view of a [C, R] shared tile (the same bytes, loaded with ldmatrix.trans),
// and its shape without the swizzle (what a register fragment takes its shape from).
template <class L, int R, int C>
using Transposed = decltype(cute::composition(L{}, cute::make_layout(cute::Shape<cute::Int<R>, cute::Int<C>>{},
                                                                     cute::GenRowMajor{})));
template <class L>
using Unswizzled = decltype(cute::get_nonswizzle_portion(L{}));

// The sizes a kernel's traits carry (the names fwd_gemm.cuh and the kernels read: Tr::kBlockM, ...)
// from its tile row, and the shape of its cp.async loads (fwd_gemm.cuh load_rows): 16 bytes a
// thread (8 elements), a row of a swizzle atom (kAtomCols columns) taken by kAtomCols / 8
// neighbouring threads (coalesced 64- or 128-byte runs).
template <int HeadDim, int BlockM, int BlockN, int Warps, int SmemBytes>
struct TileSizes {
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kBlockM = BlockM;
  static constexpr int kBlockN = BlockN;
  static constexpr int kWarps = Warps;
  static constexpr int kThreads = 32 * Warps;
  static constexpr int kSmemBytes = SmemBytes;
  static_assert(HeadDim % 32 == 0, "head_dim: whole 32-column swizzle atoms");
  static constexpr int kAtomCols = HeadDim % 64 == 0 ? 64 : 32;
  static constexpr int kRowThreads = kAtomCols / 8;
  static_assert(BlockM % (kThreads / kRowThreads) == 0 && BlockN % (kThreads / kRowThreads) == 0,
                "block_m, block_n: whole cp.async passes (every thread copies as many rows)");
};

// The TileSizes of the forward's row of head_dim (fwd_tiles.h).
template <int HeadDim>
using FwdSizes = TileSizes<HeadDim, fwd_tile(HeadDim)->block_m, fwd_tile(HeadDim)->block_n, fwd_tile(HeadDim)->warps,
                           fwd_tile(HeadDim)->smem_bytes()>;

template <int HeadDim, int DType>
struct Traits : FwdSizes<HeadDim> {
  using Sizes = FwdSizes<HeadDim>;
  using Sizes::kBlockM, Sizes::kBlockN, Sizes::kWarps, Sizes::kAtomCols;
  static_assert(kBlockM % (16 * kWarps) == 0, "block_m: whole 16-row MMA tiles for every warp");
  static_assert(kBlockN % 16 == 0, "block_n: P V's k-steps are 16 keys (two 8-key score tiles)");

  using T = typename Element<DType>::type;

  // Warps side by side along the query rows; each covers 16 rows and every column of a step.
  using TiledMma = MmaGrid<typename Element<DType>::Mma, kWarps, 1>;

  using SmemAtom = SwizzleAtom<kAtomCols>;
  using SmemQ = SmemTile<SmemAtom, kBlockM, HeadDim>;
  using SmemKV = SmemTile<SmemAtom, kBlockN, HeadDim>;
  // V read as the B operand of P V ([d, keys], keys the k dimension).
  using SmemVt = Transposed<SmemKV, HeadDim, kBlockN>;
  using SmemVtShape = Unswizzled<SmemVt>;

  // smem -> registers: ldmatrix.x4 (four 8x8 16-bit matrices a warp, one instruction).
  using LdsmQK = cute::Copy_Atom<cute::SM75_U32x4_LDSM_N, T>;
  using LdsmVt = cute::Copy_Atom<cute::SM75_U16x8_LDSM_T, T>;
};

}  // namespace kp_attention::fwd
