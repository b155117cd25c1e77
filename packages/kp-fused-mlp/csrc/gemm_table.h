// kp-fused-mlp's GEMM table: the sm90a kernels linear_act can run, one row each, and the rule that
// picks a row for a call. Every row is instantiated for bf16 and fp16 and for both epilogues
// (identity, bias_act): 4 kernels a row (linear_act_sm90_bf16.cu, linear_act_sm90_fp16.cu).
// `kp_fused_mlp._cuda.gemm_plan(m, n, k)` reports the row a call gets; `config=` on the native
// call forces one (tests run every row; sweeps).
//
// Rows (the first whose max_m is 0 or >= M wins):
//   pingpong_64x128   M <= 64 (decode, small batches): a 128-row tile would be half padding. Two
//                     consumer warpgroups on two 64 x 128 tiles, one's epilogue under the other's
//                     mainloop; 9 smem stages of 24 KB.
//   coop_128x256_c2x1 everything else: the large-GEMM tile (each consumer warpgroup a 64 x 256 wgmma,
//                     the largest there is: the most FLOPs per smem byte), 4 stages of 48 KB; a
//                     cluster of 2 along M shares each W tile through TMA multicast (half the L2 ->
//                     smem traffic of W).
// Not measured yet (no GPU in the session that wrote it): the rows, swizzles and the M cut are the
// starting points CUTLASS's own Hopper examples and profiler use for 16-bit GEMMs, to be swept on
// the H200 (the acceptance target: bf16 8192^3 at >= 0.95x torch.mm). Mid-size M with few tiles
// (M = 128-1024 at N = 4096: 16-128 tiles of 128 x 256 on 132 SMs) is where a stream-K row or a
// 128 x 128 row would earn its compile time; sweep before adding one.
#pragma once
#include <cstdint>

#include "kp/gemm/config.h"

namespace kp_fused_mlp {

struct GemmTable {
  using Cfg = kp::gemm::Sm90TileConfig;
  static constexpr auto kCoop = kp::gemm::Sm90Schedule::kCooperative;
  static constexpr auto kPingpong = kp::gemm::Sm90Schedule::kPingpong;
  static constexpr auto kAuto = kp::gemm::Sm90Raster::kHeuristic;

  static constexpr Cfg rows[] = {
      //  name                 tile m    n   k  cluster m n  schedule   swizzle raster max_m
      {"pingpong_64x128",          64, 128, 64,         1, 1, kPingpong, 1,      kAuto, 64},
      {"coop_128x256_c2x1",       128, 256, 64,         2, 1, kCoop,     1,      kAuto, 0},
  };
  static constexpr int size = sizeof(rows) / sizeof(rows[0]);
};

template <int Row>
using GemmRow = kp::gemm::TableRow<GemmTable, Row>;

// The row a call of M rows gets.
inline int pick_gemm_row(int64_t m) {
  for (int i = 0; i < GemmTable::size; ++i)
    if (GemmTable::rows[i].max_m == 0 || m <= GemmTable::rows[i].max_m) return i;
  return GemmTable::size - 1;
}

}  // namespace kp_fused_mlp
