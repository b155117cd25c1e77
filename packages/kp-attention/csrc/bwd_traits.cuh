// The CuTe types of the backward kernels of one head dim and dtype (sizes from bwd_tiles.h): the
// MMAs of each product with its warp grid, the shared-memory layouts (and their transposed views,
// read with ldmatrix.trans) and the copy atoms. sm_80 instructions only, like the forward
// (fwd_traits.cuh: the element types, the swizzle, the MMA grids, TileSizes); the names load_rows /
// gemm_smem / gemm_pv read (kThreads, kRowThreads, kAtomCols, kHeadDim, T, TiledMma, LdsmQK, LdsmVt)
// mean what they mean there.
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include "bwd_tiles.h"
#include "fwd_traits.cuh"

namespace kp_attention::bwd {

using fwd::MmaGrid;
using fwd::SmemTile;
using fwd::SwizzleAtom;
using fwd::Transposed;
using fwd::Unswizzled;

template <int HeadDim>
using BwdSizes = fwd::TileSizes<HeadDim, bwd_tile(HeadDim)->block_m, bwd_tile(HeadDim)->block_n,
                                bwd_tile(HeadDim)->warps, bwd_tile(HeadDim)->smem_bytes()>;

template <int HeadDim, int DType>
struct Traits : BwdSizes<HeadDim> {
  using Sizes = BwdSizes<HeadDim>;
  using Sizes::kBlockM, Sizes::kBlockN, Sizes::kWarps, Sizes::kAtomCols;
  static constexpr BwdTile kTile = *bwd_tile(HeadDim);
  using T = typename fwd::Element<DType>::type;
  using Atom = typename fwd::Element<DType>::Mma;

  using MmaSdp = MmaGrid<Atom, kTile.sdp_m, kWarps / kTile.sdp_m>;  // S, dP [block_m, block_n]
  using MmaKV = MmaGrid<Atom, kTile.kv_n, kWarps / kTile.kv_n>;     // dK, dV [block_n, d]
  using MmaDq = MmaGrid<Atom, kTile.dq_m, kWarps / kTile.dq_m>;     // dQ [block_m, d]
  static_assert(kBlockM % (16 * kTile.sdp_m) == 0 && kBlockN % (16 * (kWarps / kTile.sdp_m)) == 0, "S tile");
  static_assert(kBlockN % (16 * kTile.kv_n) == 0 && HeadDim % (16 * (kWarps / kTile.kv_n)) == 0, "dK tile");
  static_assert(kBlockM % (16 * kTile.dq_m) == 0 && HeadDim % (16 * (kWarps / kTile.dq_m)) == 0, "dQ tile");
  static_assert(kBlockN % 64 == 0, "P, dS: whole 64-column swizzle atoms");

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
template <int HeadDim>
using DqSizes = fwd::TileSizes<HeadDim, bwd_tile(HeadDim)->dq_block_m, bwd_tile(HeadDim)->dq_block_n,
                               bwd_tile(HeadDim)->dq_warps, bwd_tile(HeadDim)->dq_smem_bytes()>;

template <int HeadDim, int DType>
struct DqTraits : DqSizes<HeadDim> {
  using Sizes = DqSizes<HeadDim>;
  using Sizes::kBlockM, Sizes::kBlockN, Sizes::kWarps, Sizes::kAtomCols;
  using T = typename fwd::Element<DType>::type;
  using TiledMma = MmaGrid<typename fwd::Element<DType>::Mma, kWarps, 1>;
  static_assert(kBlockM == 16 * kWarps, "16 query rows a warp");
  static_assert(kBlockN % 16 == 0, "dq tile");
  using SmemQ = SmemTile<SwizzleAtom<kAtomCols>, kBlockM, HeadDim>;
  using SmemKV = SmemTile<SwizzleAtom<kAtomCols>, kBlockN, HeadDim>;
  using SmemVt = Transposed<SmemKV, HeadDim, kBlockN>;  // K^T: B of dQ += dS K (gemm_pv)
  using SmemVtShape = Unswizzled<SmemVt>;
  using LdsmQK = cute::Copy_Atom<cute::SM75_U32x4_LDSM_N, T>;
  using LdsmVt = cute::Copy_Atom<cute::SM75_U16x8_LDSM_T, T>;
};

}  // namespace kp_attention::bwd
