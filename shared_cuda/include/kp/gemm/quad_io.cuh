// 16-byte global loads and stores of a wgmma accumulator fragment's column pairs, shared by kp's
// register epilogues (sm90_gated_epilogue.cuh, sm90_dgated_epilogue.cuh).
//
// A 64 x N wgmma gives thread t of a quad (t = lane % 4) columns 8j + 2t, 8j + 2t + 1 of every
// 8-column group j. Stored as they lie, each 4-byte store of a warp touches 8 rows x 16 bytes and
// the load/store unit splits it into 8 row requests (saving P cost 10% of the gated GEMM that way,
// H200, 2026-11-29). Four groups at a time, the quad swaps pairs so that thread t holds all 8
// columns of group j0 + t: one 16-byte access a thread, 64 contiguous bytes a quad and row.
#pragma once
#include <cutlass/cutlass.h>
#include <cutlass/numeric_conversion.h>

#include <cstdint>

namespace kp::gemm::quad {

// Two floats rounded to T (16-bit) and packed in 32 bits; and back.
template <class T>
CUTLASS_HOST_DEVICE uint32_t pack(float a, float b) {
  using Pair = cutlass::Array<T, 2>;
  const Pair v = cutlass::NumericArrayConverter<T, float, 2>::convert(cutlass::Array<float, 2>{a, b});
  return reinterpret_cast<uint32_t const&>(v);
}
template <class T>
CUTLASS_HOST_DEVICE float2 unpack(uint32_t bits) {
  const auto v = reinterpret_cast<cutlass::Array<T, 2> const&>(bits);
  return make_float2(static_cast<float>(v[0]), static_cast<float>(v[1]));
}

// v[i] of quad lane j becomes v[j] of quad lane i (a 4 x 4 transpose of 32-bit pairs) in place,
// in two butterfly steps: lanes 2 apart swap the off-diagonal 2 x 2 blocks, then lanes 1 apart
// the off-diagonal elements of each block. Every lane of the warp must take part. Its own inverse:
// after a 16-byte load of group j0 + t's 8 columns, v[i] is this thread's pair of group j0 + i.
CUTLASS_DEVICE void transpose(uint32_t (&v)[4], int t) {
  const bool hi = t & 2;
  uint32_t a = hi ? v[0] : v[2], b = hi ? v[1] : v[3];
  a = __shfl_xor_sync(0xffffffffu, a, 2);
  b = __shfl_xor_sync(0xffffffffu, b, 2);
  if (hi) v[0] = a, v[1] = b;
  else v[2] = a, v[3] = b;
  const bool odd = t & 1;
  a = odd ? v[0] : v[1], b = odd ? v[2] : v[3];
  a = __shfl_xor_sync(0xffffffffu, a, 1);
  b = __shfl_xor_sync(0xffffffffu, b, 1);
  if (odd) v[0] = a, v[2] = b;
  else v[1] = a, v[3] = b;
}

template <class T>
CUTLASS_DEVICE void store16(T* p, const uint32_t (&v)[4]) {
  *reinterpret_cast<uint4*>(p) = make_uint4(v[0], v[1], v[2], v[3]);
}
template <class T>
CUTLASS_DEVICE void load16(const T* p, uint32_t (&v)[4]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  v[0] = u.x, v[1] = u.y, v[2] = u.z, v[3] = u.w;
}

}  // namespace kp::gemm::quad
