// out[j] = sum_p partial[p, j]: the second stage of the dw/db reduction. A CTA owns a slab of
// columns (32 lanes x V); its 16 warps stride over the partial rows (each warp-row access is a full
// 128-byte line, or 512 B with V=4), 8 rows in flight a warp, and are merged in a fixed order, so
// the sum is deterministic. blockIdx.y picks one of two (partial, out) pairs, so dw and db take
// one launch.
#include <algorithm>
#include <string>

#include "kp/dtype.cuh"
#include "kp/error.cuh"
#include "kp/launch.cuh"
#include "kp/vec.cuh"
#include "norm.cuh"

namespace kp_norm {
namespace {

constexpr int kWarps = 16;

template <typename OT, int V>
__global__ void __launch_bounds__(kWarps * 32) col_sum_kernel(const float* part0, OT* out0, const float* part1,
                                                              OT* out1, int64_t P, int cols) {
  const float* __restrict__ part = blockIdx.y ? part1 : part0;
  OT* __restrict__ out = blockIdx.y ? out1 : out0;
  __shared__ float sm[kWarps][32 * V];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c0 = blockIdx.x * 32 * V + lane * V;  // V=4 only when cols % 4 == 0: groups are whole
  float acc[V] = {};
  if (c0 < cols) {
#pragma unroll 8
    for (int64_t p = warp; p < P; p += kWarps) {
      const float* src = part + p * cols + c0;
      if constexpr (V == 4) {
        const float4 v = __ldcs(reinterpret_cast<const float4*>(src));
        acc[0] += v.x, acc[1] += v.y, acc[2] += v.z, acc[3] += v.w;
      } else {
        acc[0] += __ldcs(src);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) sm[warp][lane * V + k] = acc[k];
  __syncthreads();
  if (warp == 0 && c0 < cols) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float s = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) s += sm[w][lane * V + k];
      out[c0 + k] = kp::from_f<OT>(s);
    }
  }
}

}  // namespace

void col_sum(const float* partial, int64_t num_partials, int64_t cols, void* out, int out_dtype, int device,
             cudaStream_t stream, const float* partial2, void* out2) {
  KP_CHECK_ARG(kp::valid_dtype(out_dtype), "out_dtype: unsupported dtype code " + std::to_string(out_dtype));
  KP_CHECK_ARG(num_partials >= 0, "num_partials must be >= 0");
  KP_CHECK_ARG(cols >= 0 && cols <= (int64_t{1} << 30), "cols must be in [0, 2^30]");
  if (cols == 0) return;
  KP_CHECK_ARG(out != nullptr, "out must not be null");
  KP_CHECK_ARG(num_partials == 0 || partial != nullptr, "partial must not be null");
  KP_CHECK_ARG((partial2 == nullptr) == (out2 == nullptr), "partial2 and out2 come together");
  KP_CHECK_ARG(out2 == nullptr || num_partials == 0 || partial2 != nullptr, "partial2 must not be null");
  kp::DeviceGuard guard(device);
  // Wide slabs (16-byte loads) only when they still give every SM two CTAs; else 128-byte slabs.
  const bool v4 = cols % 4 == 0 && kp::aligned16(partial) && kp::aligned16(partial2) &&
                  (cols + 127) / 128 >= 2 * static_cast<int64_t>(kp::device_info(device).sms);
  const int width = v4 ? 128 : 32;
  const dim3 grid(static_cast<unsigned>((cols + width - 1) / width), out2 ? 2 : 1), block(kWarps * 32);
  const int n = static_cast<int>(cols);
  KP_DISPATCH_DTYPE(out_dtype, OT, {
    OT* o0 = static_cast<OT*>(out);
    OT* o1 = static_cast<OT*>(out2);
    if (v4) kp::launch(col_sum_kernel<OT, 4>, device, grid, block, 0, stream, 1, partial, o0, partial2, o1, num_partials, n);
    else kp::launch(col_sum_kernel<OT, 1>, device, grid, block, 0, stream, 1, partial, o0, partial2, o1, num_partials, n);
  });
}

}  // namespace kp_norm
