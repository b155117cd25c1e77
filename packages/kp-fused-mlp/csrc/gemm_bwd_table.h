// The rows of gemm_table.h that carry linear_act's training kernels: the forward that also saves
// the pre-activation Z (epilogue bias_act_aux), dX = dP W (A K-major, B MN-major) and dW = dP^T X
// (both MN-major), each in bf16 and fp16: 18 kernels (linear_act_bwd_sm90_{bf16,fp16}.cu).
//
// Only the big-M rows: a training step runs the MLP over a batch of tokens (thousands of rows),
// and every row more is 6 kernels more to compile. A training call of few tokens runs the smallest
// of these rows with mostly empty tiles: correct, not tuned. dW's rows are picked by its own M,
// out_features (N), which is always large for an MLP.
#pragma once
#include <cstdint>

#include "gemm_table.h"

namespace kp_fused_mlp {

struct GemmBwdTable {
  static constexpr int rows[] = {2, 3, 4};  // pingpong_128x128_c2x1, coop_256x192_c1x2, coop_128x256_c2x1
  static constexpr int size = sizeof(rows) / sizeof(rows[0]);
};

inline bool has_bwd_kernels(int row) {
  for (int r : GemmBwdTable::rows)
    if (r == row) return true;
  return false;
}

// The training jobs, each with its own rule below: the forward that saves Z (two stores a tile: y
// and Z), dX = dP W, dW = dP^T X.
enum class TrainJob : int { kSave = 0, kDgrad = 1, kWgrad = 2 };

// Past the forward table's pingpong rows (M > 4096) a job still takes pingpong_128x128_c2x1 where
// its epilogue is a large share of a tile, so running it under the other consumer warpgroup's
// mainloop is worth more than the wide tile: a short K (the mainloop's length), or for the saving
// forward a narrow N (more, smaller tiles; two stores a tile). 0: no cut. H200, 2026-11-29, 8192
// tokens, bf16 (docs/benchmarks/h200/fused-mlp-2026-11-29-s31-pingpong-rows/), in three regimes:
// windows of back-to-back calls of one kernel (sustained: the power limit sets the clock, as in a
// training step), rounds of every candidate back to back (paired), single calls after an L2 flush
// (the bench harness: the GPU cool, clocks high). Against torch.compile (save) or torch.mm:
//                                      windows          paired           flushed
//   save 4096 -> 14336    pingpong     1.076x           1.095x           0.928x
//                         coop_256x192 0.964x           0.963x           0.965x
//   save 14336 -> 4096    pingpong     1.043x           1.031x           0.923x
//                         coop_128x256 1.028x           0.990x           0.994x
//   dX [8192, 14336], K = 4096
//                         pingpong     1.034x           0.999x           0.864x
//                         coop_256x192 0.956x           0.963x           0.949x
//   dX [8192, 4096], K = 28672 (GatedMLP's): pingpong 0.958x / 0.995x / 0.916x, coop_128x256
//                         1.017x / 0.991x / 0.972x: no cut by N for dX.
//   save 8192 -> 28672    pingpong 0.85x in windows (its swizzle-1 walk over 224 tile columns).
// The rows are picked for the sustained regime a training step runs in; single cool calls pay
// 4-9% for it (a guess, not measured: the pingpong row keeps its tensor cores less busy a clock,
// draws less power and so holds a higher clock under the limit).
// dX has no cut since session 32: the whole training step of the down projection (14336 -> 4096,
// 8192 tokens) in the bench harness, three runs (H200, 2026-11-29, fused-mlp-2026-11-29-s32-*/
// down-step-ab*.md), dX on coop_256x192 against pingpong: sustained 4517 / 4518 / 4496 us against
// 4625 / 4620 / 4610 (2.5% faster), flushed 4108 / 4380 / 4078 against 4325 / 4271 / 4373. The
// kernel alone in windows had said the opposite (+3%, the table above); the step is what users run.
struct PingpongCut {
  int64_t max_k, max_n;
};
constexpr PingpongCut kSavePingpong{4096, 4096};
constexpr PingpongCut kDgradPingpong{0, 0};

inline bool pingpong_cut(const PingpongCut& c, int64_t n, int64_t k) {
  return (c.max_k && k > 0 && k <= c.max_k) || (c.max_n && n > 0 && n <= c.max_n);
}

// The training row for a GEMM whose output is m x n, reducing over k (n or k 0: unknown, the rows
// for any width or depth): the forward table's pick (the wide tile where n >= its min_n: dX of a
// down projection, dW of an up projection), raised to the first row that has training kernels,
// or the pingpong row where the job's cut says so (rows[0]: the row M <= 4096 gets anyway).
inline int pick_bwd_row(int64_t m, int64_t n, int64_t k = 0, TrainJob job = TrainJob::kSave) {
  if (pingpong_cut(job == TrainJob::kSave ? kSavePingpong : kDgradPingpong, n, k)) return GemmBwdTable::rows[0];
  const int row = pick_gemm_row(m, n);
  return row < GemmBwdTable::rows[0] ? GemmBwdTable::rows[0] : row;
}

// dW = dP^T X (both operands MN-major, K = tokens) has its own rule: an interleaved A/B at 8192
// tokens (H200, 2026-11-26, notes train_ab) read, for dW [4096, 14336] (a down projection's),
// coop_128x256_c2x1 1.245 ms, pingpong_128x128_c2x1 1.328, coop_256x192_c1x2 1.343 (torch.mm
// 1.236), and for dW [14336, 4096] 1.237 / 1.326 / 1.333 (1.237): the wide tile loses with both
// operands transposed, and the forward's pingpong rule (M <= 4096) costs 7% here. dX (A K-major,
// B MN-major) follows the forward table: dX [8192, 14336] 256 x 192 1.258 ms, 128 x 256 1.336.
// Paired again in session 31 (2026-11-29): dW [14336 | 4096 | 28672, 4096 | 14336 | 4096]
// pingpong 1.008x / 1.007x / 1.044x torch.mm, coop_128x256 0.986x / 0.982x / 1.004x, but in
// windows of back-to-back calls 1.049x / 1.049x / 1.005x against 1.055x / 1.065x / 1.048x: no cut.
constexpr int kWgradCoopFromM = 4096;  // dW with at least this many rows (out_features): coop_128x256_c2x1
inline int pick_wgrad_row(int64_t m) { return m >= kWgradCoopFromM ? GemmBwdTable::rows[2] : GemmBwdTable::rows[0]; }

inline int pick_train_row(int64_t m, int64_t n, int64_t k, TrainJob job) {
  return job == TrainJob::kWgrad ? pick_wgrad_row(m) : pick_bwd_row(m, n, k, job);
}

}  // namespace kp_fused_mlp
