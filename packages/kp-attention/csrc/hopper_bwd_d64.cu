// The Hopper backward at head_dim 64, both dtypes (hopper_bwd_launch.cuh lists the kernels).
#include "hopper_bwd_launch.cuh"

namespace kp_attention {
template bool run_hopper_bwd<64, kp::kF16>(const BwdParams&, const HopperBwdExtra&, int, cudaStream_t);
template bool run_hopper_bwd<64, kp::kBF16>(const BwdParams&, const HopperBwdExtra&, int, cudaStream_t);
}  // namespace kp_attention
