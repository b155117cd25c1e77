// kp's sm80 GEMM, the declarations: the Ampere/Ada path (mma.sync, cp.async, ldmatrix) beside the
// sm90a one (sm90_gemm.h). No CUTLASS here; the definitions are in sm80_gemm.cuh, which only a
// package's instantiation files include:
//
//   template struct kp::gemm::Sm80Gemm<kp::kBF16, kp::gemm::epi::BiasAct>;
//
//   D[M, N] = epilogue(A[M, K] @ B[N, K]^T)   (problem.h), 16-bit A, B, D, fp32 accumulation,
//   both operands K-major (the forward; the training GEMMs are sm90a only)
//
// One tile shape (sm80_gemm.cuh: 128 x 128 x 64, 8 warps, 3 cp.async stages) and the epilogue
// kinds of epilogues.h (Identity, BiasAct). It also runs on sm_90 (mma.sync exists there): a
// package can force it on a Hopper GPU to test it.
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <string>

#include "kp/built_archs.h"
#include "kp/dtype.cuh"
#include "kp/launch.cuh"
#include "kp/gemm/epilogues.h"
#include "kp/gemm/problem.h"

namespace kp::gemm {

template <int DType, class Kind>
struct Sm80Gemm {
  // Checks the problem (check_problem: the same 16-byte rules as the sm90a GEMM, for cp.async),
  // then launches on `stream` of `device` (M = 0 or N = 0: nothing; K must be > 0).
  static void run(const Problem& p, const typename Kind::Args& e, int device, cudaStream_t stream);
  static const void* kernel();  // the __global__ function: for names in plan reports
  static int smem_bytes();      // its dynamic shared memory
  static int threads();         // its CTA size
};

// "" when this module holds machine code that `device` runs for the sm80 GEMM, else why not. A
// build arch runs on a device of the same major version and an equal or newer minor one ("80" on
// an sm_86 GPU); an arch-specific one ("90a") on its own GPU only.
inline std::string sm80_device_problem(int device) {
  const DeviceInfo& info = device_info(device);
  if (info.major < 8)
    return "device " + std::to_string(device) + " is sm_" + std::to_string(10 * info.major + info.minor) +
           ": kp's GEMM needs sm_80 or newer (mma.sync on bf16, cp.async)";
  if (has_sass_for(info.major, info.minor)) return "";
  return "this build has no machine code for sm_" + std::to_string(10 * info.major + info.minor) +
         " (KP_CUDA_ARCHS): rebuild with it to run kp's GEMM there";
}

// sm80_device_problem(device).empty(), computed once a device: Sm80Gemm::run asks every call, and
// the answer (which builds strings) cannot change while the process runs. Racing first calls
// compute the same value.
inline bool sm80_runs_on(int device) {
  constexpr int kMax = 64;
  static std::atomic<int> known[kMax];  // 0: not asked yet, 1: runs, 2: does not
  if (device < 0 || device >= kMax) return sm80_device_problem(device).empty();
  int v = known[device].load(std::memory_order_relaxed);
  if (v == 0) {
    v = sm80_device_problem(device).empty() ? 1 : 2;
    known[device].store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

}  // namespace kp::gemm
