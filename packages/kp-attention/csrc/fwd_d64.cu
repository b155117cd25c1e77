// The forward kernels of head dim 64, fp16 and bf16 (fwd_launch.cuh lists each dtype's 2).
#include "fwd_launch.cuh"

template void kp_attention::run_fwd<64, kp::kF16>(const kp_attention::FwdParams&, int, cudaStream_t);
template const void* kp_attention::fwd_kernel_ptr<64, kp::kF16>();
template void kp_attention::run_fwd<64, kp::kBF16>(const kp_attention::FwdParams&, int, cudaStream_t);
template const void* kp_attention::fwd_kernel_ptr<64, kp::kBF16>();
