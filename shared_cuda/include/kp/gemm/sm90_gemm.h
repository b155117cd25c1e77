// kp's sm90a GEMM, the declarations: what a package's host dispatch includes. No CUTLASS here;
// the definitions are in sm90_gemm.cuh, which only a package's instantiation files include, each
// instantiating the (dtype, table row, epilogue) kernels it lists:
//
//   template struct kp::gemm::Sm90Gemm<kp::kBF16, kp::gemm::TableRow<Table, 0>, kp::gemm::epi::BiasAct>;
//
//   D[M, N] = epilogue(A[M, K] @ B[N, K]^T)   (problem.h), 16-bit A, B, D, fp32 accumulation
//
// A fourth parameter, Operands (operands.h), reads A and/or B MN-major (transposed in memory) for
// the backward GEMMs; the default, both K-major, is the forward. scheduler.h overrides the
// persistent scheduler's swizzle and raster at run time (sweeps).
//
// Hopper only: wgmma, TMA and thread-block clusters exist on sm_90a machine code alone (not in
// compute_90 PTX, not on other GPUs). sm90_device_problem() says whether a device can run it; an
// sm80 path (Ampere/Ada: mma.sync + cp.async) is future work.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "kp/built_archs.h"
#include "kp/dtype.cuh"
#include "kp/launch.cuh"
#include "kp/gemm/config.h"
#include "kp/gemm/epilogues.h"
#include "kp/gemm/operands.h"
#include "kp/gemm/problem.h"
#include "kp/gemm/scheduler.h"

namespace kp::gemm {

template <int DType, class Config, class Kind, Operands Ops = Operands::kKK>
struct Sm90Gemm {
  // Checks the problem (check_problem), then launches on `stream` of `device` (M = 0 or N = 0:
  // nothing). K must be > 0: with nothing to accumulate the caller computes epilogue(0) itself.
  static void run(const Problem& p, const typename Kind::Args& e, int device, cudaStream_t stream);
  static const void* kernel();  // the __global__ function: for names in plan reports
  static int smem_bytes();      // its dynamic shared memory
  static int threads();         // its CTA size (a producer warpgroup + consumers)
};

// Whether this module carries sm_90a machine code (kp/built_archs.h), asked once: the launch
// checks ask every call.
inline bool built_for_sm90a() {
  static const bool built = kp::built_for("90a");
  return built;
}

// "" when `device` can run the sm90a GEMM of this module, else why not.
inline std::string sm90_device_problem(int device) {
  if (!built_for_sm90a())
    return "this build has no sm_90a machine code, which kp's GEMM needs (wgmma, TMA): rebuild with 90a in "
           "KP_CUDA_ARCHS";
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "cannot query device " + std::to_string(device);
  }
  if (major != 9 || minor != 0)
    return "device " + std::to_string(device) + " is sm_" + std::to_string(10 * major + minor) +
           ": kp's GEMM has a Hopper (sm_90a: H100, H200) path only; the sm80 path is future work";
  return "";
}

// Raises, before any launch, unless `device` can run the sm90a GEMM. Reads kp's per-device cache
// (no driver call on the hot path): an empty kernel must never run silently where sm_90a machine
// code cannot (PTX JIT on a newer GPU).
inline void check_sm90_device(int device, const std::string& op) {
  const DeviceInfo& info = device_info(device);
  if (!(built_for_sm90a() && info.major == 9 && info.minor == 0)) KP_CHECK_ARG(false, op + ": " + sm90_device_problem(device));
}

}  // namespace kp::gemm
