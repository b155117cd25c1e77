// The ring backward kernels (46 an arch; fp32 weights of a 16-bit T share the T-wide kernels),
// instantiated through their address getters: the ones the plan (norm_bwd.cu) can choose in a
// release build.
#include "bwd_kernels.cuh"

#ifndef KP_NORM_TUNING  // a tuning build instantiates from the plan instead
namespace kp_norm {

// clang-format off
template BwdKernel bwd_ring_ptr<__half, __half, __half, 16, true, false, 0, 0>();
template BwdKernel bwd_ring_ptr<__half, __half, __half, 16, true, true, 0, 0>();
template BwdKernel bwd_ring_ptr<__half, __half, __half, 32, false, false, 0, 0>();
template BwdKernel bwd_ring_ptr<__half, __half, __half, 32, false, false, 0, 256>();
template BwdKernel bwd_ring_ptr<__half, __half, __half, 32, false, false, 1, 0>();
template BwdKernel bwd_ring_ptr<__half, __half, __half, 32, false, false, 1, 256>();
template BwdKernel bwd_ring_ptr<__half, __half, __half, 32, false, true, 0, 0>();
template BwdKernel bwd_ring_ptr<__half, __half, __half, 32, false, true, 0, 256>();
template BwdKernel bwd_ring_ptr<__half, __half, __half, 32, false, true, 1, 0>();
template BwdKernel bwd_ring_ptr<__half, __half, __half, 32, false, true, 1, 256>();
template BwdKernel bwd_ring_ptr<__half, __half, __half, 32, false, true, 2, 0>();
template BwdKernel bwd_ring_ptr<__half, __half, __half, 32, false, true, 2, 256>();
template BwdKernel bwd_ring_ptr<__half, __half, __half, 32, true, false, 0, 0>();
template BwdKernel bwd_ring_ptr<__half, __half, __half, 32, true, true, 0, 0>();
template BwdKernel bwd_ring_ptr<__half, __half, __half, 8, true, false, 0, 0>();
template BwdKernel bwd_ring_ptr<__half, __half, __half, 8, true, true, 0, 0>();
template BwdKernel bwd_ring_ptr<__half, float, __half, 32, false, false, 0, 0>();
template BwdKernel bwd_ring_ptr<__half, float, __half, 32, false, true, 0, 0>();
template BwdKernel bwd_ring_ptr<__half, float, __half, 32, true, false, 0, 0>();
template BwdKernel bwd_ring_ptr<__half, float, __half, 32, true, true, 0, 0>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 16, true, false, 0, 0>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 16, true, true, 0, 0>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 32, false, false, 0, 0>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 32, false, false, 0, 256>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 32, false, false, 1, 0>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 32, false, false, 1, 256>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 32, false, true, 0, 0>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 32, false, true, 0, 256>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 32, false, true, 1, 0>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 32, false, true, 1, 256>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 32, false, true, 2, 0>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 32, false, true, 2, 256>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 32, true, false, 0, 0>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 32, true, true, 0, 0>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 8, true, false, 0, 0>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 8, true, true, 0, 0>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, float, __nv_bfloat16, 32, false, false, 0, 0>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, float, __nv_bfloat16, 32, false, true, 0, 0>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, float, __nv_bfloat16, 32, true, false, 0, 0>();
template BwdKernel bwd_ring_ptr<__nv_bfloat16, float, __nv_bfloat16, 32, true, true, 0, 0>();
template BwdKernel bwd_ring_ptr<float, float, float, 32, false, false, 0, 0>();
template BwdKernel bwd_ring_ptr<float, float, float, 32, false, true, 0, 0>();
template BwdKernel bwd_ring_ptr<float, float, float, 32, false, false, 0, 256>();
template BwdKernel bwd_ring_ptr<float, float, float, 32, false, true, 0, 256>();
template BwdKernel bwd_ring_ptr<float, float, float, 32, true, false, 0, 0>();
template BwdKernel bwd_ring_ptr<float, float, float, 32, true, true, 0, 0>();
// clang-format on

}  // namespace kp_norm
#endif
