// kp's sm90a gated-gradient GEMM, the definitions: the gated GEMM's frame (sm90_gated.cuh) with B
// MN-major and the epilogue of sm90_dgated_epilogue.cuh. Include this only in the files that
// instantiate kernels:
//
//   template struct kp::gemm::Sm90DGated<kp::kBF16, kp::gemm::TableRow<Table, 0>>;
#pragma once
#include <string>

#include "kp/gemm/sm90_dgated.h"
#include "kp/gemm/sm90_dgated_epilogue.cuh"
#include "kp/gemm/sm90_gated.cuh"

namespace kp::gemm {
namespace detail {
template <int DType, class Config>
using Sm90DGatedTypes = Sm90RegisterEpilogueTypes<DType, Config, Sm90DGatedEpilogue, true>;
}  // namespace detail

template <int DType, class Config>
const void* Sm90DGated<DType, Config>::kernel() {
  using Kernel = typename detail::Sm90DGatedTypes<DType, Config>::Kernel;
  return reinterpret_cast<const void*>(&sm90_gemm_kernel<Kernel>);
}

template <int DType, class Config>
int Sm90DGated<DType, Config>::smem_bytes() {
  return detail::Sm90DGatedTypes<DType, Config>::Kernel::SharedStorageSize;
}

template <int DType, class Config>
void Sm90DGated<DType, Config>::run(const DGatedProblem& p, int device, cudaStream_t stream, SchedulerKnobs knobs) {
  using Ty = detail::Sm90DGatedTypes<DType, Config>;
  using Kernel = typename Ty::Kernel;
  using T = typename Ty::T;
  KP_CHECK_ARG(p.dtype == DType, std::string("gated gradient gemm: dtype code ") + std::to_string(p.dtype) +
                                     " given to the " + dtype_name(DType) + " kernel");
  check_dgated(p, sizeof(T));
  const Sm90TileConfig c = detail::with_knobs(Ty::c, knobs, "gated gradient gemm");
  if (p.m == 0 || p.inter == 0) return;
  DeviceGuard guard(device);

  typename Kernel::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {static_cast<int>(p.m), static_cast<int>(p.inter), static_cast<int>(p.k), 1};
  args.mainloop.ptr_A = static_cast<const T*>(p.dy);
  args.mainloop.dA = cute::make_stride(p.lddy, cute::Int<1>{}, int64_t(0));
  args.mainloop.ptr_B = static_cast<const T*>(p.wd);  // B(n, k) = Wd[k, n]: MN-major
  args.mainloop.dB = cute::make_stride(cute::Int<1>{}, p.ldwd, int64_t(0));
  args.epilogue = DGatedEpilogueArgs{p.dpre, p.lddp, p.pre, p.ldp, p.inter, p.act};
  detail::sm90_launch<Kernel>(args, c, device, stream);
}

}  // namespace kp::gemm
