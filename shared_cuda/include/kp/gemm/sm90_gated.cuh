// kp's sm90a gated GEMM, the definitions: kp's sm90 mainloop (sm90_gemm.cuh: TMA warp-specialized
// cooperative or pingpong, persistent scheduler) with the gated epilogue of sm90_gated_epilogue.cuh;
// and that kernel's frame for any register epilogue (sm90_dgated.cuh uses it too).
// Include this only in the files that instantiate kernels:
//
//   template struct kp::gemm::Sm90Gated<kp::kBF16, kp::gemm::TableRow<Table, 0>>;
#pragma once
#include <cutlass/gemm/collective/collective_builder.hpp>

#include <string>
#include <type_traits>

#include "kp/gemm/sm90_gated.h"
#include "kp/gemm/sm90_gated_epilogue.cuh"
#include "kp/gemm/sm90_gemm.cuh"

namespace kp::gemm {
namespace detail {

// A persistent sm90 GEMM (kp's mainloop, cooperative or pingpong by the row) whose epilogue is a
// register epilogue (register_epilogue.cuh): A K-major; B K-major, or MN-major where kBMn.
template <int DType, class Config, template <class> class EpilogueOp, bool kBMn>
struct Sm90RegisterEpilogueTypes {
  static constexpr Sm90TileConfig c = Config::value;
  using T = typename CutlassElement<DType>::type;
  static constexpr int kAlign = 16 / sizeof(T);
  using TileShape = cute::Shape<cute::Int<c.tile_m>, cute::Int<c.tile_n>, cute::Int<c.tile_k>>;
  using ClusterShape = cute::Shape<cute::Int<c.cluster_m>, cute::Int<c.cluster_n>, cute::_1>;
  using MainloopSchedule =
      std::conditional_t<c.schedule == Sm90Schedule::kCooperative, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                         cutlass::gemm::KernelTmaWarpSpecializedPingpong>;
  using Epilogue = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<EpilogueOp<T>>;
  using LayoutB = std::conditional_t<kBMn, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;
  // The epilogue uses no smem: every byte goes to mainloop stages.
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, cutlass::layout::RowMajor, kAlign, T, LayoutB, kAlign,
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::PersistentScheduler>;
};

template <int DType, class Config>
struct Sm90GatedTypes : Sm90RegisterEpilogueTypes<DType, Config, Sm90GatedEpilogue, false> {
  static_assert(Config::value.tile_n % (2 * kGatedBlock) == 0, "a gated tile holds whole 16-column (gate, up) blocks");
};

// Row `c` with the scheduler knobs of a sweep applied (0 / -1: the row's own), checked.
inline Sm90TileConfig with_knobs(Sm90TileConfig c, SchedulerKnobs knobs, const char* op) {
  const int sw = knobs.max_swizzle;
  KP_CHECK_ARG(sw == 0 || sw == 1 || sw == 2 || sw == 4 || sw == 8, std::string(op) + ": max_swizzle must be 1, 2, 4 or 8");
  KP_CHECK_ARG(knobs.raster >= -1 && knobs.raster <= 2,
               std::string(op) + ": raster must be 0 (heuristic), 1 (along M) or 2");
  if (sw) c.max_swizzle = sw;
  if (knobs.raster >= 0) c.raster = static_cast<Sm90Raster>(knobs.raster);
  return c;
}

}  // namespace detail

template <int DType, class Config>
const void* Sm90Gated<DType, Config>::kernel() {
  using Kernel = typename detail::Sm90GatedTypes<DType, Config>::Kernel;
  return reinterpret_cast<const void*>(&sm90_gemm_kernel<Kernel>);
}

template <int DType, class Config>
int Sm90Gated<DType, Config>::smem_bytes() {
  return detail::Sm90GatedTypes<DType, Config>::Kernel::SharedStorageSize;
}

template <int DType, class Config>
void Sm90Gated<DType, Config>::run(const GatedProblem& p, int device, cudaStream_t stream, SchedulerKnobs knobs) {
  using Ty = detail::Sm90GatedTypes<DType, Config>;
  using Kernel = typename Ty::Kernel;
  using T = typename Ty::T;
  KP_CHECK_ARG(p.dtype == DType, std::string("gated gemm: dtype code ") + std::to_string(p.dtype) + " given to the " +
                                     dtype_name(DType) + " kernel");
  check_gated(p, sizeof(T));
  const Sm90TileConfig c = detail::with_knobs(Ty::c, knobs, "gated gemm");
  if (p.m == 0 || p.inter == 0) return;
  DeviceGuard guard(device);

  typename Kernel::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {static_cast<int>(p.m), static_cast<int>(2 * p.inter), static_cast<int>(p.k), 1};
  args.mainloop.ptr_A = static_cast<const T*>(p.x);
  args.mainloop.dA = cute::make_stride(p.ldx, cute::Int<1>{}, int64_t(0));
  args.mainloop.ptr_B = static_cast<const T*>(p.w);
  args.mainloop.dB = cute::make_stride(p.ldw, cute::Int<1>{}, int64_t(0));
  args.epilogue = GatedEpilogueArgs{p.h, p.ldh, p.pre, p.ldp, p.bias, p.inter, p.act};
  detail::sm90_launch<Kernel>(args, c, device, stream);
}

}  // namespace kp::gemm
