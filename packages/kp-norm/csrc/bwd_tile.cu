// The tile backward kernels (8 an arch), instantiated through their address getters: the
// ones the plan (norm_bwd.cu) can choose in a release build.
#include "bwd_kernels.cuh"

#ifndef KP_NORM_TUNING  // a tuning build instantiates from the plan instead
namespace kp_norm {

// clang-format off
template BwdKernel bwd_tile_ptr<__half, __half, 16, 1, true, true>();
template BwdKernel bwd_tile_ptr<__half, __half, 16, 2, false, true>();
template BwdKernel bwd_tile_ptr<__half, __half, 16, 2, true, false>();
template BwdKernel bwd_tile_ptr<__half, __half, 16, 4, false, false>();
template BwdKernel bwd_tile_ptr<__nv_bfloat16, __nv_bfloat16, 16, 1, true, true>();
template BwdKernel bwd_tile_ptr<__nv_bfloat16, __nv_bfloat16, 16, 2, false, true>();
template BwdKernel bwd_tile_ptr<__nv_bfloat16, __nv_bfloat16, 16, 2, true, false>();
template BwdKernel bwd_tile_ptr<__nv_bfloat16, __nv_bfloat16, 16, 4, false, false>();
// clang-format on

}  // namespace kp_norm
#endif
