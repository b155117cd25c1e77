// The CuTe types of the backward kernels of one head dim and dtype (sizes from bwd_tiles.h): the
// MMAs of each product with its warp grid, the shared-memory layouts (and their transposed views,
// read with ldmatrix.trans) and the copy atoms. sm_80 instructions only, like the forward
// (fwd_traits.cuh: the element types, the swizzle); the names load_rows / gemm_smem / gemm_pv read
// (kThreads, kRowThreads, kAtomCols, kHeadDim, T, TiledMma, LdsmQK, LdsmVt) mean what they mean there.
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include "bwd_tiles.h"
#include "fwd_traits.cuh"

namespace kp_attention::bwd {

// m16n8k16 MMAs on a grid of WM x WN warps; N = 16 a warp so one ldmatrix.x4 feeds a k16 x n16 B.
template <class Atom, int WM, int WN>
using MmaGrid = cute::TiledMMA<cute::MMA_Atom<Atom>, cute::Layout<cute::Shape<cute::Int<WM>, cute::Int<WN>, cute::_1>>,
                               cute::Tile<cute::Int<16 * WM>, cute::Int<16 * WN>, cute::_16>>;

// 8 rows x Cols 16-bit columns, XOR-swizzled (fwd_traits.cuh says why): Cols 64 or 32.
template <int Cols>
using SwizzleAtom = decltype(cute::composition(
    cute::Swizzle<Cols == 64 ? 3 : 2, 3, 3>{},
    cute::Layout<cute::Shape<cute::_8, cute::Int<Cols>>, cute::Stride<cute::Int<Cols>, cute::_1>>{}));

template <class L, int Rows, int Cols>
using SmemTile = decltype(cute::tile_to_shape(L{}, cute::Shape<cute::Int<Rows>, cute::Int<Cols>>{}));

// The [R, C] transposed view of a [C, R] shared tile (the same bytes), and its unswizzled shape
// (what a register fragment is shaped by).
template <class L, int R, int C>
using Transposed = decltype(cute::composition(L{}, cute::make_layout(cute::Shape<cute::Int<R>, cute::Int<C>>{},
                                                                     cute::GenRowMajor{})));
template <class L>
using Unswizzled = decltype(cute::get_nonswizzle_portion(L{}));

template <int HeadDim, int DType>
struct Traits {
  static constexpr BwdTile kTile = *bwd_tile(HeadDim);
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kBlockM = kTile.block_m;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kWarps = kTile.warps;
  static constexpr int kThreads = kTile.threads();
  static constexpr int kSmemBytes = kTile.smem_bytes();
  using T = typename fwd::Element<DType>::type;
  using Atom = typename fwd::Element<DType>::Mma;

  using MmaSdp = MmaGrid<Atom, kTile.sdp_m, kWarps / kTile.sdp_m>;  // S, dP [block_m, block_n]
  using MmaKV = MmaGrid<Atom, kTile.kv_n, kWarps / kTile.kv_n>;     // dK, dV [block_n, d]
  using MmaDq = MmaGrid<Atom, kTile.dq_m, kWarps / kTile.dq_m>;     // dQ [block_m, d]
  static_assert(kBlockM % (16 * kTile.sdp_m) == 0 && kBlockN % (16 * (kWarps / kTile.sdp_m)) == 0, "S tile");
  static_assert(kBlockN % (16 * kTile.kv_n) == 0 && HeadDim % (16 * (kWarps / kTile.kv_n)) == 0, "dK tile");
  static_assert(kBlockM % (16 * kTile.dq_m) == 0 && HeadDim % (16 * (kWarps / kTile.dq_m)) == 0, "dQ tile");
  static_assert(kBlockN % 64 == 0, "P, dS: whole 64-column swizzle atoms");
  static_assert(HeadDim % 32 == 0, "head_dim: whole 32-column swizzle atoms");

  static constexpr int kAtomCols = HeadDim % 64 == 0 ? 64 : 32;
  static constexpr int kRowThreads = kAtomCols / 8;
  static_assert(kBlockM % (kThreads / kRowThreads) == 0 && kBlockN % (kThreads / kRowThreads) == 0,
                "block_m, block_n: whole cp.async passes");
  using SmemQ = SmemTile<SwizzleAtom<kAtomCols>, kBlockM, HeadDim>;   // q, dO
  using SmemKV = SmemTile<SwizzleAtom<kAtomCols>, kBlockN, HeadDim>;  // k, v
  using SmemPdS = SmemTile<SwizzleAtom<64>, kBlockM, kBlockN>;        // P, dS (16-bit)
  using SmemQt = Transposed<SmemQ, HeadDim, kBlockM>;                 // B of dV += P^T dO, dK += dS^T Q
  using SmemKt = Transposed<SmemKV, HeadDim, kBlockN>;                // B of dQ = dS K
  using SmemPdSt = Transposed<SmemPdS, kBlockN, kBlockM>;             // A of dV, dK

  using LdsmN = cute::Copy_Atom<cute::SM75_U32x4_LDSM_N, T>;
  using LdsmT = cute::Copy_Atom<cute::SM75_U16x8_LDSM_T, T>;
  using StoreC = cute::Copy_Atom<cute::AutoVectorizingCopyWithAssumedAlignment<32>, T>;  // P, dS -> smem
};

// The deterministic dq kernel: the forward's shape (warps side by side along the query rows, 16
// rows each), its own tile.
template <int HeadDim, int DType>
struct DqTraits {
  static constexpr BwdTile kTile = *bwd_tile(HeadDim);
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kBlockM = kTile.dq_block_m;
  static constexpr int kBlockN = kTile.dq_block_n;
  static constexpr int kWarps = kTile.dq_warps;
  static constexpr int kThreads = kTile.dq_threads();
  static constexpr int kSmemBytes = kTile.dq_smem_bytes();
  using T = typename fwd::Element<DType>::type;
  using TiledMma = cute::TiledMMA<cute::MMA_Atom<typename fwd::Element<DType>::Mma>,
                                  cute::Layout<cute::Shape<cute::Int<kWarps>, cute::_1, cute::_1>>,
                                  cute::Tile<cute::Int<16 * kWarps>, cute::_16, cute::_16>>;
  static_assert(kBlockM == 16 * kWarps, "16 query rows a warp");
  static_assert(kBlockN % 16 == 0 && HeadDim % 32 == 0, "dq tile");
  static constexpr int kAtomCols = HeadDim % 64 == 0 ? 64 : 32;
  static constexpr int kRowThreads = kAtomCols / 8;
  static_assert(kBlockM % (kThreads / kRowThreads) == 0 && kBlockN % (kThreads / kRowThreads) == 0,
                "whole cp.async passes");
  using SmemQ = SmemTile<SwizzleAtom<kAtomCols>, kBlockM, HeadDim>;
  using SmemKV = SmemTile<SwizzleAtom<kAtomCols>, kBlockN, HeadDim>;
  using SmemVt = Transposed<SmemKV, HeadDim, kBlockN>;  // K^T: B of dQ += dS K (gemm_pv)
  using SmemVtShape = Unswizzled<SmemVt>;
  using LdsmQK = cute::Copy_Atom<cute::SM75_U32x4_LDSM_N, T>;
  using LdsmVt = cute::Copy_Atom<cute::SM75_U16x8_LDSM_T, T>;
};

}  // namespace kp_attention::bwd
