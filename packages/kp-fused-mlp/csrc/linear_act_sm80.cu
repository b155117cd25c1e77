// linear_act's sm80 GEMM kernels (shared_cuda's kp/gemm/sm80_gemm.cuh): 2 dtypes x {identity,
// bias_act}. They compile for every arch of the build (mma.sync runs on sm_80 to sm_90), so a
// Hopper GPU runs them when the config is forced (tests/test_linear_act.py, every config).
#include "kp/gemm/sm80_gemm.cuh"

template struct kp::gemm::Sm80Gemm<kp::kBF16, kp::gemm::epi::Identity>;
template struct kp::gemm::Sm80Gemm<kp::kBF16, kp::gemm::epi::BiasAct>;
template struct kp::gemm::Sm80Gemm<kp::kF16, kp::gemm::epi::Identity>;
template struct kp::gemm::Sm80Gemm<kp::kF16, kp::gemm::epi::BiasAct>;
