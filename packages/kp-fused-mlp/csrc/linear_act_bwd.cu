// linear_act's training GEMMs, host dispatch: checks, the training row, and the call into the
// kernel instantiations (linear_act_bwd_sm90_{bf16,fp16}.cu). No CUTLASS header here.
#include "linear_act_bwd.cuh"

#include <string>

#include "gemm_bwd_table.h"
#include "kp/dtype.cuh"
#include "kp/error.cuh"
#include "kp/gemm/sm90_gemm.h"

namespace kp_fused_mlp {
namespace {

using kp::gemm::Operands;
using kp::gemm::Sm90Gemm;
namespace epi = kp::gemm::epi;

using Job = TrainJob;
constexpr Operands kOps[] = {Operands::kKK, Operands::kKMn, Operands::kMnMn};
constexpr const char* kJobNames[] = {"linear_act (training forward)", "linear_act dx", "linear_act dweight"};

template <int DType, int Row>
void run_row(Job job, const kp::gemm::Problem& p, const epi::BiasActAux::Args& e, int device, cudaStream_t stream) {
  switch (job) {
    case Job::kSave: return Sm90Gemm<DType, GemmRow<Row>, epi::BiasActAux>::run(p, e, device, stream);
    case Job::kDgrad: return Sm90Gemm<DType, GemmRow<Row>, epi::Identity, Operands::kKMn>::run(p, {}, device, stream);
    case Job::kWgrad: return Sm90Gemm<DType, GemmRow<Row>, epi::Identity, Operands::kMnMn>::run(p, {}, device, stream);
  }
}

template <int DType>
void run_dtype(Job job, const kp::gemm::Problem& p, const epi::BiasActAux::Args& e, int row, int device,
               cudaStream_t stream) {
  static_assert(GemmBwdTable::size == 3, "a new training row needs a case here and its instantiations");
  switch (row) {
    case 2: return run_row<DType, 2>(job, p, e, device, stream);
    case 3: return run_row<DType, 3>(job, p, e, device, stream);
    case 4: return run_row<DType, 4>(job, p, e, device, stream);
  }
}

// Checks, then the kernel of the job on the call's training row.
void run(Job job, const kp::gemm::Problem& p, const epi::BiasActAux::Args& e, int config, int device,
         cudaStream_t stream) {
  const std::string what = kJobNames[static_cast<int>(job)];
  KP_CHECK_ARG(p.dtype == kp::kF16 || p.dtype == kp::kBF16,
               what + ": the cuda GEMM takes float16 or bfloat16, got " + kp::dtype_name(p.dtype));
  KP_CHECK_ARG(config == -1 || has_bwd_kernels(config),
               what + ": GEMM config " + std::to_string(config) + " has no training kernels (gemm_bwd_configs())");
  kp::gemm::check_problem(p, 2, kOps[static_cast<int>(job)]);
  if (p.m == 0 || p.n == 0) return;
  kp::gemm::check_sm90_device(device, what);
  const int row = config >= 0 ? config : pick_train_row(p.m, p.n, p.k, job);
  if (p.dtype == kp::kBF16)
    run_dtype<kp::kBF16>(job, p, e, row, device, stream);
  else
    run_dtype<kp::kF16>(job, p, e, row, device, stream);
}

}  // namespace

void linear_act_save(const LinearActArgs& a, void* z, int config, int device, cudaStream_t stream) {
  KP_CHECK_ARG(a.act >= 0 && a.act < kp::gemm::kNumActs,
               "linear_act: unknown activation code " + std::to_string(a.act));
  KP_CHECK_ARG(a.bias == nullptr || reinterpret_cast<uintptr_t>(a.bias) % kp::gemm::kTmaAlignBytes == 0,
               "linear_act: bias must be 16-byte aligned");
  KP_CHECK_ARG(a.m == 0 || a.n == 0 || (z != nullptr && reinterpret_cast<uintptr_t>(z) % kp::gemm::kTmaAlignBytes == 0),
               "linear_act: the saved pre-activation z must be a 16-byte aligned [m, n] buffer");
  const kp::gemm::Problem p{a.x, a.x_stride, a.w, a.w_stride, a.y, a.n, a.m, a.n, a.k, a.dtype};
  run(Job::kSave, p, {a.bias, a.act, z, a.n}, config, device, stream);
}

// dX[m, k] = dP[m, n] @ W[n, k]: the GEMM (M, N, K) = (m, k, n); A = dP K-major, B = W MN-major
// (W's rows, of k elements, are the rows of B^T).
void linear_act_dgrad(const GradGemmArgs& a, int config, int device, cudaStream_t stream) {
  const kp::gemm::Problem p{a.dp, a.dp_stride, a.other, a.other_stride, a.out, a.k, a.m, a.k, a.n, a.dtype};
  run(Job::kDgrad, p, {}, config, device, stream);
}

// dW[n, k] = dP^T @ X: the GEMM (M, N, K) = (n, k, m); A = dP^T MN-major (dP's rows are A^T's),
// B = X MN-major (X's rows are B^T's). The reduction over m is one fp32 accumulation, rounded once.
void linear_act_wgrad(const GradGemmArgs& a, int config, int device, cudaStream_t stream) {
  const kp::gemm::Problem p{a.dp, a.dp_stride, a.other, a.other_stride, a.out, a.k, a.n, a.k, a.m, a.dtype};
  run(Job::kWgrad, p, {}, config, device, stream);
}

std::vector<int> gemm_bwd_configs() { return std::vector<int>(std::begin(GemmBwdTable::rows), std::end(GemmBwdTable::rows)); }

int gemm_bwd_plan(int64_t m, int64_t n, int64_t k, int job) {
  KP_CHECK_ARG(job >= 0 && job <= 2, "gemm_bwd_plan: job must be 0 (save), 1 (dx) or 2 (dw)");
  return pick_train_row(m, n, k, static_cast<TrainJob>(job));
}

}  // namespace kp_fused_mlp
