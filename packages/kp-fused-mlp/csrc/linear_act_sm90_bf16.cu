// linear_act's bf16 kernels (gemm_table.h: 4 rows x 2 epilogues).
#include "linear_act_sm90.cuh"

KP_FUSED_MLP_SM90_KERNELS(kp::kBF16)
