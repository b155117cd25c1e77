// The rows of gemm_table.h that carry linear_act's training kernels: the forward that also saves
// the pre-activation Z (epilogue bias_act_aux), dX = dP W (A K-major, B MN-major) and dW = dP^T X
// (both MN-major), each in bf16 and fp16: 12 kernels (linear_act_bwd_sm90_{bf16,fp16}.cu).
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
  static constexpr int rows[] = {2, 4};  // pingpong_128x128_c2x1, coop_128x256_c2x1
  static constexpr int size = sizeof(rows) / sizeof(rows[0]);
};

inline bool has_bwd_kernels(int row) {
  for (int r : GemmBwdTable::rows)
    if (r == row) return true;
  return false;
}

// The training row for a GEMM whose output has m rows: the forward table's pick, raised to the
// first row that has training kernels.
inline int pick_bwd_row(int64_t m) {
  const int row = pick_gemm_row(m, 0);  // n = 0: the rows for any N (coop_256x192 has no training kernels)
  return row < GemmBwdTable::rows[0] ? GemmBwdTable::rows[0] : row;
}

}  // namespace kp_fused_mlp
