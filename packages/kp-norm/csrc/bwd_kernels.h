// The backward kernels as the plan (norm_bwd.cu) sees them: getters of their addresses (nvcc gives
// kernels internal linkage without relocatable device code, so the plan cannot name them across
// translation units). Each family is defined in bwd_kernels.cuh and instantiated, from an explicit
// list, in its own translation unit (bwd_ring.cu, bwd_direct.cu, bwd_tile.cu, bwd_multipass.cu).
#pragma once
#include "norm.cuh"

namespace kp_norm {

using BwdKernel = void (*)(const BwdParams);
template <typename T, typename X, typename W, int E, bool WT, bool DB, int WRP, int FT = 0>
BwdKernel bwd_ring_ptr();
template <typename T, typename X>
BwdKernel bwd_direct_ptr();
template <typename T, typename X, int E, int M, bool DB, bool HD>
BwdKernel bwd_tile_ptr();
template <typename T, typename X, bool VECTOR>
BwdKernel bwd_multipass_ptr();

}  // namespace kp_norm
