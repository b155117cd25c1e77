// The CuTe types of the Hopper backward of one head dim and dtype (hopper_bwd.h has the tile table
// and the CTA's plan): shared-memory layouts in wgmma's 128-byte swizzle with the transposed views
// the gradient GEMMs read, the four warpgroup MMAs and the TMA copies. Types only: compiles on every
// arch; the kernel body is sm_90a-only (hopper_bwd_kernel.cuh).
#pragma once
#include <cute/tensor.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/numeric_types.h>

#include <cstdint>

#include "hopper_bwd.h"
#include "hopper_fwd_traits.cuh"  // Element, rows_cols, acc_as_a

namespace kp_attention::hopper_bwd {

using hopper::Element;

template <int Rows, int Cols, int Stages>
using Shape3 = cute::Shape<cute::Int<Rows>, cute::Int<Cols>, cute::Int<Stages>>;

// The [Cols, Rows, Stages] view of a [Rows, Cols, Stages] tile (the same bytes): a K-major operand
// read as an MN-major one (wgmma transposes 16-bit operands from shared memory).
template <class L, int Rows, int Cols, int Stages>
using Transposed = decltype(cute::composition(
    L{}, cute::make_ordered_layout(Shape3<Cols, Rows, Stages>{}, cute::Step<cute::_2, cute::_1, cute::_3>{})));

template <int HeadDim, int DType>
struct Traits {
  static constexpr HopperBwdTile kTile = *hopper_bwd_tile(HeadDim);
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kBlockM = kTile.block_m;  // query rows a step
  static constexpr int kBlockN = kTile.block_n;  // keys a CTA
  static constexpr int kStages = kTile.stages;
  static constexpr int kThreads = kTile.threads();
  static constexpr int kProducerRegs = kTile.producer_regs;
  static constexpr int kConsumerRegs = kTile.consumer_regs;
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * HopperBwdTile::kConsumers <= 168 * kThreads,
                "setmaxnreg: no more registers than the launch holds");
  static_assert(kBlockN == 64 * HopperBwdTile::kConsumers, "one 64-key wgmma M a consumer warpgroup");
  static_assert(kBlockM % 64 == 0 && kBlockM <= 256, "block_m: whole 64-row dQ tiles, one wgmma N of S^T");

  // dQ [block_m, d] = dS K in 64 x 64 tiles, one a consumer warpgroup (hopper_bwd.h): split by
  // columns at d 128 (block_m 64), by rows at d 64 (block_m 128); each sums all block_n keys.
  static_assert(kBlockM * HeadDim == 64 * 64 * HopperBwdTile::kConsumers, "dQ: one 64 x 64 tile a warpgroup");
  static constexpr bool kDqByRows = kBlockM > 64;

  using T = typename Element<DType>::type;

  // K-major tiles (head dim contiguous), the layout TMA writes: q, dO [block_m, d, stages]; k, v
  // [block_n, d]. dS [block_m, block_n, 2 buffers] is M-major (query rows contiguous): a consumer
  // holds dS^T (keys x queries) and stores column pairs of it as 4-byte words, and dQ = dS K reads
  // it as an MN-major A.
  using AtomK = cute::GMMA::Layout_K_SW128_Atom<T>;
  using AtomMN = cute::GMMA::Layout_MN_SW128_Atom<T>;
  using SmemQ = decltype(cute::tile_to_shape(AtomK{}, Shape3<kBlockM, HeadDim, kStages>{}));
  using SmemQStage = decltype(cute::tile_to_shape(AtomK{}, cute::Shape<cute::Int<kBlockM>, cute::Int<HeadDim>>{}));
  using SmemKV = decltype(cute::tile_to_shape(AtomK{}, cute::Shape<cute::Int<kBlockN>, cute::Int<HeadDim>>{}));
  using SmemDS = decltype(cute::tile_to_shape(AtomMN{}, Shape3<kBlockM, kBlockN, 2>{}));
  // B operands [d, rows]: Q, dO for dK += dS^T Q, dV += P^T dO; K for dQ = dS K
  using SmemQt = Transposed<SmemQ, kBlockM, HeadDim, kStages>;
  using SmemKt = decltype(cute::composition(
      SmemKV{}, cute::make_ordered_layout(cute::Shape<cute::Int<HeadDim>, cute::Int<kBlockN>>{},
                                          cute::Step<cute::_2, cute::_1>{})));

