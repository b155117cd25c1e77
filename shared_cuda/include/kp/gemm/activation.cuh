// The activations of kp's GEMM epilogues, in fp32, with torch's formulas, for 16-bit outputs.
// In a cooperative GEMM the epilogue is not hidden under any mainloop, so its instructions are GEMM
// time: libm's expf and IEEE division cost ~30 instructions an element (bias + SiLU added 13% to an
// 8192^3 GEMM, H200). The hardware exp (ex2.approx, ~2 ulp) and approximate division are ~2^-21
// relative, far under a bf16/fp16 rounding (2^-9 / 2^-12). gelu (erf) keeps libm's erff.
#pragma once
#include <cuda_runtime.h>

#include "kp/gemm/epilogues.h"

namespace kp::gemm {

__host__ __device__ __forceinline__ float relu(float x) { return x < 0.f ? 0.f : x; }  // NaN stays NaN
// torch.nn.functional.gelu(x): x * Phi(x).
__host__ __device__ __forceinline__ float gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678118654752f)); }
// gelu(x, approximate="tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// As 0.5 (1 + tanh(u)) = sigmoid(2u): x sigmoid(2u), no cancellation where tanh(u) is near -1.
__device__ __forceinline__ float gelu_tanh(float x) {
  const float two_u = 1.59576912161f * (x + 0.044715f * x * x * x);
  return __fdividef(x, 1.f + __expf(-two_u));
}
// x sigmoid(x). Where exp(-x) passes 2^126 the approximate division gives 0: silu(x) < 2^-120 there.
__device__ __forceinline__ float silu(float x) { return __fdividef(x, 1.f + __expf(-x)); }

__device__ __forceinline__ float apply_act(Act a, float x) {
  switch (a) {
    case Act::kRelu: return relu(x);
    case Act::kGelu: return gelu(x);
    case Act::kGeluTanh: return gelu_tanh(x);
    case Act::kSilu: return silu(x);
    default: return x;
  }
}

}  // namespace kp::gemm
