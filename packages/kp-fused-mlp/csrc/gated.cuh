// gated_linear: h[M, I] = act(x Wg^T + bg) * (x Wu^T + bu) in one sm90a GEMM against the interleaved
// copy of [Wg; Wu] (kp/gemm/sm90_gated.h says the layout and why), the gated activation in its
// epilogue, rounded once; optionally also P = [gate_pre | up_pre] [M, 2I] for the backward.
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "kp/gemm/sm90_dgated.h"
#include "kp/gemm/sm90_gated.h"

namespace kp_fused_mlp {

// config: a row of gated_table.h, or -1 for the row pick_gated_row() gives; knobs: the scheduler's
// swizzle and raster for sweeps (defaults: the row's).
void gated_linear_fwd(const kp::gemm::GatedProblem& p, int config, int device, cudaStream_t stream,
                      kp::gemm::SchedulerKnobs knobs = {});
std::vector<std::string> gated_config_names();

// GatedMLP's backward through the gated activation: dP [M, 2I] from dy [M, H], the down weight
// [H, I] and P (kp/gemm/sm90_dgated.h) in one sm90a GEMM. config: a row of gated_table.h's
// DGatedRows, or -1 for its first.
void gated_down_grad(const kp::gemm::DGatedProblem& p, int config, int device, cudaStream_t stream,
                     kp::gemm::SchedulerKnobs knobs = {});
// The row GatedMLP's fused backward of m tokens at this hidden size takes, or -1: not fused.
int dgated_plan(int64_t m, int64_t hidden);
int gated_plan(int64_t m, int64_t inter, int64_t k);

}  // namespace kp_fused_mlp
