// The backward kernels of head dim 256, fp16 and bf16 (bwd_launch.cuh lists each dtype's 4).
#include "bwd_launch.cuh"

template void kp_attention::run_bwd<256, kp::kF16>(const kp_attention::BwdParams&, int, cudaStream_t);
template void kp_attention::run_bwd<256, kp::kBF16>(const kp_attention::BwdParams&, int, cudaStream_t);
