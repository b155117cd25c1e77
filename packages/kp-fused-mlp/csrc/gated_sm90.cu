// gated_linear's kernels: every row of gated_table.h for bf16 and fp16 (8 kernels, one file: most
// of a CUTLASS file's compile time is parsing the headers, ~6 s a further kernel).
#include "gated_table.h"
#include "kp/gemm/sm90_gated.cuh"

static_assert(kp_fused_mlp::GatedTable::size == 5, "a new table row needs its instantiations here");

template struct kp::gemm::Sm90Gated<kp::kBF16, kp_fused_mlp::GatedRow<0>>;
template struct kp::gemm::Sm90Gated<kp::kBF16, kp_fused_mlp::GatedRow<1>>;
template struct kp::gemm::Sm90Gated<kp::kBF16, kp_fused_mlp::GatedRow<2>>;
template struct kp::gemm::Sm90Gated<kp::kBF16, kp_fused_mlp::GatedRow<3>>;
template struct kp::gemm::Sm90Gated<kp::kBF16, kp_fused_mlp::GatedRow<4>>;
template struct kp::gemm::Sm90Gated<kp::kF16, kp_fused_mlp::GatedRow<0>>;
template struct kp::gemm::Sm90Gated<kp::kF16, kp_fused_mlp::GatedRow<1>>;
template struct kp::gemm::Sm90Gated<kp::kF16, kp_fused_mlp::GatedRow<2>>;
template struct kp::gemm::Sm90Gated<kp::kF16, kp_fused_mlp::GatedRow<3>>;
template struct kp::gemm::Sm90Gated<kp::kF16, kp_fused_mlp::GatedRow<4>>;
