// The ring forward kernels (40 an arch), instantiated through their address getters: the ones
// the plan (norm_fwd.cu) can choose in a release build.
#include "fwd_kernels.cuh"

#ifndef KP_NORM_TUNING  // a tuning build instantiates from the plan instead
namespace kp_norm {

// clang-format off
template FwdKernel fwd_ring_ptr<__half, __half, false, false, 0, 0>();
template FwdKernel fwd_ring_ptr<__half, __half, false, false, 2, 0>();
template FwdKernel fwd_ring_ptr<__half, __half, false, false, 2, 256>();
template FwdKernel fwd_ring_ptr<__half, __half, false, false, 2, 512>();
template FwdKernel fwd_ring_ptr<__half, __half, false, true, 0, 0>();
template FwdKernel fwd_ring_ptr<__half, __half, false, true, 2, 0>();
template FwdKernel fwd_ring_ptr<__half, __half, false, true, 2, 256>();
template FwdKernel fwd_ring_ptr<__half, __half, false, true, 2, 512>();
template FwdKernel fwd_ring_ptr<__half, __half, true, false, 0, 0>();
template FwdKernel fwd_ring_ptr<__half, __half, true, false, 1, 0>();
template FwdKernel fwd_ring_ptr<__half, __half, true, true, 0, 0>();
template FwdKernel fwd_ring_ptr<__half, __half, true, true, 1, 0>();
template FwdKernel fwd_ring_ptr<__half, float, false, false, 0, 0>();
template FwdKernel fwd_ring_ptr<__half, float, false, true, 0, 0>();
template FwdKernel fwd_ring_ptr<__half, float, true, false, 0, 0>();
template FwdKernel fwd_ring_ptr<__half, float, true, true, 0, 0>();
template FwdKernel fwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, false, false, 0, 0>();
template FwdKernel fwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, false, false, 2, 0>();
template FwdKernel fwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, false, false, 2, 256>();
template FwdKernel fwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, false, false, 2, 512>();
template FwdKernel fwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, false, true, 0, 0>();
template FwdKernel fwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, false, true, 2, 0>();
template FwdKernel fwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, false, true, 2, 256>();
template FwdKernel fwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, false, true, 2, 512>();
template FwdKernel fwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, true, false, 0, 0>();
template FwdKernel fwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, true, false, 1, 0>();
template FwdKernel fwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, true, true, 0, 0>();
template FwdKernel fwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, true, true, 1, 0>();
template FwdKernel fwd_ring_ptr<__nv_bfloat16, float, false, false, 0, 0>();
template FwdKernel fwd_ring_ptr<__nv_bfloat16, float, false, true, 0, 0>();
template FwdKernel fwd_ring_ptr<__nv_bfloat16, float, true, false, 0, 0>();
template FwdKernel fwd_ring_ptr<__nv_bfloat16, float, true, true, 0, 0>();
template FwdKernel fwd_ring_ptr<float, float, false, false, 0, 0>();
template FwdKernel fwd_ring_ptr<float, float, false, false, 2, 0>();
template FwdKernel fwd_ring_ptr<float, float, false, true, 0, 0>();
template FwdKernel fwd_ring_ptr<float, float, false, true, 2, 0>();
template FwdKernel fwd_ring_ptr<float, float, true, false, 0, 0>();
template FwdKernel fwd_ring_ptr<float, float, true, false, 1, 0>();
template FwdKernel fwd_ring_ptr<float, float, true, true, 0, 0>();
template FwdKernel fwd_ring_ptr<float, float, true, true, 1, 0>();
// clang-format on

}  // namespace kp_norm
#endif
