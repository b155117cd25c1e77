// The Hopper forward kernels of head dim 128, fp16 and bf16 (hopper_fwd_launch.cuh lists each
// dtype's 2). sm_90a machine code only; the other archs of the build compile empty kernels.
#include "hopper_fwd_launch.cuh"

template bool kp_attention::run_hopper_fwd<128, kp::kF16>(const kp_attention::FwdParams&,
                                                         const kp_attention::HopperExtra&, int, cudaStream_t);
template bool kp_attention::run_hopper_fwd<128, kp::kBF16>(const kp_attention::FwdParams&,
                                                          const kp_attention::HopperExtra&, int, cudaStream_t);
