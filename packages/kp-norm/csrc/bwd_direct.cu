// The direct backward kernels (5 an arch), instantiated through their address getters: the
// ones the plan (norm_bwd.cu) can choose in a release build.
#include "bwd_kernels.cuh"

#ifndef KP_NORM_TUNING  // a tuning build instantiates from the plan instead
namespace kp_norm {

// clang-format off
template BwdKernel bwd_direct_ptr<__half, __half>();
template BwdKernel bwd_direct_ptr<__half, float>();
template BwdKernel bwd_direct_ptr<__nv_bfloat16, __nv_bfloat16>();
template BwdKernel bwd_direct_ptr<__nv_bfloat16, float>();
template BwdKernel bwd_direct_ptr<float, float>();
// clang-format on

}  // namespace kp_norm
#endif
