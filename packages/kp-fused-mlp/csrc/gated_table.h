// gated_linear's sm90a table: the kernels of the gated GEMM (kp/gemm/sm90_gated.h), one row each,
// and the rule that picks a row for a call. Each row is instantiated for bf16 and fp16
// (gated_sm90.cu): 10 kernels. `kp_fused_mlp._cuda.gated_plan(m, inter, hidden)` reports the row a call gets;
// `config=` on the native call forces one (tests run every row).
//
// The rows are linear_act's three rows above its decode row (gemm_table.h). With N = 2I
// interleaved, a 128 x N tile writes 128 x N/2 of h. Scheduler swept on an H200 (2026-11-26, 8192
// tokens, bf16, silu, swizzle 1/2/4/8 x raster M/N/heuristic, triton's do_bench against torch.mm
// onto [Wg; Wu]): swizzle 8 along N is the best setting of both large rows at both shapes; against
// the swizzle-1 heuristic raster, 4096 -> 14336: coop 0.891 -> 0.920x torch.mm, pingpong c2x1
// 0.83 -> 0.929x; 8192 -> 28672: coop 0.947 -> 0.992x, pingpong c2x1 0.80 -> 0.947x. Grouping 8
// tiles along N keeps a band of x rows and 8 tile columns of Wi in L2 at once; with swizzle 1 the
// W tiles of a row of tiles (a 28672-wide N) stream from DRAM again for every band of M.
//   pingpong_128x128_c1x2   M <= 128: one tile row, so a cluster along M would idle its second CTA
//                           (linear_act: c2x1 ran 1.7x slower at M = 128); the pair shares x tiles.
//   pingpong_128x128_c2x1   M <= 4096 (and at K <= 4096, kGatedPingpongMaxK below): the
//                           epilogue of one consumer warpgroup runs under the other's mainloop
//                           (the gated epilogue does more math a column than bias + act: the
//                           overlap matters more here).
//   coop_256x192_c1x2       larger M and N = 2I >= 12288: linear_act's wide-output tile
//                           (gemm_table.h says why: more FLOPs per loaded byte, so a higher clock
//                           under the power limit), 96 h columns a tile; the row's scheduler as
//                           coop_128x256_c2x1's (swizzle 8 along N), not swept on its own yet.
//   coop_128x256_c2x1       larger M: the large-GEMM tile, a cluster of 2 along M sharing Wi tiles
//                           through TMA multicast. Its epilogue is not hidden: 64 4-byte stores a
//                           thread a tile (128 with the pre-activations), against a mainloop of
//                           K / 64 k-blocks of 128 x 256 x 64.
//   pingpong_128x192_c2x1   M > 4096 where K <= 4096 (Llama-3-8B's shape at 8192 tokens): the
//                           pingpong schedule with fewer L2 bytes a multiply-add (below).
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
  static constexpr auto kAlongN = kp::gemm::Sm90Raster::kAlongN;

  static constexpr Cfg rows[] = {
      //  name                 tile m    n   k  cluster m n  schedule   swizzle raster max_m min_n
      {"pingpong_128x128_c1x2",   128, 128, 64,         1, 2, kPingpong, 1,      kAuto, 128},
      {"pingpong_128x128_c2x1",   128, 128, 64,         2, 1, kPingpong, 8,      kAlongN, 4096},
      {"coop_256x192_c1x2",       256, 192, 64,         1, 2, kCoop,     8,      kAlongN, 0,     12288},
      {"coop_128x256_c2x1",       128, 256, 64,         2, 1, kCoop,     8,      kAlongN, 0},
      // Only by pick_gated_row's short-K cut past 4096 tokens (min_n keeps pick_row off it).
      {"pingpong_128x192_c2x1",   128, 192, 64,         2, 1, kPingpong, 8,      kAlongN, 0,     1 << 30},
  };
  static constexpr int size = sizeof(rows) / sizeof(rows[0]);
};
static_assert(GatedTable::rows[1].schedule == kp::gemm::Sm90Schedule::kPingpong && GatedTable::rows[1].cluster_m == 2,
              "pick_gated_row's short-K cut names row 1: pingpong_128x128_c2x1");
static_assert(GatedTable::rows[4].schedule == kp::gemm::Sm90Schedule::kPingpong && GatedTable::rows[4].tile_n == 192,
              "pick_gated_row's short-K cut past 4096 tokens names row 4: pingpong_128x192_c2x1");

template <int Row>
using GatedRow = kp::gemm::TableRow<GatedTable, Row>;