  // A consumer warpgroup's MMAs (M = 64 keys, or 64 query rows for dQ):
  //   S^T, dP^T [64 keys, block_m] = K, V [64, d] x Q, dO [block_m, d]^T    SS, both K-major
  //   dK, dV [64 keys, d] += dS^T, P^T [64, block_m] (registers) x Q, dO    RS, B MN-major
  //   dQ [64, 64] = dS [64, block_n] x K [block_n, 64]                     SS, both MN-major
  using MmaSdp = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<T, T, float, cute::Shape<cute::_64, cute::Int<kBlockM>, cute::Int<HeadDim>>>()));
  using MmaKV = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<T, T, float, cute::Shape<cute::_64, cute::Int<HeadDim>, cute::Int<kBlockM>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>()));
  using MmaDq = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<T, T, float, cute::Shape<cute::_64, cute::_64, cute::Int<kBlockN>>,
                                 cute::GMMA::Major::MN, cute::GMMA::Major::MN>()));

  // The global tensors as TMA sees them: hopper_fwd_traits.cuh's (rows, d, heads, batch).
  using GLayout = typename hopper::Traits<HeadDim, DType>::GLayout;
  static auto gtensor(const void* ptr, GLayout const& l) {
    return cute::make_tensor(cute::make_gmem_ptr(static_cast<const T*>(ptr)), l);
  }
  using TmaQ = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, gtensor(nullptr, GLayout{}), SmemQStage{}));
  using TmaKV = decltype(cute::make_tma_copy(cute::SM90_TMA_LOAD{}, gtensor(nullptr, GLayout{}), SmemKV{}));

  static constexpr uint32_t kQBytes = kBlockM * HeadDim * sizeof(T);
  static constexpr uint32_t kKVBytes = kBlockN * HeadDim * sizeof(T);
  static constexpr int kTileBytes = (2 * kBlockN + 2 * kStages * kBlockM) * HeadDim * int(sizeof(T)) +
                                    2 * kBlockM * kBlockN * int(sizeof(T));
  static_assert(kTileBytes == kTile.smem_bytes(), "hopper_bwd.h's smem formula");
  // lse (exp2 units) and delta of each stage's rows, fp32, after the tiles
  static constexpr int kRowBytes = 2 * kStages * kBlockM * 4;
  // kv_full, then q_full, q_empty, do_full, do_empty of every stage (8 bytes each)
  static constexpr int kBarriers = 1 + 4 * kStages;
  // + 1 KB: the dynamic smem base is aligned up to the swizzle's 1024 bytes in the kernel
  static constexpr int kSmemBytes = kTileBytes + kRowBytes + 8 * kBarriers + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "a CTA's smem on sm_90");
};

template <class Tr>
struct Params {
  typename Tr::TmaQ tma_q, tma_do;
  typename Tr::TmaKV tma_k, tma_v;
  BwdParams p;
  int32_t q_rows, q_batches, k_rows, k_batches;
  // GQA split (hopper_bwd.h): kv_splits CTAs share a key block's query heads, heads_per_cta each,
  // and add their dK, dV (fp32, unscaled) into dkv_accum (dk like dk, then dv at dv_offset);
  // kv_splits == 1: dK, dV stored directly.
  float* dkv_accum;
  int64_t dv_offset;
  int kv_splits, heads_per_cta;
};

}  // namespace kp_attention::hopper_bwd
