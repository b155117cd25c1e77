// out[j] = sum_p partial[p, j]: the deterministic column reduction, second stage of every parameter
// gradient (kp-norm's dw/db; an op writes fp32 partial rows, this sums them in a fixed order). A slab is 32 lanes x V
// columns (a 128-byte line a warp-row, or 512 B with V = 4); `wps` warps of a CTA share a slab and
// stride over the partial rows, 8 rows in flight a warp, and are merged in a fixed order, so the
// sum is deterministic. Few partials (wide rows: 8 at 256K on an H100) get one warp a slab and
// more slabs a CTA; with 16 warps a slab as before, P = 8 left half the warps idle and each thread
// one load, and the kernel was latency-bound (10.4 us for 16 MB, 5.2 us at P = 33). blockIdx.y
// picks one of two (partial, out) pairs, so dw and db take one launch. It is launched as a
// programmatic dependent of the backward kernel, whose tail its launch overlaps.
//
//   col_sum(partial, P, cols, out, out_dtype, device, stream[, partial2, out2][, pdl])
// pdl: launch as a programmatic dependent of the kernel before it on the stream (which wrote the
// partials); the kernel waits for it before reading them.
#pragma once
#include <algorithm>
#include <string>
#include <type_traits>

#include "kp/dtype.cuh"
#include "kp/error.cuh"
#include "kp/launch.cuh"
#include "kp/vec.cuh"

namespace kp {
namespace col_sum_detail {

constexpr int kWarps = 16;

template <typename OT, int V>
__global__ void __launch_bounds__(kWarps * 32) col_sum_kernel(const float* part0, OT* out0, const float* part1,
                                                              OT* out1, int64_t P, int cols, int wps_log2) {
  const float* __restrict__ part = blockIdx.y ? part1 : part0;
  OT* __restrict__ out = blockIdx.y ? out1 : out0;
  __shared__ float sm[kWarps][32 * V];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wps = 1 << wps_log2, wr = warp & (wps - 1), slab = warp >> wps_log2;
  const int64_t s = static_cast<int64_t>(blockIdx.x) * (kWarps >> wps_log2) + slab;
  const int64_t c0 = s * 32 * V + lane * V;  // V = 4 only when cols % 4 == 0: groups are whole
  float acc[V] = {};
  wait_prior_grid();  // the partials come from the kernel before
  if (c0 < cols) {
    // 8 rows a step, all loaded before any is added: with the stride a run-time value, an
    // `unroll 8` loop kept one load in flight (each guarded by its own branch), and col_sum at
    // 1K-4K (P ~ 1000) ran 10-20 us slower than with the old compile-time stride.
    using Vec = std::conditional_t<V == 4, float4, float>;
    auto add = [&](const Vec& t) {
      const float* f = reinterpret_cast<const float*>(&t);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += f[k];
    };
    const float* src = part + wr * static_cast<int64_t>(cols) + c0;
    const int64_t step = static_cast<int64_t>(wps) * cols;
    int64_t p = wr;
    for (; p + 7 * wps < P; p += 8 * wps, src += 8 * step) {  // whole steps: no bounds checks
      Vec t[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) t[u] = *reinterpret_cast<const Vec*>(src + u * step);
#pragma unroll
      for (int u = 0; u < 8; ++u) add(t[u]);
    }
    for (; p < P; p += wps, src += step) add(*reinterpret_cast<const Vec*>(src));
  }
  if (wps == 1) {
    if (c0 < cols)
#pragma unroll
      for (int k = 0; k < V; ++k) out[c0 + k] = from_f<OT>(acc[k]);
    return;
  }
#pragma unroll
  for (int k = 0; k < V; ++k) sm[warp][lane * V + k] = acc[k];
  __syncthreads();
  if (wr == 0 && c0 < cols) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float t = 0.f;
      for (int w = 0; w < wps; ++w) t += sm[warp + w][lane * V + k];
      out[c0 + k] = from_f<OT>(t);
    }
  }
}

}  // namespace col_sum_detail

inline void col_sum(const float* partial, int64_t num_partials, int64_t cols, void* out, int out_dtype, int device,
                    cudaStream_t stream, const float* partial2 = nullptr, void* out2 = nullptr, bool pdl = true) {
  KP_CHECK_ARG(valid_dtype(out_dtype), "out_dtype: unsupported dtype code " + std::to_string(out_dtype));
  KP_CHECK_ARG(num_partials >= 0, "num_partials must be >= 0");
  KP_CHECK_ARG(cols >= 0 && cols <= (int64_t{1} << 30), "cols must be in [0, 2^30]");
  if (cols == 0) return;
  KP_CHECK_ARG(out != nullptr, "out must not be null");
  KP_CHECK_ARG(num_partials == 0 || partial != nullptr, "partial must not be null");
  KP_CHECK_ARG((partial2 == nullptr) == (out2 == nullptr), "partial2 and out2 come together");
  KP_CHECK_ARG(out2 == nullptr || num_partials == 0 || partial2 != nullptr, "partial2 must not be null");
  DeviceGuard guard(device);
  const int64_t sms = device_info(device).sms;
  // Wide slabs (16-byte loads) only when there are still two slabs an SM; else 128-byte slabs.
  const bool v4 = cols % 4 == 0 && aligned16(partial) && aligned16(partial2) && (cols + 127) / 128 >= 2 * sms;
  const int64_t width = v4 ? 128 : 32;
  const int64_t slabs = (cols + width - 1) / width;
  // Warps a slab: 8 rows each (a warp's loads in flight), fewer while the slabs alone would not
  // give every SM 8 warps; a power of two up to col_sum_detail::kWarps.
  int wps_log2 = 0;
  while ((1 << (wps_log2 + 1)) <= col_sum_detail::kWarps &&
         (num_partials >= 8 * (int64_t{2} << wps_log2) || slabs * (int64_t{1} << wps_log2) < 8 * sms))
    ++wps_log2;
  const int64_t per_cta = col_sum_detail::kWarps >> wps_log2;
  const dim3 grid(static_cast<unsigned>((slabs + per_cta - 1) / per_cta), out2 ? 2 : 1), block(col_sum_detail::kWarps * 32);
  const int n = static_cast<int>(cols);
  KP_DISPATCH_DTYPE(out_dtype, OT, {
    OT* o0 = static_cast<OT*>(out);
    OT* o1 = static_cast<OT*>(out2);
    auto go = [&](auto kernel) {
      if (pdl) launch_dependent(kernel, device, grid, block, 0, stream, partial, o0, partial2, o1, num_partials, n, wps_log2);
      else launch(kernel, device, grid, block, 0, stream, 1, partial, o0, partial2, o1, num_partials, n, wps_log2);
    };
    if (v4) go(col_sum_detail::col_sum_kernel<OT, 4>);
    else go(col_sum_detail::col_sum_kernel<OT, 1>);
  });
}

}  // namespace kp
