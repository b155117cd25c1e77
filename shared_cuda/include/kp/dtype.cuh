// Dtype codes shared with kp_core.dtypes (0 f32, 1 f16, 2 bf16), the runtime -> template dispatch,
// and float conversions. All kp math runs in fp32: values are widened on load and rounded once
// (round-to-nearest-even) on store.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace kp {

enum DType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

inline bool valid_dtype(int code) { return code == kF32 || code == kF16 || code == kBF16; }
inline int dtype_size(int code) { return code == kF32 ? 4 : 2; }
inline const char* dtype_name(int code) {
  return code == kF32 ? "float32" : code == kF16 ? "float16" : code == kBF16 ? "bfloat16" : "?";
}

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr int code = kF32; };
template <> struct DTypeOf<__half> { static constexpr int code = kF16; };
template <> struct DTypeOf<__nv_bfloat16> { static constexpr int code = kBF16; };

// ---- scalar conversions -------------------------------------------------------------------------
template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// The fp32 value a float takes once stored as T (rounding without the store).
template <typename T> __device__ __forceinline__ float round_to(float v) { return to_f<T>(from_f<T>(v)); }

// ---- 16-byte packets <-> fp32 -------------------------------------------------------------------
// A packet is 16 bytes of T: 4 floats or 8 halves. bf16 -> fp32 is a shift (no cvt instruction).
template <typename T> struct Packet { static constexpr int N = 16 / sizeof(T); };

template <typename T> __device__ __forceinline__ void unpack(const uint4& r, float* out);
template <> __device__ __forceinline__ void unpack<float>(const uint4& r, float* out) {
  out[0] = __uint_as_float(r.x); out[1] = __uint_as_float(r.y);
  out[2] = __uint_as_float(r.z); out[3] = __uint_as_float(r.w);
}
template <> __device__ __forceinline__ void unpack<__nv_bfloat16>(const uint4& r, float* out) {
  const uint32_t u[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(u[i] << 16);
    out[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}
template <> __device__ __forceinline__ void unpack<__half>(const uint4& r, float* out) {
  const uint32_t u[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half2 h;
    memcpy(&h, &u[i], 4);
    const float2 f = __half22float2(h);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

template <typename T> __device__ __forceinline__ uint4 pack(const float* in);
template <> __device__ __forceinline__ uint4 pack<float>(const float* in) {
  return make_uint4(__float_as_uint(in[0]), __float_as_uint(in[1]), __float_as_uint(in[2]), __float_as_uint(in[3]));
}
template <> __device__ __forceinline__ uint4 pack<__nv_bfloat16>(const float* in) {
  uint32_t u[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);  // one cvt.rn.bf16x2.f32
    memcpy(&u[i], &h, 4);
  }
  return make_uint4(u[0], u[1], u[2], u[3]);
}
template <> __device__ __forceinline__ uint4 pack<__half>(const float* in) {
  uint32_t u[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2 h = __floats2half2_rn(in[2 * i], in[2 * i + 1]);
    memcpy(&u[i], &h, 4);
  }
  return make_uint4(u[0], u[1], u[2], u[3]);
}

}  // namespace kp

// Run the statements after `T` with `T` bound to the C++ type of a runtime dtype code; an unknown
// code throws std::invalid_argument (ValueError in Python). Host code only.
#define KP_DISPATCH_DTYPE(code, T, ...)                                                   \
  switch (code) {                                                                         \
    case ::kp::kF32: { using T = float; __VA_ARGS__; } break;                             \
    case ::kp::kF16: { using T = __half; __VA_ARGS__; } break;                            \
    case ::kp::kBF16: { using T = __nv_bfloat16; __VA_ARGS__; } break;                    \
    default: throw std::invalid_argument("unsupported dtype code " + std::to_string(code)); \
  }
