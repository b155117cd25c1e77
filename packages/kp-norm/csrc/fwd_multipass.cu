// The multipass forward kernels (6 an arch), instantiated through their address getters: the ones
// the plan (norm_fwd.cu) can choose in a release build.
#include "fwd_kernels.cuh"

#ifndef KP_NORM_TUNING  // a tuning build instantiates from the plan instead
namespace kp_norm {

// clang-format off
template FwdKernel fwd_multipass_ptr<__half, false>();
template FwdKernel fwd_multipass_ptr<__half, true>();
template FwdKernel fwd_multipass_ptr<__nv_bfloat16, false>();
template FwdKernel fwd_multipass_ptr<__nv_bfloat16, true>();
template FwdKernel fwd_multipass_ptr<float, false>();
template FwdKernel fwd_multipass_ptr<float, true>();
// clang-format on

}  // namespace kp_norm
#endif
