// The decode kernels' epilogue of one output element (decode_gemv.cu's and decode_tma.cu's):
// act(a + bias[col]), or gated act(a + bias[col]) * (u + bias[I + col]); bias, activation and
// product in fp32, rounded once to the dtype.
#pragma once
#include <cstdint>

#include "kp/dtype.cuh"
#include "kp/gemm/activation.cuh"

namespace kp_fused_mlp {

// y [m, n_out] contiguous; bias [n_out] (gated: [2 n_out], the up half second) or null.
template <typename T, bool GATED>
__device__ __forceinline__ void store_decode_out(const void* bias_, void* y, int act_code, int64_t n_out, int64_t tok,
                                                 int64_t col, float a, float u) {
  const T* bias = static_cast<const T*>(bias_);
  const kp::gemm::Act act = static_cast<kp::gemm::Act>(act_code);
  float out;
  if constexpr (GATED)
    out = kp::gemm::apply_act(act, a + (bias ? kp::to_f(bias[col]) : 0.f)) *
          (u + (bias ? kp::to_f(bias[n_out + col]) : 0.f));
  else
    out = kp::gemm::apply_act(act, a + (bias ? kp::to_f(bias[col]) : 0.f));
  static_cast<T*>(y)[tok * n_out + col] = kp::from_f<T>(out);
}

}  // namespace kp_fused_mlp
