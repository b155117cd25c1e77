// linear_act's bf16 training kernels (gemm_bwd_table.h: 2 rows x {save-Z forward, dX, dW}).
#include "linear_act_bwd_sm90.cuh"

KP_FUSED_MLP_SM90_BWD_KERNELS(kp::kBF16)
