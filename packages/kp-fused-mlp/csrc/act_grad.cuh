// The activations of kp-fused-mlp's elementwise kernels and their derivatives, in fp32 with
// torch's formulas (kp_fused_mlp.reference): the gated units (glu.cu) and linear_act's backward
// (dpre.cu). libm's expf/erff/tanhf, not the GEMM epilogue's fast forms (activation.cuh): these
// kernels are bound by memory, not instructions, and also write fp32.
#pragma once
#include <cuda_runtime.h>

#include "kp/gemm/activation.cuh"
#include "kp/gemm/epilogues.h"

namespace kp_fused_mlp {

using kp::gemm::Act;

__device__ __forceinline__ float sigmoid(float g) { return 1.f / (1.f + expf(-g)); }

// f(g) = act(g), df(g) = act'(g), f_df(g) = both.
template <Act A> struct ActGrad;

template <> struct ActGrad<Act::kNone> {
  static __device__ __forceinline__ float f(float g) { return g; }
  static __device__ __forceinline__ float df(float) { return 1.f; }
};

// torch's threshold_backward: the gradient passes where g > 0 (0 at g = 0 and for NaN).
template <> struct ActGrad<Act::kRelu> {
  static __device__ __forceinline__ float f(float g) { return kp::gemm::relu(g); }
  static __device__ __forceinline__ float df(float g) { return g > 0.f ? 1.f : 0.f; }
};

template <> struct ActGrad<Act::kSilu> {
  static __device__ __forceinline__ float f(float g) { return g * sigmoid(g); }
  // d/dg g s(g) = s (1 + g (1 - s)).
  static __device__ __forceinline__ float2 f_df(float g) {
    const float s = sigmoid(g);
    return make_float2(g * s, s * (1.f + g * (1.f - s)));
  }
  static __device__ __forceinline__ float df(float g) { return f_df(g).y; }
};

template <> struct ActGrad<Act::kGelu> {
  static __device__ __forceinline__ float f(float g) { return kp::gemm::gelu(g); }
  // d/dg g Phi(g) = Phi(g) + g phi(g), phi(g) = exp(-g^2 / 2) / sqrt(2 pi).
  static __device__ __forceinline__ float2 f_df(float g) {
    const float cdf = 0.5f * (1.f + erff(g * 0.70710678118654752f));
    return make_float2(g * cdf, cdf + g * expf(-0.5f * g * g) * 0.39894228040143268f);
  }
  static __device__ __forceinline__ float df(float g) { return f_df(g).y; }
};

template <> struct ActGrad<Act::kGeluTanh> {
  static __device__ __forceinline__ float f(float g) {
    return 0.5f * g * (1.f + tanhf(0.79788456080286536f * (g + 0.044715f * g * g * g)));
  }
  // t = tanh(k (g + c g^3)): d/dg g (1 + t) / 2 = (1 + t) / 2 + g (1 - t^2) k (1 + 3 c g^2) / 2.
  static __device__ __forceinline__ float2 f_df(float g) {
    constexpr float k = 0.79788456080286536f, c = 0.044715f;
    const float t = tanhf(k * (g + c * g * g * g));
    return make_float2(0.5f * g * (1.f + t), 0.5f * (1.f + t) + 0.5f * g * (1.f - t * t) * k * (1.f + 3.f * c * g * g));
  }
  static __device__ __forceinline__ float df(float g) { return f_df(g).y; }
};

}  // namespace kp_fused_mlp
