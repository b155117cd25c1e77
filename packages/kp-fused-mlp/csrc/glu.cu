// Gated linear units forward and backward: SwiGLU (silu) and GeGLU (gelu, exact or tanh), one
// kernel template on the activation. Bound by memory: each thread moves 16-byte packets (8 16-bit or
// 4 fp32 values) of every operand, so a warp's access is 512 contiguous bytes a tensor. Rows whose
// pointers, strides or width are not 16-byte multiples take the same kernel with 1-value packets.
//
// Grid: x covers a row's packets (kThreads a block), y strides over the rows (gridDim.y <= 65535,
// the hardware limit of that dimension). Offsets are 64-bit: rows * stride may pass 2^31.
//
// Instantiations, listed on purpose: 3 activations (dispatch_act) x 3 dtypes (KP_DISPATCH_DTYPE) x
// {16-byte, 1-value} packets, a forward and a backward kernel each: 36 small elementwise kernels.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "act_grad.cuh"
#include "glu.cuh"
#include "kp/dtype.cuh"
#include "kp/error.cuh"
#include "kp/gemm/activation.cuh"
#include "kp/host.cuh"
#include "kp/launch.cuh"
#include "kp/vec.cuh"

namespace kp_fused_mlp {
namespace {

using kp::gemm::Act;

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;

// V values of T at p as floats: one 16-byte packet (kp/vec.cuh) when V = 16 / sizeof(T), else one value.
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

template <typename T, Act A, int V>
__global__ void __launch_bounds__(kThreads) glu_fwd_kernel(const T* __restrict__ gate, int64_t gate_stride,
                                                           const T* __restrict__ up, int64_t up_stride,
                                                           T* __restrict__ y, int64_t rows, int64_t cols) {
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * V;
  if (c >= cols) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    float g[V], u[V], out[V];
    load_vals<T, V>(gate + r * gate_stride + c, g);
    load_vals<T, V>(up + r * up_stride + c, u);
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = Gated<A, sizeof(T) == 2>::f(g[i]) * u[i];
    store_vals<T, V>(y + r * cols + c, out);
  }
}

// d/dg [act(g) u] = u act'(g),  d/du = act(g). dgate and dup share a row stride: separate
// [rows, cols] tensors (cols) or the halves of one packed [rows, 2 * cols] gradient (2 * cols).
template <typename T, Act A, int V>
__global__ void __launch_bounds__(kThreads) glu_bwd_kernel(const T* __restrict__ dy, int64_t dy_stride,
                                                           const T* __restrict__ gate, int64_t gate_stride,
                                                           const T* __restrict__ up, int64_t up_stride,
                                                           T* __restrict__ dgate, T* __restrict__ dup,
                                                           int64_t out_stride, int64_t rows, int64_t cols) {
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * V;
  if (c >= cols) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    float d[V], g[V], u[V], dg[V], du[V];
    load_vals<T, V>(dy + r * dy_stride + c, d);
    load_vals<T, V>(gate + r * gate_stride + c, g);
    load_vals<T, V>(up + r * up_stride + c, u);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float2 fd = Gated<A, sizeof(T) == 2>::f_df(g[i]);
      dg[i] = d[i] * u[i] * fd.y;
      du[i] = d[i] * fd.x;
    }
    store_vals<T, V>(dgate + r * out_stride + c, dg);
    store_vals<T, V>(dup + r * out_stride + c, du);
  }
}

bool valid_act(int act) {
  return act == static_cast<int>(Act::kSilu) || act == static_cast<int>(Act::kGelu) ||
         act == static_cast<int>(Act::kGeluTanh);
}

// The activations instantiated: run f(std::integral_constant<Act, A>) for the run-time code.
template <typename F>
void dispatch_act(int act, F&& f) {
  switch (static_cast<Act>(act)) {
    case Act::kSilu: f(std::integral_constant<Act, Act::kSilu>{}); break;
    case Act::kGelu: f(std::integral_constant<Act, Act::kGelu>{}); break;
    case Act::kGeluTanh: f(std::integral_constant<Act, Act::kGeluTanh>{}); break;
    default: throw std::invalid_argument("unsupported gated activation code " + std::to_string(act));
  }
}

dim3 grid_for(int64_t rows, int64_t cols, int vec) {
  return dim3(static_cast<unsigned>(kp::cdiv(kp::cdiv(cols, vec), kThreads)),
              static_cast<unsigned>(std::min(rows, kMaxGridY)));
}

