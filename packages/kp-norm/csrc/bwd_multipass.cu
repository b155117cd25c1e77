// The multipass backward kernels (10 an arch), instantiated through their address getters: the
// ones the plan (norm_bwd.cu) can choose in a release build.
#include "bwd_kernels.cuh"

#ifndef KP_NORM_TUNING  // a tuning build instantiates from the plan instead
namespace kp_norm {

// clang-format off
template BwdKernel bwd_multipass_ptr<__half, __half, false>();
template BwdKernel bwd_multipass_ptr<__half, __half, true>();
template BwdKernel bwd_multipass_ptr<__half, float, false>();
template BwdKernel bwd_multipass_ptr<__half, float, true>();
template BwdKernel bwd_multipass_ptr<__nv_bfloat16, __nv_bfloat16, false>();
template BwdKernel bwd_multipass_ptr<__nv_bfloat16, __nv_bfloat16, true>();
template BwdKernel bwd_multipass_ptr<__nv_bfloat16, float, false>();
template BwdKernel bwd_multipass_ptr<__nv_bfloat16, float, true>();
template BwdKernel bwd_multipass_ptr<float, float, false>();
template BwdKernel bwd_multipass_ptr<float, float, true>();
// clang-format on

}  // namespace kp_norm
#endif
