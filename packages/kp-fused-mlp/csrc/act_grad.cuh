// act'(z) for linear_act's backward (dpre.cu), in fp32 with torch's formulas (reference.act_grad):
// libm's expf/erff/tanhf, not the GEMM epilogue's fast forms (activation.cuh): the kernel is
// bound by memory, not instructions.
#pragma once
#include <cuda_runtime.h>

#include "kp/gemm/epilogues.h"

namespace kp_fused_mlp {

template <kp::gemm::Act A>
__device__ __forceinline__ float act_grad(float z) {
  using kp::gemm::Act;
  if constexpr (A == Act::kNone) {
    return 1.f;
  } else if constexpr (A == Act::kRelu) {
    return z > 0.f ? 1.f : 0.f;  // torch's threshold_backward: 0 at z = 0 and for NaN
  } else if constexpr (A == Act::kSilu) {
    const float s = 1.f / (1.f + expf(-z));  // d/dz z s(z) = s (1 + z (1 - s))
    return s * (1.f + z * (1.f - s));
  } else if constexpr (A == Act::kGelu) {
    // d/dz z Phi(z) = Phi(z) + z phi(z), phi(z) = exp(-z^2 / 2) / sqrt(2 pi)
    return 0.5f * (1.f + erff(z * 0.70710678118654752f)) + z * expf(-0.5f * z * z) * 0.39894228040143268f;
  } else {
    static_assert(A == Act::kGeluTanh, "an activation without its derivative");
    // t = tanh(k (z + c z^3)): d/dz z (1 + t) / 2 = (1 + t) / 2 + z (1 - t^2) k (1 + 3 c z^2) / 2
    constexpr float k = 0.79788456080286536f, c = 0.044715f;
    const float t = tanhf(k * (z + c * z * z * z));
    return 0.5f * (1.f + t) + 0.5f * z * (1.f - t * t) * k * (1.f + 3.f * c * z * z);
  }
}

}  // namespace kp_fused_mlp
