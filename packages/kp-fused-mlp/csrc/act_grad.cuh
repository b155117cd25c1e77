// Activations and their derivatives in fp32, with torch's formulas (kp_fused_mlp.reference), for
// the elementwise kernels: glu.cu's gated units (Gated<A, kFast>: act and (act, act')) and dpre.cu's
// dP = dY act'(Z) (act_grad<A>). One copy of each derivative for both.
#pragma once
#include <cuda_runtime.h>

#include "kp/gemm/activation.cuh"
#include "kp/gemm/epilogues.h"

namespace kp_fused_mlp {

using kp::gemm::Act;

// act(g) and (act(g), act'(g)) in fp32, with torch's formulas (kp_fused_mlp.reference). kFast: the
// hardware exp (ex2.approx) and approximate division instead of libm's expf/tanhf and IEEE division,
// for 16-bit tensors only (~2^-21 relative, far under their rounding; fp32 outputs keep libm). Not a
// detail: with libm the forward is instruction-bound at small sizes (H200, 1024 x 14336 SwiGLU:
// 29.8 us with libm, 26.9 us fast; 4096 tokens: 88.2 -> 86.7 us, .dev microbenchmark 2026-11-26).
template <bool kFast>
__device__ __forceinline__ float act_sigmoid(float g) {
  if constexpr (kFast) return __fdividef(1.f, 1.f + __expf(-g));
  else return 1.f / (1.f + expf(-g));
}

template <Act A, bool kFast> struct Gated;

template <bool kFast> struct Gated<Act::kSilu, kFast> {
  static __device__ __forceinline__ float f(float g) {
    if constexpr (kFast) return kp::gemm::silu(g);
    else return g * act_sigmoid<false>(g);
  }
  // d/dg g s(g) = s (1 + g (1 - s)).
  static __device__ __forceinline__ float2 f_df(float g) {
    if constexpr (kFast) return kp::gemm::silu_and_grad(g);
    const float s = act_sigmoid<false>(g);
    return make_float2(g * s, s * (1.f + g * (1.f - s)));
  }
};

// erff and expf either way: the exact gelu has no cheap hardware form worth its error.
template <bool kFast> struct Gated<Act::kGelu, kFast> {
  static __device__ __forceinline__ float f(float g) { return kp::gemm::gelu(g); }
  // d/dg g Phi(g) = Phi(g) + g phi(g), phi(g) = exp(-g^2 / 2) / sqrt(2 pi).
  static __device__ __forceinline__ float2 f_df(float g) {
    const float cdf = 0.5f * (1.f + erff(g * 0.70710678118654752f));
    return make_float2(g * cdf, cdf + g * expf(-0.5f * g * g) * 0.39894228040143268f);
  }
};

template <bool kFast> struct Gated<Act::kGeluTanh, kFast> {
  static constexpr float k = 0.79788456080286536f, c = 0.044715f;
  // (1 + tanh(u)) / 2 = sigmoid(2u): one exp, and no cancellation where tanh(u) is near -1.
  static __device__ __forceinline__ float half_1p_tanh(float g) {
    if constexpr (kFast) return act_sigmoid<true>(2.f * k * (g + c * g * g * g));
    else return 0.5f * (1.f + tanhf(k * (g + c * g * g * g)));
  }
  static __device__ __forceinline__ float f(float g) { return g * half_1p_tanh(g); }
  // h = (1 + t) / 2, t = tanh(k (g + c g^3)): d/dg g h = h + g (1 - t^2) k (1 + 3 c g^2) / 2, and
  // (1 - t^2) / 2 = 2 h (1 - h).
  static __device__ __forceinline__ float2 f_df(float g) {
    if constexpr (kFast) return kp::gemm::gelu_tanh_and_grad(g);
    const float h = half_1p_tanh(g);
    return make_float2(g * h, h + 2.f * g * h * (1.f - h) * k * (1.f + 3.f * c * g * g));
  }
};

// act'(z) for linear_act's backward (dpre.cu): libm's forms (kFast false), the kernel is bound by
// memory, not instructions.
template <Act A>
__device__ __forceinline__ float act_grad(float z) {
  if constexpr (A == Act::kNone) {
    return 1.f;
  } else if constexpr (A == Act::kRelu) {
    return z > 0.f ? 1.f : 0.f;  // torch's threshold_backward: 0 at z = 0 and for NaN
  } else {
    return Gated<A, false>::f_df(z).y;
  }
}

}  // namespace kp_fused_mlp
