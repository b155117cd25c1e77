// SwiGLU forward and backward, one element a thread, coalesced along the row.
//
// Grid: x covers the columns (kThreads a block), y strides over the rows (gridDim.y <= 65535, the
// hardware limit of that dimension). Offsets are 64-bit: rows * stride may pass 2^31.
// A first, plain version (kp-fused-mlp 0.1.0): 16-byte packets and a persistent grid are issue 18's
// work, measured against copy bandwidth.
#include <algorithm>

#include "kp/dtype.cuh"
#include "kp/error.cuh"
#include "kp/host.cuh"
#include "kp/launch.cuh"
#include "swiglu.cuh"

namespace kp_fused_mlp {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;

__device__ __forceinline__ float sigmoid(float g) { return 1.f / (1.f + expf(-g)); }

template <typename T>
__global__ void __launch_bounds__(kThreads) swiglu_fwd_kernel(const T* __restrict__ gate, int64_t gate_stride,
                                                              const T* __restrict__ up, int64_t up_stride,
                                                              T* __restrict__ y, int64_t rows, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= cols) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float g = kp::to_f(gate[r * gate_stride + c]), u = kp::to_f(up[r * up_stride + c]);
    y[r * cols + c] = kp::from_f<T>(g * sigmoid(g) * u);
  }
}

// d/dg [g s(g) u] = u s (1 + g (1 - s)),  d/du = g s.
template <typename T>
__global__ void __launch_bounds__(kThreads) swiglu_bwd_kernel(const T* __restrict__ dy, int64_t dy_stride,
                                                              const T* __restrict__ gate, int64_t gate_stride,
                                                              const T* __restrict__ up, int64_t up_stride,
                                                              T* __restrict__ dgate, T* __restrict__ dup,
                                                              int64_t rows, int64_t cols) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= cols) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float d = kp::to_f(dy[r * dy_stride + c]);
    const float g = kp::to_f(gate[r * gate_stride + c]), u = kp::to_f(up[r * up_stride + c]);
    const float s = sigmoid(g);
    dgate[r * cols + c] = kp::from_f<T>(d * u * s * (1.f + g * (1.f - s)));
    dup[r * cols + c] = kp::from_f<T>(d * g * s);
  }
}

dim3 grid_for(int64_t rows, int64_t cols) {
  return dim3(static_cast<unsigned>(kp::cdiv(cols, kThreads)), static_cast<unsigned>(std::min(rows, kMaxGridY)));
}

void check(const SwigluArgs& a, bool bwd) {
  KP_CHECK_ARG(kp::valid_dtype(a.dtype), "unsupported dtype code " + std::to_string(a.dtype));
  KP_CHECK_ARG(a.rows >= 0 && a.cols >= 0, "rows and cols must be >= 0");
  KP_CHECK_ARG(a.cols < (int64_t{1} << 31) * kThreads, "cols too large for the grid");
  if (a.rows == 0 || a.cols == 0) return;
  kp::check_rows("gate", a.gate, a.gate_stride, a.rows, a.cols);
  kp::check_rows("up", a.up, a.up_stride, a.rows, a.cols);
  KP_CHECK_ARG(a.out != nullptr, "the output must not be null");
  if (bwd) {
    kp::check_rows("dy", a.dy, a.dy_stride, a.rows, a.cols);
    KP_CHECK_ARG(a.out2 != nullptr, "dup must not be null");
  }
}

}  // namespace

void swiglu_fwd(const SwigluArgs& a, int device, cudaStream_t stream) {
  check(a, false);
  if (a.rows == 0 || a.cols == 0) return;
  kp::DeviceGuard guard(device);
  KP_DISPATCH_DTYPE(a.dtype, T, {
    kp::launch(swiglu_fwd_kernel<T>, device, grid_for(a.rows, a.cols), dim3(kThreads), 0, stream, 1,
               static_cast<const T*>(a.gate), a.gate_stride, static_cast<const T*>(a.up), a.up_stride,
               static_cast<T*>(a.out), a.rows, a.cols);
  })
}

void swiglu_bwd(const SwigluArgs& a, int device, cudaStream_t stream) {
  check(a, true);
  if (a.rows == 0 || a.cols == 0) return;
  kp::DeviceGuard guard(device);
  KP_DISPATCH_DTYPE(a.dtype, T, {
    kp::launch(swiglu_bwd_kernel<T>, device, grid_for(a.rows, a.cols), dim3(kThreads), 0, stream, 1,
               static_cast<const T*>(a.dy), a.dy_stride, static_cast<const T*>(a.gate), a.gate_stride,
               static_cast<const T*>(a.up), a.up_stride, static_cast<T*>(a.out), static_cast<T*>(a.out2), a.rows,
               a.cols);
  })
}

const void* probe_kernel() { return reinterpret_cast<const void*>(swiglu_fwd_kernel<float>); }

}  // namespace kp_fused_mlp
