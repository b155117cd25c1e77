// kp-fused-mlp's GEMM table: the sm90a kernels linear_act can run, one row each, and the rule that
// picks a row for a call. Every row is instantiated for bf16 and fp16 and for both epilogues
// (identity, bias_act): 4 kernels a row (linear_act_sm90_bf16.cu, linear_act_sm90_fp16.cu).
// `kp_fused_mlp._cuda.gemm_plan(m, n, k)` reports the row a call gets; `config=` on the native
// call forces one (tests run every row; sweeps).
//
// Rows (the first whose max_m is 0 or >= M wins). Swept on an H200 (2026-11-25, bf16, K = 4096-28672,
// N = 4096-28672; docs/journal/kp-fused-mlp.md): 7 candidate rows, bare GEMM and bias + SiLU.
//   pingpong_64x128          M <= 64 (decode): a 128-row tile would be half padding. Two consumer
//                            warpgroups on two 64 x 128 tiles, one's epilogue under the other's mainloop.
//   pingpong_128x128_c1x2    M <= 128: one tile row, so a cluster along M would leave its second CTA
//                            idle (c2x1 ran 1.7x slower at M = 128); the pair shares x tiles along N.
//                            1.03x torch.mm at 128 x 4096 x 14336.
//   pingpong_128x128_c2x1    M <= 4096: enough tiles that the epilogue hidden under the other
//                            warpgroup's mainloop is worth the smaller tile (1.01-1.02x torch.mm at
//                            M = 1024-4096; the 128 x 256 cooperative tile 0.85x at M = 1024).
//   coop_256x192_c1x2        M > 4096 and N >= 12288: the tile with the most FLOPs per byte a CTA
//                            loads (256 x 192: 110 MACs per loaded element, 128 x 256: 85), a
//                            cluster of 2 along N sharing the x tiles. The GEMM is power-bound:
//                            under sustained load (tools/gemm_sustained.py, H200, 2026-11-26) the
//                            128 x 256 tile ran at 1256-1409 MHz and 0.92-0.95x torch.mm at
//                            4096 -> 14336 and 8192 -> 28672, this one at 1414-1479 MHz and
//                            0.96-1.00x (flushed single calls: 1.00x, against 0.93x). Not below
//                            N = 12288: at N = 4096 its 704 tiles are 5.3 waves of 132 SMs
//                            (0.91x torch.mm at 14336 -> 4096, where 128 x 256 ties it).
//   coop_128x256_c2x1        the large-GEMM tile (each consumer warpgroup a 64 x 256 wgmma: the most
//                            FLOPs per smem byte), a cluster of 2 along M sharing W tiles through TMA
//                            multicast; 1.01-1.05x torch.mm at M = 8192 but for N = 28672 (0.97x).
// Tried and dropped: coop 256 x 128 (c1x2), coop 128 x 256 without a cluster, pingpong 64 x 256
// (c1x2): none won a shape (the 64 x 256 pingpong ran at half speed past M = 4096). 2026-11-26, sustained (gemm-sustained.txt):
// pingpong 64 x 256 c2x1, coop 128 x 256 c1x2 and coop 256 x 128 c1x2 lost or tied at every shape.
// 2026-11-29 (8192 tokens, branches gemm-stream-k and gemm-n-split): stream-K twins of the two
// cooperative rows, 1-2% slower (the split tiles' fix-up costs more than the last round's tail);
// 192 x 192 and 320 x 128 tiles (cuBLAS's) with the consumers split along N, 5-21% slower.
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
      //  name                 tile m    n   k  cluster m n  schedule   swizzle raster max_m min_n
      {"pingpong_64x128",          64, 128, 64,         1, 1, kPingpong, 1,      kAuto, 64},
      {"pingpong_128x128_c1x2",   128, 128, 64,         1, 2, kPingpong, 1,      kAuto, 128},
      {"pingpong_128x128_c2x1",   128, 128, 64,         2, 1, kPingpong, 1,      kAuto, 4096},
      {"coop_256x192_c1x2",       256, 192, 64,         1, 2, kCoop,     1,      kAuto, 0,     12288},
      {"coop_128x256_c2x1",       128, 256, 64,         2, 1, kCoop,     1,      kAuto, 0},
  };
  static constexpr int size = sizeof(rows) / sizeof(rows[0]);
};

template <int Row>
using GemmRow = kp::gemm::TableRow<GemmTable, Row>;

// The row a call of M rows and N output columns gets (n = 0: the rows for any N).
inline int pick_gemm_row(int64_t m, int64_t n) { return kp::gemm::pick_row<GemmTable>(m, n); }

}  // namespace kp_fused_mlp
