// SwiGLU, elementwise: y = silu(gate) * up, and its backward, in fp32, rounded once to the dtype.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace kp_fused_mlp {

// [rows, cols] tensors of one dtype (kp::DType code); row strides in elements, unit column stride.
struct SwigluArgs {
  const void* gate;
  int64_t gate_stride;
  const void* up;
  int64_t up_stride;
  const void* dy;  // backward only
  int64_t dy_stride;
  void* out;  // forward: y; backward: dgate        (contiguous rows of cols)
  void* out2;  // backward: dup                    (contiguous rows of cols)
  int64_t rows, cols;
  int dtype;
};

void swiglu_fwd(const SwigluArgs& a, int device, cudaStream_t stream);
void swiglu_bwd(const SwigluArgs& a, int device, cudaStream_t stream);
const void* probe_kernel();

}  // namespace kp_fused_mlp
