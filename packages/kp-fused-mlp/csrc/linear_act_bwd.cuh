// linear_act's training path on the sm90a GEMM (rows of gemm_bwd_table.h):
//   forward   y = act(x W^T + b), and Z = x W^T + b saved (the epilogue's aux store)
//   dP        dP = dY act'(Z) (elementwise, fp32, one rounding), db = column sums of dP in fp32
//             (deterministic: fixed partial rows, then kp::col_sum)          (dpre.cu)
//   dX        dX[M, K] = dP[M, N] @ W[N, K]   (W read MN-major: no transposed copy)
//   dW        dW[N, K] = dP^T @ X[M, K]       (dP and X read MN-major; fp32 accumulation over M,
//                                              one rounding to the weight's dtype)
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "linear_act.cuh"

namespace kp_fused_mlp {

// The forward of a training call: linear_act, and z ([m, n], row stride n, 16-byte aligned) =
// x W^T + b rounded to the dtype. config: a training row of gemm_bwd_table.h, or -1.
void linear_act_save(const LinearActArgs& a, void* z, int config, int device, cudaStream_t stream);

// A backward GEMM's operands: dp [m, n] (row stride dp_stride), the other operand [rows, k] (row
// stride other_stride: W [n, k] for dX, X [m, k] for dW), the output contiguous.
struct GradGemmArgs {
  const void* dp;
  int64_t dp_stride;
  const void* other;
  int64_t other_stride;
  void* out;  // dX [m, k] or dW [n, k], contiguous
  int64_t m, n, k;
  int dtype;
};
void linear_act_dgrad(const GradGemmArgs& a, int config, int device, cudaStream_t stream);
void linear_act_wgrad(const GradGemmArgs& a, int config, int device, cudaStream_t stream);

// dp = dy act'(pre) ([m, n], contiguous; null: not written: activation none, or db alone) and, when db is
// not null, db[n] = sum over rows of dy act'(pre) in fp32 through `partial` (fp32 [P, n] scratch,
// P = dpre_partial_rows(m, n, device)), rounded once to the dtype. dy and pre: 16-byte aligned
// rows (n a multiple of 8). For relu, pre may be y itself (relu'(z) = [y > 0]).
struct DpreArgs {
  const void* dy;
  int64_t dy_stride;
  const void* pre;  // ignored for activation none
  int64_t pre_stride;
  void* dp;
  float* partial;
  void* db;
  int64_t m, n;
  int dtype;
  int act;
};
int64_t dpre_partial_rows(int64_t m, int64_t n, int device);
void linear_act_dpre(const DpreArgs& a, int device, cudaStream_t stream);

std::vector<int> gemm_bwd_configs();  // the rows with training kernels
// The training row of a GEMM with an m x n output reducing over k (n, k 0: unknown); job: 0 the
// saving forward, 1 dX, 2 dW (gemm_bwd_table.h's TrainJob).
int gemm_bwd_plan(int64_t m, int64_t n, int64_t k, int job);

}  // namespace kp_fused_mlp
