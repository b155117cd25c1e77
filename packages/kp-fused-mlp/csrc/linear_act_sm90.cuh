// The kernels of gemm_table.h for one dtype: every row x {identity, bias_act}. Included by
// linear_act_sm90_bf16.cu and linear_act_sm90_fp16.cu (one dtype a file: the two compile in
// parallel, about a minute each for sm_90a, most of it parsing CUTLASS).
#pragma once
#include "gemm_table.h"
#include "kp/gemm/sm90_gemm.cuh"

static_assert(kp_fused_mlp::GemmTable::size == 5,
              "a new table row needs its instantiations in KP_FUSED_MLP_SM90_KERNELS");

#define KP_FUSED_MLP_SM90_KERNELS(DTYPE)                                                            \
  template struct kp::gemm::Sm90Gemm<DTYPE, kp_fused_mlp::GemmRow<0>, kp::gemm::epi::Identity>;   \
  template struct kp::gemm::Sm90Gemm<DTYPE, kp_fused_mlp::GemmRow<0>, kp::gemm::epi::BiasAct>;    \
  template struct kp::gemm::Sm90Gemm<DTYPE, kp_fused_mlp::GemmRow<1>, kp::gemm::epi::Identity>;   \
  template struct kp::gemm::Sm90Gemm<DTYPE, kp_fused_mlp::GemmRow<1>, kp::gemm::epi::BiasAct>;    \
  template struct kp::gemm::Sm90Gemm<DTYPE, kp_fused_mlp::GemmRow<2>, kp::gemm::epi::Identity>;   \
  template struct kp::gemm::Sm90Gemm<DTYPE, kp_fused_mlp::GemmRow<2>, kp::gemm::epi::BiasAct>;    \
  template struct kp::gemm::Sm90Gemm<DTYPE, kp_fused_mlp::GemmRow<3>, kp::gemm::epi::Identity>;   \
  template struct kp::gemm::Sm90Gemm<DTYPE, kp_fused_mlp::GemmRow<3>, kp::gemm::epi::BiasAct>;    \
  template struct kp::gemm::Sm90Gemm<DTYPE, kp_fused_mlp::GemmRow<4>, kp::gemm::epi::Identity>;   \
  template struct kp::gemm::Sm90Gemm<DTYPE, kp_fused_mlp::GemmRow<4>, kp::gemm::epi::BiasAct>;
