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

// (act(g), act'(g)) with the hardware exp: the gated backward's epilogue and elementwise kernels.
// silu: d/dg g s(g) = s (1 + g (1 - s)).
__device__ __forceinline__ float2 silu_and_grad(float g) {
  const float s = __fdividef(1.f, 1.f + __expf(-g));
  return make_float2(g * s, s * (1.f + g * (1.f - s)));
}
// gelu_tanh: with h = (1 + t) / 2 = sigmoid(2u), t = tanh(u), u = k (g + c g^3):
// d/dg g h = h + g (1 - t^2) u' / 2 and (1 - t^2) / 2 = 2 h (1 - h).
__device__ __forceinline__ float2 gelu_tanh_and_grad(float g) {
  constexpr float k = 0.79788456080286536f, c = 0.044715f;
  const float h = __fdividef(1.f, 1.f + __expf(-2.f * k * (g + c * g * g * g)));
  return make_float2(g * h, h + 2.f * g * h * (1.f - h) * k * (1.f + 3.f * c * g * g));
}

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
