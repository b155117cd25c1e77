// The direct forward kernels (81 an arch), instantiated through their address getters: the ones
// the plan (norm_fwd.cu) can choose in a release build.
#include "fwd_kernels.cuh"

#ifndef KP_NORM_TUNING  // a tuning build instantiates from the plan instead
namespace kp_norm {

// clang-format off
template FwdKernel fwd_direct_ptr<__half, __half, 16, true, false, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 16, true, false, false, 128, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 16, true, false, false, 256, 1, 48>();
template FwdKernel fwd_direct_ptr<__half, __half, 16, true, false, false, 512, 1, 40>();
template FwdKernel fwd_direct_ptr<__half, __half, 16, true, false, false, 64, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 16, true, false, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 16, true, false, true, 1024, 1, 32>();
template FwdKernel fwd_direct_ptr<__half, __half, 16, true, false, true, 128, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 16, true, false, true, 256, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 16, true, false, true, 512, 1, 40>();
template FwdKernel fwd_direct_ptr<__half, __half, 16, true, false, true, 64, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 32, true, false, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 32, true, false, false, 128, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 32, true, false, false, 256, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 32, true, false, false, 512, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 32, true, false, false, 64, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 32, true, false, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 32, true, false, true, 128, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 32, true, false, true, 256, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 32, true, false, true, 512, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 32, true, false, true, 64, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 32, true, true, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 32, true, true, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 8, true, false, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 8, true, false, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 8, true, true, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, __half, 8, true, true, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, float, 32, true, false, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, float, 32, true, false, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, float, 32, true, true, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, float, 32, true, true, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, float, 8, true, false, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, float, 8, true, false, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, float, 8, true, true, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__half, float, 8, true, true, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 16, true, false, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 16, true, false, false, 128, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 16, true, false, false, 256, 1, 48>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 16, true, false, false, 512, 1, 40>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 16, true, false, false, 64, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 16, true, false, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 16, true, false, true, 1024, 1, 32>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 16, true, false, true, 128, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 16, true, false, true, 256, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 16, true, false, true, 512, 1, 40>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 16, true, false, true, 64, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 32, true, false, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 32, true, false, false, 128, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 32, true, false, false, 256, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 32, true, false, false, 512, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 32, true, false, false, 64, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 32, true, false, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 32, true, false, true, 128, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 32, true, false, true, 256, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 32, true, false, true, 512, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 32, true, false, true, 64, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 32, true, true, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 32, true, true, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 8, true, false, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 8, true, false, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 8, true, true, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, __nv_bfloat16, 8, true, true, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, float, 32, true, false, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, float, 32, true, false, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, float, 32, true, true, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, float, 32, true, true, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, float, 8, true, false, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, float, 8, true, false, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, float, 8, true, true, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<__nv_bfloat16, float, 8, true, true, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<float, float, 32, true, false, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<float, float, 32, true, false, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<float, float, 32, true, true, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<float, float, 32, true, true, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<float, float, 8, true, false, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<float, float, 8, true, false, true, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<float, float, 8, true, true, false, 0, 1, 0>();
template FwdKernel fwd_direct_ptr<float, float, 8, true, true, true, 0, 1, 0>();
template FwdKernel fwd_scalar_ptr<__half>();
template FwdKernel fwd_scalar_ptr<__nv_bfloat16>();
template FwdKernel fwd_scalar_ptr<float>();
// clang-format on

}  // namespace kp_norm
#endif