// Past max_m the pingpong row still serves a short K (the hidden size): its epilogue, which here
// writes h and, when training, the pre-activations P (1.5x the output columns), runs under the
// other consumer's mainloop, worth more than the wide tile where the mainloop is short. H200,
// 2026-11-29, 8192 tokens, bf16 (docs/benchmarks/h200/fused-mlp-2026-11-29-s31-pingpong-rows/;
// gemm_bwd_table.h names the three regimes), against torch.compile of the unfused projections +
// silu * mul:                        windows          paired           flushed
//   4096 -> 2 x 14336     pingpong     1.049x           1.092x           1.047x
//                         coop_256x192 0.973x           0.979x           1.000x
//                         coop_128x256 0.990x           1.004x           1.006x
//     saving P            pingpong     0.995x           1.068x           0.971x
//                         coop_256x192 0.950x           0.912x           0.947x
//                         coop_128x256 0.983x           0.905x           0.928x
//   8192 -> 2 x 28672     pingpong 0.951x in windows (1.047x paired), coop 0.991-0.995x: no cut.
constexpr int64_t kGatedPingpongMaxK = 4096;

// Past 4096 tokens the short-K cut takes the wider pingpong tile, 128 x 192 (96 h columns a consumer
// tile): (128 + 192 / 2) / (128 x 192) = 0.0091 operand elements from L2 a multiply-add against
// 0.0117 for 128 x 128, which a GPU that starts a call cool turns into clock. H200, 4096 -> 2 x 14336
// at 8192 tokens, bf16, against pingpong_128x128_c2x1, two runs (2026-11-29 and -30,
// docs/benchmarks/h200/fused-mlp-2026-11-30-s36-cluster-2x2/README.md, parts 3-4):
//                        paired           windows          spaced (L2 flushed, the GPU idle 30 ms)
//   without P            0.986-0.988x     0.997-1.004x     1.024x
//   saving P             0.990-0.994x     1.014-1.015x     1.033x
// The regimes the bench harness reports (flushed single calls, sustained windows) both gain; rounds
// of every candidate back to back lose 1%. GatedMLP, same shape, against torch.compile of the
// unfused module (part 4), 128 x 128 -> 128 x 192: forward paired 1.055 -> 1.046x, windows 1.043 ->
// 1.046x, spaced 1.054 -> 1.063x; forward + backward 1.017 -> 1.013x, 0.997 -> 0.999x, 1.015 ->
// 1.021x. Not measured below 8192 tokens: M <= 4096 keeps 128 x 128 (fewer, wider tiles cost more
// in the last round there).
constexpr int64_t kGatedWidePingpongFromM = 4097;

// The row of a call of M rows, N = 2I columns of Wi and K = hidden (n, k 0: unknown, the rows for
// any width or depth).
inline int pick_gated_row(int64_t m, int64_t n, int64_t k = 0) {
  if (m > 128 && k > 0 && k <= kGatedPingpongMaxK)
    return m >= kGatedWidePingpongFromM ? 4 : 1;  // pingpong_128x192_c2x1 : pingpong_128x128_c2x1
  return kp::gemm::pick_row<GatedTable>(m, n);
}

// The gated-gradient GEMM (GatedMLP's backward: dP from dy, the down weight and P; dgated_sm90.cu):
// one row, pingpong_128x128_c2x1 (its epilogue reads two elements and writes two for each one of dh,
// under the other consumer's mainloop). GatedMLP fuses its backward only where the hidden size (this
// GEMM's K) is at most kDGatedMaxHidden; past it the unfused backward (cuBLAS dh, then the Triton
// pass) stays. H200, 2026-11-30, 8192 tokens, bf16, against cuBLAS dy @ Wd + the Triton pass
// (docs/benchmarks/h200/fused-mlp-2026-11-30-s37-fused-backward/):
//                                   paired           windows          spaced (L2 flushed, GPU idle)
//   4096 -> 14336   pingpong 128x128  1.146-1.158x     1.085-1.102x     1.062-1.070x
//                   pingpong 128x192  1.094-1.105x     1.078-1.090x     1.056-1.060x
//                   coop 256x192      0.834x           0.886-0.914x     0.873-0.896x
//   8192 -> 28672   pingpong 128x128  1.098x           1.024x           0.920x
//                   pingpong 128x192  1.060x           1.005x           0.960x
//                   coop 256x192      0.879x           0.920x           0.927x
// The other two rows are not instantiated (2 kernels, not 6).
struct DGatedRows {
  static constexpr int rows[] = {1};  // pingpong_128x128_c2x1
  static constexpr int size = sizeof(rows) / sizeof(rows[0]);
  static constexpr bool has(int row) { return row == rows[0]; }
};
static_assert(GatedTable::rows[DGatedRows::rows[0]].schedule == kp::gemm::Sm90Schedule::kPingpong,
              "the gated-gradient row is a pingpong row");

constexpr int64_t kDGatedMaxHidden = 4096;

// The gated-gradient row GatedMLP's backward of M tokens and hidden size `hidden` takes, or -1:
// no fused backward (the unfused one is faster there).
inline int pick_dgated_row(int64_t m, int64_t hidden) {
  (void)m;
  return hidden <= kDGatedMaxHidden ? DGatedRows::rows[0] : -1;
}

}  // namespace kp_fused_mlp
