// linear_act's backward, elementwise part: dP = dY act'(Z) and the bias gradient db = sum_m dP.
// Bound by memory: each thread moves 16-byte packets (8 16-bit values) of dY, Z and dP, so a
// warp's access is 512 contiguous bytes a tensor. The Python side hands in rows that are 16-byte
// aligned (the GEMMs that read dP need them anyway), so there is no 1-value fallback.
//
// db, deterministically: CTA row y of the grid sums its rows (y, y + gridDim.y, ...) of each
// column in a fixed order into fp32 partial row y; kp::col_sum adds the partial rows in a fixed
// order and rounds once. The grid depends on (m, n, the SM count) only, so two runs give the same
// bits. The sum is of the fp32 dP, before its rounding to the dtype.
//
// Instantiations: 5 activations x 2 dtypes (16-bit: what the GEMM takes) = 10 kernels.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "act_grad.cuh"
#include "kp/col_sum.cuh"
#include "kp/dtype.cuh"
#include "kp/error.cuh"
#include "kp/host.cuh"
#include "kp/launch.cuh"
#include "kp/vec.cuh"
#include "linear_act_bwd.cuh"

namespace kp_fused_mlp {
namespace {

using kp::gemm::Act;

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;
// CTAs of 256 threads an SM the grid aims at (8: 2048 threads, an sm80/sm90 SM's maximum).
constexpr int64_t kCtasPerSm = 8;

template <typename T, Act A>
__global__ void __launch_bounds__(kThreads) dpre_kernel(const T* __restrict__ dy, int64_t dy_stride,
                                                        const T* __restrict__ pre, int64_t pre_stride,
                                                        T* __restrict__ dp, float* __restrict__ partial, int64_t rows,
                                                        int64_t cols) {
  constexpr int V = kp::Packet<T>::N;
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * V;
  if (c >= cols) return;
  float sum[V] = {};
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    float d[V];
    kp::ld_chunk<T, V, kp::Ld::Plain>(dy + r * dy_stride + c, d);
    if constexpr (A != Act::kNone) {
      float z[V];
      kp::ld_chunk<T, V, kp::Ld::Plain>(pre + r * pre_stride + c, z);
#pragma unroll
      for (int i = 0; i < V; ++i) d[i] *= act_grad<A>(z[i]);
    }
    if (dp) kp::st_chunk<T, V>(dp + r * cols + c, d);
    if (partial) {
#pragma unroll
      for (int i = 0; i < V; ++i) sum[i] += d[i];
    }
  }
  if (partial) {
    float4* out = reinterpret_cast<float4*>(partial + blockIdx.y * cols + c);  // 32-byte aligned: c % 8 == 0
#pragma unroll
    for (int j = 0; j < V / 4; ++j) out[j] = make_float4(sum[4 * j], sum[4 * j + 1], sum[4 * j + 2], sum[4 * j + 3]);
  }
}

dim3 grid_for(int64_t rows, int64_t cols, int device) {
  const int64_t gx = kp::cdiv(kp::cdiv(cols, 8), kThreads);
  const int64_t want = kp::cdiv(kCtasPerSm * kp::device_info(device).sms, gx);
  return dim3(static_cast<unsigned>(gx), static_cast<unsigned>(std::max<int64_t>(1, std::min({rows, kMaxGridY, want}))));
}

template <typename F>
void dispatch_act(int act, F&& f) {
  switch (static_cast<Act>(act)) {
    case Act::kNone: return f(std::integral_constant<Act, Act::kNone>{});
    case Act::kRelu: return f(std::integral_constant<Act, Act::kRelu>{});
    case Act::kGelu: return f(std::integral_constant<Act, Act::kGelu>{});
    case Act::kGeluTanh: return f(std::integral_constant<Act, Act::kGeluTanh>{});
    case Act::kSilu: return f(std::integral_constant<Act, Act::kSilu>{});
  }
}

}  // namespace

int64_t dpre_partial_rows(int64_t m, int64_t n, int device) {
  KP_CHECK_ARG(m >= 0 && n >= 0, "linear_act dpre: negative size");
  if (m == 0 || n == 0) return 0;
  kp::DeviceGuard guard(device);
  return grid_for(m, n, device).y;
}

void linear_act_dpre(const DpreArgs& a, int device, cudaStream_t stream) {
  const std::string op = "linear_act dpre: ";
  KP_CHECK_ARG(a.dtype == kp::kF16 || a.dtype == kp::kBF16, op + "takes float16 or bfloat16, got " + kp::dtype_name(a.dtype));
  KP_CHECK_ARG(a.act >= 0 && a.act < kp::gemm::kNumActs, op + "unknown activation code " + std::to_string(a.act));
  KP_CHECK_ARG(a.m >= 0 && a.n >= 0, op + "negative size");
  KP_CHECK_ARG(a.n % 8 == 0, op + "n=" + std::to_string(a.n) + " must be a multiple of 8 (16-byte packets)");
  if (a.m == 0 || a.n == 0) return;
  const bool act_none = a.act == static_cast<int>(Act::kNone);
  KP_CHECK_ARG(a.dp != nullptr || a.db != nullptr, op + "nothing to compute (dp and db are null)");
  KP_CHECK_ARG(a.db == nullptr || a.partial != nullptr, op + "db needs the fp32 partial buffer");
  kp::check_rows("dy", a.dy, a.dy_stride, a.m, a.n);
  KP_CHECK_ARG(kp::rows_aligned16(a.dy, a.m <= 1 ? 0 : a.dy_stride, 2), op + "dy rows must be 16-byte aligned");
  if (!act_none) {
    kp::check_rows("pre", a.pre, a.pre_stride, a.m, a.n);
    KP_CHECK_ARG(kp::rows_aligned16(a.pre, a.m <= 1 ? 0 : a.pre_stride, 2), op + "pre rows must be 16-byte aligned");
  }
  KP_CHECK_ARG(kp::rows_aligned16(a.dp, 0, 2) && kp::rows_aligned16(a.partial, 0, 4), op + "dp and partial must be 16-byte aligned");
  kp::DeviceGuard guard(device);
  const dim3 grid = grid_for(a.m, a.n, device);
  float* partial = a.db ? a.partial : nullptr;
  auto go = [&](auto t) {
    using T = decltype(t);
    dispatch_act(a.act, [&](auto act) {
      kp::launch(dpre_kernel<T, decltype(act)::value>, device, grid, dim3(kThreads), 0, stream, 1,
                 static_cast<const T*>(a.dy), a.dy_stride, static_cast<const T*>(a.pre), a.pre_stride,
                 static_cast<T*>(a.dp), partial, a.m, a.n);
    });
  };
  if (a.dtype == kp::kBF16)
    go(__nv_bfloat16{});
  else
    go(__half{});
  if (a.db) kp::col_sum(partial, grid.y, a.n, a.db, a.dtype, device, stream);
}

}  // namespace kp_fused_mlp
