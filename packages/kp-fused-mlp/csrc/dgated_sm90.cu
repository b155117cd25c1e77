// GatedMLP's gated-gradient kernels (kp/gemm/sm90_dgated.cuh): gated_table.h's DGatedRows for bf16
// and fp16 (2 kernels).
#include "gated_table.h"
#include "kp/gemm/sm90_dgated.cuh"

static_assert(kp_fused_mlp::DGatedRows::size == 1, "a new row needs its instantiations here");

template struct kp::gemm::Sm90DGated<kp::kBF16, kp_fused_mlp::GatedRow<kp_fused_mlp::DGatedRows::rows[0]>>;
template struct kp::gemm::Sm90DGated<kp::kF16, kp_fused_mlp::GatedRow<kp_fused_mlp::DGatedRows::rows[0]>>;
