// GatedMLP's decode forward in one kernel (sm90; decode_mlp.cu):
//   y[m, :] = (act(x Wg^T + bg) * (x Wu^T + bu)) Wd^T + bd
// with x [m, H], w_gate_up = [Wg; Wu] [2I, H], w_down [H, I]; a few tokens (a tma row's).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace kp_fused_mlp {

struct MlpDecodeArgs {
  const void* x;  // [m, H], row stride x_stride (elements)
  int64_t x_stride;
  const void* w_gate_up;  // [2I, H], row stride w_gate_up_stride
  int64_t w_gate_up_stride;
  const void* b_gate_up;  // [2I] contiguous or null
  const void* w_down;     // [H, I], row stride w_down_stride
  int64_t w_down_stride;
  const void* b_down;  // [H] contiguous or null
  void* y;             // [m, H] contiguous
  void* h;             // workspace: [m, I] contiguous, the dtype (the gated activation, rounded once)
  float* partials;     // workspace: [splits, m, H] fp32
  unsigned long long* counter;  // the grid barrier's arrivals: 8 bytes, zero before its first call; one
                                // counter must not serve two calls that may run at once (a stream's own)
  int64_t m, hidden, inter;
  int dtype;  // kp::DType: float16 or bfloat16
  int act;    // kp::gemm::Act: silu or gelu_tanh
};

struct MlpDecodePlan {
  int row;          // the decode table's tma row (its tokens, stage_k, stages), or -1: not served
  int grid;         // CTAs, all resident (a cooperative launch)
  int64_t blocks;   // the down projection's 128-row blocks
  int splits;       // its K splits (the partials' first dimension)
  int64_t h_bytes, partial_bytes;  // the workspaces
  const char* why;  // when row is -1: what keeps the call off the kernel
};

// The plan of M tokens at hidden H and intermediate I on `device` (cached); `row` >= 0 forces that
// tma row of the decode table (tests: any size), -1 takes the gated projection's plan; `splits` > 0
// forces the down projection's K splits (clamped to its k-steps and 64), 0 takes the rule.
MlpDecodePlan gated_mlp_decode_plan(int64_t m, int64_t hidden, int64_t inter, int dtype, int row, int splits,
                                    int device);
// Checks the arguments (ValueError), plans and launches on `stream`.
void gated_mlp_decode(const MlpDecodeArgs& a, int row, int splits, int device, cudaStream_t stream);

}  // namespace kp_fused_mlp
