// linear_act: y[M, N] = act(x[M, K] @ w[N, K]^T + bias[N]) in one sm90a GEMM, the bias and the
// activation applied to the fp32 accumulators in the epilogue, rounded once to the 16-bit dtype.
// Without bias and activation it runs the identity epilogue: kp's bare GEMM.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace kp_fused_mlp {

struct LinearActArgs {
  const void* x;  // [m, k], row stride x_stride (elements), unit column stride
  int64_t x_stride;
  const void* w;  // [n, k], row stride w_stride: nn.Linear's weight
  int64_t w_stride;
  const void* bias;  // [n] contiguous, x's dtype, or null
  void* y;           // [m, n] contiguous
  int64_t m, n, k;
  int dtype;  // kp::DType: float16 or bfloat16 (x, w, bias and y)
  int act;    // kp::gemm::Act
  float* ws = nullptr;  // the decode path's fp32 split-K workspace (decode_gemv.cuh), or null
  int splits = 0;       // the decode path's K splits: 0 the table's choice
  int decode_row = -1;  // the decode path's table row: -1 the table's choice (by M)
};

// config: a row of gemm_table.h, kDecodeConfig (the decode kernels of decode_gemv.cuh: sm80+, any
// N, M = 1-32 by its table and any M in token chunks when forced), kSm80Config (the sm80 GEMM of
// shared_cuda's kp/gemm/sm80_gemm.h: forced only, until it has run on a GPU), or -1 for the plan's
// pick (gemm_plan: decode where decode_table.h's DecodeCut says so by M, N and K, else
// pick_gemm_row()).
void linear_act(const LinearActArgs& a, int config, int device, cudaStream_t stream);
std::vector<std::string> gemm_config_names();
int gemm_plan(int64_t m, int64_t n, int64_t k);
extern const int kDecodeConfig;
extern const int kSm80Config;
// "" when `device` can run linear_act's kernels, else why not.
std::string gemm_device_problem(int device);

}  // namespace kp_fused_mlp
