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

// The training row for a GEMM whose output is m x n: the forward table's pick (the wide tile where
// n >= its min_n: dX of a down projection, dW of an up projection), raised to the first row that
// has training kernels.
inline int pick_bwd_row(int64_t m, int64_t n) {
  const int row = pick_gemm_row(m, n);
  return row < GemmBwdTable::rows[0] ? GemmBwdTable::rows[0] : row;
}

// dW = dP^T X (both operands MN-major, K = tokens) has its own rule: an interleaved A/B at 8192
// tokens (H200, 2026-11-26, notes train_ab) read, for dW [4096, 14336] (a down projection's),
// coop_128x256_c2x1 1.245 ms, pingpong_128x128_c2x1 1.328, coop_256x192_c1x2 1.343 (torch.mm
// 1.236), and for dW [14336, 4096] 1.237 / 1.326 / 1.333 (1.237): the wide tile loses with both
// operands transposed, and the forward's pingpong rule (M <= 4096) costs 7% here. dX (A K-major,
// B MN-major) follows the forward table: dX [8192, 14336] 256 x 192 1.258 ms, 128 x 256 1.336.
constexpr int kWgradCoopFromM = 4096;  // dW with at least this many rows (out_features): coop_128x256_c2x1
inline int pick_wgrad_row(int64_t m) { return m >= kWgradCoopFromM ? GemmBwdTable::rows[2] : GemmBwdTable::rows[0]; }

}  // namespace kp_fused_mlp
