// Gated linear units, elementwise: y = act(gate) * up (act: silu for SwiGLU, gelu or its tanh form
// for GeGLU) and its backward, in fp32, rounded once to the dtype.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace kp_fused_mlp {

// [rows, cols] tensors of one dtype (kp::DType code); row strides in elements, unit column stride.
struct GluArgs {
  const void* gate;
  int64_t gate_stride;
  const void* up;
  int64_t up_stride;
  const void* dy;  // backward only
  int64_t dy_stride;
  void* out;  // forward: y (contiguous rows of cols); backward: dgate
  void* out2;  // backward: dup
  int64_t out_stride;  // backward: the row stride of dgate and dup (cols; 2 * cols for a packed gradient)
  int64_t rows, cols;
  int dtype;
  int act;  // kp::gemm::Act: kSilu, kGelu or kGeluTanh
};

void glu_fwd(const GluArgs& a, int device, cudaStream_t stream);
void glu_bwd(const GluArgs& a, int device, cudaStream_t stream);
const void* probe_kernel();

}  // namespace kp_fused_mlp
