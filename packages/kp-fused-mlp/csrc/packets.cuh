// V values of a row as floats, for the elementwise kernels: one 16-byte packet (kp/vec.cuh) when
// V = 16 / sizeof(T), else one value.
#pragma once
#include "kp/dtype.cuh"
#include "kp/vec.cuh"

namespace kp_fused_mlp {

template <typename T, int V>
__device__ __forceinline__ void load_vals(const T* p, float* v) {
  if constexpr (V == 1) v[0] = kp::to_f(*p);
  else kp::ld_chunk<T, V, kp::Ld::Plain>(p, v);
}

template <typename T, int V>
__device__ __forceinline__ void store_vals(T* p, const float* v) {
  if constexpr (V == 1) *p = kp::from_f<T>(v[0]);
  else kp::st_chunk<T, V>(p, v);
}

}  // namespace kp_fused_mlp
