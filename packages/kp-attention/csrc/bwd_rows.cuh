// The backward's two memory-bound kernels (no CuTe; bwd.cu launches them around run_bwd):
//   delta_kernel:      delta = rowsum(dO * O) in fp32, one warp a (row, head); zeroes dq_accum's row
//   dq_convert_kernel: dq = scale * dq_accum in the input dtype
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace kp_attention::bwd {

__device__ __forceinline__ float2 to_float2(__half2 v) { return __half22float2(v); }
__device__ __forceinline__ float2 to_float2(__nv_bfloat162 v) { return __bfloat1622float2(v); }
__device__ __forceinline__ __half2 from_float2(float a, float b, __half2*) { return __floats2half2_rn(a, b); }
__device__ __forceinline__ __nv_bfloat162 from_float2(float a, float b, __nv_bfloat162*) {
  return __floats2bfloat162_rn(a, b);
}

// T2: __half2 or __nv_bfloat162. out [rows / heads, heads, d] contiguous (row r = (b seqlen + s)
// heads + h); dout at (batch, row, head) strides; delta [batch, heads, seqlen] (varlen: batch 1,
// seqlen total_q). d a multiple of 8, dout's strides multiples of 8 (16-byte loads). `lanes` (a power
// of two <= 32, >= d / 8) lanes a row, 256 / lanes rows a block: every lane loads 16 bytes at d 64
// (8 lanes a row) rather than a warp a row with three quarters of it idle.
template <class T2>
__global__ void __launch_bounds__(256) delta_kernel(const T2* out, const T2* dout, float* delta, float* dq_accum,
                                                    int64_t rows, int64_t seqlen, int heads, int d, int lanes,
                                                    int64_t do_batch, int64_t do_row, int64_t do_head) {
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x) / lanes;
  const int lane = threadIdx.x % lanes;
  const bool live = r < rows;  // no early return: the shuffles below take the whole warp
  const int h = static_cast<int>(r % heads);
  const int64_t bs = r / heads;
  const int64_t s = bs % seqlen, b = bs / seqlen;
  float acc = 0.0f;
  if (live) {
    // element offsets / 2: T2 pointers
    const T2* o = out + r * d / 2;
    const T2* g = dout + (b * do_batch + s * do_row + h * do_head) / 2;
    for (int c = lane * 8; c < d; c += 8 * lanes) {
      const uint4 a = *reinterpret_cast<const uint4*>(o + c / 2);
      const uint4 e = *reinterpret_cast<const uint4*>(g + c / 2);
      const T2* a2 = reinterpret_cast<const T2*>(&a);
      const T2* e2 = reinterpret_cast<const T2*>(&e);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 x = to_float2(a2[i]), y = to_float2(e2[i]);
        acc = fmaf(x.x, y.x, fmaf(x.y, y.y, acc));
      }
    }
  }
  for (int m = lanes / 2; m > 0; m /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, m, lanes);
  if (!live) return;
  if (lane == 0) delta[(b * heads + h) * seqlen + s] = acc;
  if (dq_accum != nullptr) {
    float* z = dq_accum + r * d;
    for (int c = lane * 4; c < d; c += 4 * lanes) *reinterpret_cast<float4*>(z + c) = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// n4 = elements / 4.
template <class T2>
__global__ void __launch_bounds__(256) dq_convert_kernel(const float* acc, T2* dq, int64_t n4, float scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x; i < n4;
       i += static_cast<int64_t>(gridDim.x) * 256) {
    const float4 v = reinterpret_cast<const float4*>(acc)[i];
    T2 pair[2] = {from_float2(v.x * scale, v.y * scale, static_cast<T2*>(nullptr)),
                  from_float2(v.z * scale, v.w * scale, static_cast<T2*>(nullptr))};
    reinterpret_cast<uint2*>(dq)[i] = *reinterpret_cast<const uint2*>(pair);
  }
}

}  // namespace kp_attention::bwd