// 16-byte packets when every pointer, row stride and the width allow them.
bool packets_fit(const GluArgs& a, bool bwd, int elem_bytes) {
  auto ok = [&](const void* p, int64_t stride) { return kp::rows_aligned16(p, a.rows <= 1 ? 0 : stride, elem_bytes); };
  bool fit = (a.cols * elem_bytes) % 16 == 0 && ok(a.gate, a.gate_stride) && ok(a.up, a.up_stride) && ok(a.out, bwd ? a.out_stride : a.cols);
  if (bwd) fit = fit && ok(a.dy, a.dy_stride) && ok(a.out2, a.out_stride);
  return fit;
}

void check(const GluArgs& a, bool bwd) {
  KP_CHECK_ARG(kp::valid_dtype(a.dtype), "unsupported dtype code " + std::to_string(a.dtype));
  KP_CHECK_ARG(valid_act(a.act), "unsupported gated activation code " + std::to_string(a.act) +
                                     " (silu, gelu or gelu_tanh: kp::gemm::Act 4, 2, 3)");
  KP_CHECK_ARG(a.rows >= 0 && a.cols >= 0, "rows and cols must be >= 0");
  KP_CHECK_ARG(a.cols < (int64_t{1} << 31) * kThreads, "cols too large for the grid");
  if (a.rows == 0 || a.cols == 0) return;
  kp::check_rows("gate", a.gate, a.gate_stride, a.rows, a.cols);
  kp::check_rows("up", a.up, a.up_stride, a.rows, a.cols);
  KP_CHECK_ARG(a.out != nullptr, "the output must not be null");
  if (bwd) {
    kp::check_rows("dy", a.dy, a.dy_stride, a.rows, a.cols);
    KP_CHECK_ARG(a.out2 != nullptr, "dup must not be null");
    kp::check_rows("dgate", a.out, a.out_stride, a.rows, a.cols);
    kp::check_rows("dup", a.out2, a.out_stride, a.rows, a.cols);
  }
}

// Check the arguments, then, on the device, f(T{}, std::integral_constant<Act, A>{}) for the call's
// dtype and activation: the one place the instantiations are chosen.
template <typename F>
void run(const GluArgs& a, bool bwd, int device, F&& f) {
  check(a, bwd);
  if (a.rows == 0 || a.cols == 0) return;
  kp::DeviceGuard guard(device);
  KP_DISPATCH_DTYPE(a.dtype, T, {
    const bool packets = packets_fit(a, bwd, sizeof(T));
    dispatch_act(a.act, [&](auto act) {
      if (packets)
        f(T{}, act, std::integral_constant<int, 16 / sizeof(T)>{});
      else
        f(T{}, act, std::integral_constant<int, 1>{});
    });
  })
}

}  // namespace

void glu_fwd(const GluArgs& a, int device, cudaStream_t stream) {
  run(a, false, device, [&](auto t, auto act, auto vec) {
    using T = decltype(t);
    constexpr int V = decltype(vec)::value;
    kp::launch(glu_fwd_kernel<T, decltype(act)::value, V>, device, grid_for(a.rows, a.cols, V), dim3(kThreads), 0, stream,
               1, static_cast<const T*>(a.gate), a.gate_stride, static_cast<const T*>(a.up), a.up_stride,
               static_cast<T*>(a.out), a.rows, a.cols);
  });
}

void glu_bwd(const GluArgs& a, int device, cudaStream_t stream) {
  run(a, true, device, [&](auto t, auto act, auto vec) {
    using T = decltype(t);
    constexpr int V = decltype(vec)::value;
    kp::launch(glu_bwd_kernel<T, decltype(act)::value, V>, device, grid_for(a.rows, a.cols, V), dim3(kThreads), 0, stream,
               1, static_cast<const T*>(a.dy), a.dy_stride, static_cast<const T*>(a.gate), a.gate_stride,
               static_cast<const T*>(a.up), a.up_stride, static_cast<T*>(a.out), static_cast<T*>(a.out2),
               a.out_stride, a.rows, a.cols);
  });
}

const void* probe_kernel() { return reinterpret_cast<const void*>(glu_fwd_kernel<float, Act::kSilu, 1>); }

}  // namespace kp_fused_mlp
