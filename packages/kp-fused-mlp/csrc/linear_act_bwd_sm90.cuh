// linear_act's training kernels for one dtype (gemm_bwd_table.h): on each training row, the
// forward that saves Z, the dX GEMM and the dW GEMM. Included by linear_act_bwd_sm90_bf16.cu and
// linear_act_bwd_sm90_fp16.cu (one dtype a file, so that the two compile in parallel).
#pragma once
#include "gemm_bwd_table.h"
#include "kp/gemm/sm90_gemm.cuh"

static_assert(kp_fused_mlp::GemmBwdTable::size == 3 && kp_fused_mlp::GemmBwdTable::rows[0] == 2 &&
                  kp_fused_mlp::GemmBwdTable::rows[1] == 3 && kp_fused_mlp::GemmBwdTable::rows[2] == 4,
              "a new training row needs its instantiations in KP_FUSED_MLP_SM90_BWD_KERNELS");

#define KP_FUSED_MLP_SM90_BWD_ROW(DTYPE, ROW)                                                                    \
  template struct kp::gemm::Sm90Gemm<DTYPE, kp_fused_mlp::GemmRow<ROW>, kp::gemm::epi::BiasActAux>;             \
  template struct kp::gemm::Sm90Gemm<DTYPE, kp_fused_mlp::GemmRow<ROW>, kp::gemm::epi::Identity,                \
                                     kp::gemm::Operands::kKMn>;                                                  \
  template struct kp::gemm::Sm90Gemm<DTYPE, kp_fused_mlp::GemmRow<ROW>, kp::gemm::epi::Identity,                \
                                     kp::gemm::Operands::kMnMn>;

#define KP_FUSED_MLP_SM90_BWD_KERNELS(DTYPE) \
  KP_FUSED_MLP_SM90_BWD_ROW(DTYPE, 2)        \
  KP_FUSED_MLP_SM90_BWD_ROW(DTYPE, 3)        \
  KP_FUSED_MLP_SM90_BWD_ROW(DTYPE, 4)
