// gated_linear's sm90a table: the kernels of the gated GEMM (kp/gemm/sm90_gated.h), one row each,
// and the rule that picks a row for a call. Each row is instantiated for bf16 and fp16
// (gated_sm90.cu): 6 kernels. `kp_fused_mlp._cuda.gated_plan(m)` reports the row a call gets;
// `config=` on the native call forces one (tests run every row).
//
// The rows are linear_act's three rows above its decode row (gemm_table.h: swept on an H200 for
// N = 2I shapes), not swept for the gated epilogue yet. With N = 2I interleaved, a 128 x N tile
// writes 128 x N/2 of h.
//   pingpong_128x128_c1x2   M <= 128: one tile row, so a cluster along M would idle its second CTA
//                           (linear_act: c2x1 ran 1.7x slower at M = 128); the pair shares x tiles.
//   pingpong_128x128_c2x1   M <= 4096: the epilogue of one consumer warpgroup runs under the
//                           other's mainloop (the gated epilogue does more math a column than
//                           bias + act: the overlap matters more here).
//   coop_128x256_c2x1       larger M: the large-GEMM tile, a cluster of 2 along M sharing Wi tiles
//                           through TMA multicast. Its epilogue is not hidden: 64 4-byte stores a
//                           thread a tile (128 with the pre-activations), against a mainloop of
//                           K / 64 k-blocks of 128 x 256 x 64.
// Decode sizes (M <= 32) are meant for the GEMV (branch decode-gemv) once it serves gated_linear.
#pragma once
#include <cstdint>

#include "kp/gemm/config.h"

namespace kp_fused_mlp {

struct GatedTable {
  using Cfg = kp::gemm::Sm90TileConfig;
  static constexpr auto kCoop = kp::gemm::Sm90Schedule::kCooperative;
  static constexpr auto kPingpong = kp::gemm::Sm90Schedule::kPingpong;
  static constexpr auto kAuto = kp::gemm::Sm90Raster::kHeuristic;

  static constexpr Cfg rows[] = {
      //  name                 tile m    n   k  cluster m n  schedule   swizzle raster max_m
      {"pingpong_128x128_c1x2",   128, 128, 64,         1, 2, kPingpong, 1,      kAuto, 128},
      {"pingpong_128x128_c2x1",   128, 128, 64,         2, 1, kPingpong, 1,      kAuto, 4096},
      {"coop_128x256_c2x1",       128, 256, 64,         2, 1, kCoop,     1,      kAuto, 0},
  };
  static constexpr int size = sizeof(rows) / sizeof(rows[0]);
};

template <int Row>
using GatedRow = kp::gemm::TableRow<GatedTable, Row>;

inline int pick_gated_row(int64_t m) { return kp::gemm::pick_row<GatedTable>(m); }

}  // namespace kp_fused_mlp
