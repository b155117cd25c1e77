// The decode path of linear_act and gated_linear: a few tokens against a weight that is read once
// (decode_table.h says why and how it is split). sm80 and newer (mma.sync), float16/bfloat16.
//
//   linear: y[m, n] = act(x[m, k] @ w[n, k]^T + bias[n])
//   gated:  y[m, c] = act(x Wg^T + bg)[m, c] * (x Wu^T + bu)[m, c],  w = [Wg; Wu] ([2I, k]),
//           bias = [bg; bu] ([2I]); c < I
// fp32 accumulation, bias and activation in fp32, rounded once to the dtype.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kp_fused_mlp {

struct DecodeArgs {
  const void* x;  // [m, k], row stride x_stride (elements), unit column stride, 16-byte aligned rows
  int64_t x_stride;
  const void* w;  // [rows, k] (rows = n; gated: 2I), row stride w_stride, 16-byte aligned rows
  int64_t w_stride;
  const void* bias;  // [rows] contiguous, or null
  void* y;           // [m, n_out] contiguous (n_out = n; gated: I)
  float* ws;         // [splits, m, rows] fp32, when splits > 1 (else unused; may be null)
  int64_t m, n_out, k;
  int dtype;  // kp::DType: float16 or bfloat16
  int act;    // kp::gemm::Act (gated: silu or gelu_tanh)
  bool gated;
};

struct DecodePlan {
  int row;         // of DecodeTable (decode_row_names())
  int splits;      // K splits (1: the epilogue in the main kernel, no workspace)
  int split_steps; // k-steps a split covers
  int step_k;      // columns of a k-step (fma rows 256; mma rows 32 x packets)
  int cluster;     // > 1: the splits sum over a thread-block cluster of this many (sm90), no workspace
  int grid_x, grid_y, grid_z;  // row blocks, splits, token chunks of x (the row's tokens)
  int ctas_per_sm; // resident CTAs of the row's kernel
};

// The plan of a call: `splits` > 0 forces that many K splits (clamped to the k-steps), 0 takes
// the table's rule; `row` >= 0 forces that table row, -1 takes the first whose max_m >= M.
// Needs the device's SM count and occupancy (cached after the first call).
DecodePlan decode_plan(int64_t m, int64_t n_out, int64_t k, bool gated, int dtype, int splits, int row,
                       int device);
// Bytes of fp32 workspace a plan needs: splits x m x rows x 4 (0 for one split or a cluster sum).
int64_t decode_workspace_bytes(const DecodePlan& p, int64_t m, int64_t n_out, bool gated);
// Checks the arguments (ValueError), plans, launches on `stream` of `device`. `splits` and `row`
// as in decode_plan; a plan of more than one split needs `ws` of decode_workspace_bytes.
void decode_gemv(const DecodeArgs& a, int splits, int row, int device, cudaStream_t stream);
// "" when `device` can run the decode kernels (sm80 or newer), else why not.
std::string decode_device_problem(int device);
std::vector<std::string> decode_row_names();
int decode_max_m();
// The most tokens gated_linear runs on the decode kernels (decode_table.h's DecodeCutTable).
int decode_gated_max_m();

}  // namespace kp_fused_mlp
