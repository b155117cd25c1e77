// gated_linear's host dispatch: checks, the table row, and the call into the kernel instantiations
// (gated_sm90.cu). No CUTLASS header here.
#include "gated.cuh"

#include <string>

#include "gated_table.h"
#include "kp/dtype.cuh"
#include "kp/error.cuh"
#include "kp/gemm/sm90_gemm.h"
#include "kp/launch.cuh"

namespace kp_fused_mlp {
namespace {

using kp::gemm::Sm90Gated;

template <int DType>
void run_dtype(const kp::gemm::GatedProblem& p, int row, int device, cudaStream_t stream,
               kp::gemm::SchedulerKnobs knobs) {
  static_assert(GatedTable::size == 5, "a new table row needs a case here and its instantiations");
  switch (row) {
    case 0: return Sm90Gated<DType, GatedRow<0>>::run(p, device, stream, knobs);
    case 1: return Sm90Gated<DType, GatedRow<1>>::run(p, device, stream, knobs);
    case 2: return Sm90Gated<DType, GatedRow<2>>::run(p, device, stream, knobs);
    case 3: return Sm90Gated<DType, GatedRow<3>>::run(p, device, stream, knobs);
    case 4: return Sm90Gated<DType, GatedRow<4>>::run(p, device, stream, knobs);
  }
}

template <int DType>
void run_dgated_dtype(const kp::gemm::DGatedProblem& p, int row, int device, cudaStream_t stream,
                      kp::gemm::SchedulerKnobs knobs) {
  static_assert(DGatedRows::size == 1, "a new row needs a case here and its instantiations");
  (void)row;  // DGatedRows::rows[0], checked by the caller
  kp::gemm::Sm90DGated<DType, GatedRow<DGatedRows::rows[0]>>::run(p, device, stream, knobs);
}

// Raises unless `device` can run the sm90a GEMMs, from kp's per-device cache (no driver call on the
// hot path): an empty kernel must never run silently where sm_90a machine code cannot (PTX JIT on a
// newer GPU).
void check_device(int device, const char* op) {
  const kp::DeviceInfo& info = kp::device_info(device);
  if (!(kp::gemm::built_for_sm90a() && info.major == 9 && info.minor == 0))
    KP_CHECK_ARG(false, std::string(op) + ": " + kp::gemm::sm90_device_problem(device));
}

}  // namespace

std::vector<std::string> gated_config_names() {
  std::vector<std::string> out;
  for (const auto& r : GatedTable::rows) out.push_back(r.name);
  return out;
}

int gated_plan(int64_t m, int64_t inter, int64_t k) { return pick_gated_row(m, 2 * inter, k); }

void gated_linear_fwd(const kp::gemm::GatedProblem& p, int config, int device, cudaStream_t stream,
                      kp::gemm::SchedulerKnobs knobs) {
  KP_CHECK_ARG(p.dtype == kp::kF16 || p.dtype == kp::kBF16,
               std::string("gated_linear: the cuda GEMM takes float16 or bfloat16, got ") + kp::dtype_name(p.dtype));
  KP_CHECK_ARG(config >= -1 && config < GatedTable::size, "gated_linear: no GEMM config " + std::to_string(config));
  kp::gemm::check_gated(p, 2);
  if (p.m == 0 || p.inter == 0) return;
  check_device(device, "gated_linear");
  const int row = config >= 0 ? config : pick_gated_row(p.m, 2 * p.inter, p.k);
  if (p.dtype == kp::kBF16)
    run_dtype<kp::kBF16>(p, row, device, stream, knobs);
  else
    run_dtype<kp::kF16>(p, row, device, stream, knobs);
}

int dgated_plan(int64_t m, int64_t hidden) { return pick_dgated_row(m, hidden); }

void gated_down_grad(const kp::gemm::DGatedProblem& p, int config, int device, cudaStream_t stream,
                     kp::gemm::SchedulerKnobs knobs) {
  KP_CHECK_ARG(p.dtype == kp::kF16 || p.dtype == kp::kBF16,
               std::string("GatedMLP backward: the cuda GEMM takes float16 or bfloat16, got ") +
                   kp::dtype_name(p.dtype));
  KP_CHECK_ARG(config == -1 || (config >= 0 && config < GatedTable::size && DGatedRows::has(config)),
               "GatedMLP backward: no gated-gradient kernel on gated table row " + std::to_string(config));
  kp::gemm::check_dgated(p, 2);
  if (p.m == 0 || p.inter == 0) return;
  check_device(device, "GatedMLP backward");
  const int row = config >= 0 ? config : DGatedRows::rows[0];  // any size runs; the plan says where to fuse
  if (p.dtype == kp::kBF16)
    run_dgated_dtype<kp::kBF16>(p, row, device, stream, knobs);
  else
    run_dgated_dtype<kp::kF16>(p, row, device, stream, knobs);
}

}  // namespace kp_fused_mlp
