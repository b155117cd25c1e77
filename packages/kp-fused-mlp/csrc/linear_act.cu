// linear_act's host dispatch: checks, the table row, and the call into the kernel instantiations
// (linear_act_sm90_{bf16,fp16}.cu, linear_act_sm80.cu). No CUTLASS header here: this file compiles
// in seconds.
#include "linear_act.cuh"

#include <string>

#include "decode_gemv.cuh"
#include "decode_table.h"
#include "gemm_table.h"
#include "kp/dtype.cuh"
#include "kp/error.cuh"
#include "kp/gemm/sm80_gemm.h"
#include "kp/gemm/sm90_gemm.h"
#include "kp/launch.cuh"

namespace kp_fused_mlp {
namespace {

using kp::gemm::Act;
using kp::gemm::Sm80Gemm;
using kp::gemm::Sm90Gemm;
namespace epi = kp::gemm::epi;

template <int DType, int Row>
void run_row(const kp::gemm::Problem& p, const LinearActArgs& a, int device, cudaStream_t stream) {
  if (a.bias == nullptr && a.act == static_cast<int>(Act::kNone))
    Sm90Gemm<DType, GemmRow<Row>, epi::Identity>::run(p, {}, device, stream);
  else
    Sm90Gemm<DType, GemmRow<Row>, epi::BiasAct>::run(p, {a.bias, a.act}, device, stream);
}

template <int DType>
void run_dtype(const kp::gemm::Problem& p, const LinearActArgs& a, int row, int device, cudaStream_t stream) {
  static_assert(GemmTable::size == 5, "a new table row needs a case here and its instantiations");
  switch (row) {
    case 0: return run_row<DType, 0>(p, a, device, stream);
    case 1: return run_row<DType, 1>(p, a, device, stream);
    case 2: return run_row<DType, 2>(p, a, device, stream);
    case 3: return run_row<DType, 3>(p, a, device, stream);
    case 4: return run_row<DType, 4>(p, a, device, stream);
  }
}

void run_sm80(const kp::gemm::Problem& p, const LinearActArgs& a, int device, cudaStream_t stream) {
  const bool identity = a.bias == nullptr && a.act == static_cast<int>(Act::kNone);
  if (a.dtype == kp::kBF16) {
    if (identity) Sm80Gemm<kp::kBF16, epi::Identity>::run(p, {}, device, stream);
    else Sm80Gemm<kp::kBF16, epi::BiasAct>::run(p, {a.bias, a.act}, device, stream);
  } else {
    if (identity) Sm80Gemm<kp::kF16, epi::Identity>::run(p, {}, device, stream);
    else Sm80Gemm<kp::kF16, epi::BiasAct>::run(p, {a.bias, a.act}, device, stream);
  }
}

void decode(const LinearActArgs& a, int device, cudaStream_t stream) {
  const DecodeArgs d{a.x, a.x_stride, a.w, a.w_stride, a.bias, a.y, a.ws, a.m, a.n, a.k, a.dtype, a.act, false};
  decode_gemv(d, a.splits, a.decode_row, device, stream);
}

}  // namespace

// The configs after the GEMM table's rows: the decode kernel, then the sm80 GEMM.
const int kDecodeConfig = GemmTable::size;
const int kSm80Config = GemmTable::size + 1;

std::vector<std::string> gemm_config_names() {
  std::vector<std::string> out;
  for (const auto& r : GemmTable::rows) out.push_back(r.name);
  out.push_back("decode_gemv");
  out.push_back("sm80_128x128x64");
  return out;
}

int gemm_plan(int64_t m, int64_t n, int64_t k) { return decode_serves(m, n, k) ? kDecodeConfig : pick_gemm_row(m, n); }

std::string gemm_device_problem(int device) { return kp::gemm::sm90_device_problem(device); }

void linear_act(const LinearActArgs& a, int config, int device, cudaStream_t stream) {
  KP_CHECK_ARG(a.dtype == kp::kF16 || a.dtype == kp::kBF16,
               std::string("linear_act: the cuda GEMM takes float16 or bfloat16, got ") + kp::dtype_name(a.dtype));
  KP_CHECK_ARG(a.act >= 0 && a.act < kp::gemm::kNumActs,
               "linear_act: unknown activation code " + std::to_string(a.act));
  KP_CHECK_ARG(config >= -1 && config <= kSm80Config, "linear_act: no GEMM config " + std::to_string(config));
  if (config == kDecodeConfig || (config == -1 && decode_serves(a.m, a.n, a.k))) return decode(a, device, stream);
  KP_CHECK_ARG(a.bias == nullptr || reinterpret_cast<uintptr_t>(a.bias) % kp::gemm::kTmaAlignBytes == 0,
               "linear_act: bias must be 16-byte aligned");
  const kp::gemm::Problem p{a.x, a.x_stride, a.w, a.w_stride, a.y, a.n, a.m, a.n, a.k, a.dtype};
  kp::gemm::check_problem(p, 2);
  if (a.m == 0 || a.n == 0) return;
  if (config == kSm80Config) return run_sm80(p, a, device, stream);
  kp::gemm::check_sm90_device(device, "linear_act");
  const int row = config >= 0 ? config : pick_gemm_row(a.m, a.n);
  if (a.dtype == kp::kBF16)
    run_dtype<kp::kBF16>(p, a, row, device, stream);
  else
    run_dtype<kp::kF16>(p, a, row, device, stream);
}

}  // namespace kp_fused_mlp
