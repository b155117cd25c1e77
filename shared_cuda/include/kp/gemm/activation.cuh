// The activations of kp's GEMM epilogues, in fp32, with the formulas torch uses (the reference
// level computes the same in fp32 and rounds once). Precise libm calls (erff, tanhf, expf), not
// the hardware approximations (tanh.approx is ~2^-11 relative, the size of an fp16 rounding): the
// epilogue is a small part of a GEMM's time, and the tests hold every level to 2x torch's error.
#pragma once
#include <cuda_runtime.h>

#include "kp/gemm/epilogues.h"

namespace kp::gemm {

__host__ __device__ __forceinline__ float relu(float x) { return x < 0.f ? 0.f : x; }  // NaN stays NaN
// torch.nn.functional.gelu(x): x * Phi(x).
__host__ __device__ __forceinline__ float gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678118654752f)); }
// gelu(x, approximate="tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
__host__ __device__ __forceinline__ float gelu_tanh(float x) {
  return 0.5f * x * (1.f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
__host__ __device__ __forceinline__ float silu(float x) { return x / (1.f + expf(-x)); }

__host__ __device__ __forceinline__ float apply_act(Act a, float x) {
  switch (a) {
    case Act::kRelu: return relu(x);
    case Act::kGelu: return gelu(x);
    case Act::kGeluTanh: return gelu_tanh(x);
    case Act::kSilu: return silu(x);
    default: return x;
  }
}

}  // namespace kp::gemm
