// kp's sm90a GEMM, the definitions: CUTLASS 3.x collectives assembled by its CollectiveBuilders.
//
//   mainloop   TMA loads of A and B tiles into a smem ring (as many stages as fit next to the
//              epilogue's smem), wgmma from smem, fp32 accumulators in registers; a producer
//              warpgroup issues the TMA, one or two consumer warpgroups the wgmma (warp
//              specialization: the producer gives its registers to the consumers, setmaxnreg)
//   epilogue   the fusion of sm90_fusion.cuh applied to the accumulators in registers, staged
//              through smem, stored by TMA (no C operand is ever read)
//   scheduler  persistent: one CTA an SM (clusters co-resident), walking the output tiles in
//              swizzled order; the next tile's mainloop starts while the last one's epilogue runs
//
// Include this only in the files that instantiate kernels (it is most of their compile time).
// Every definition compiles for every arch of the build; only sm_90a's device pass emits a kernel
// body (the others get an empty kernel that the host never launches: sm90_device_problem()).
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include <mutex>
#include <type_traits>

#include "kp/error.cuh"
#include "kp/launch.cuh"
#include "kp/gemm/sm90_fusion.cuh"
#include "kp/gemm/sm90_gemm.h"

namespace kp::gemm {
namespace detail {

template <int DType> struct CutlassElement;
template <> struct CutlassElement<kF16> { using type = cutlass::half_t; };
template <> struct CutlassElement<kBF16> { using type = cutlass::bfloat16_t; };

// The CUTLASS types of one table row, dtype, epilogue kind and operand layout.
template <int DType, class Config, class Kind, Operands Ops = Operands::kKK>
struct Sm90Types {
  static constexpr Sm90TileConfig c = Config::value;
  using T = typename CutlassElement<DType>::type;
  static constexpr int kAlign = 16 / sizeof(T);  // elements a 16-byte TMA row unit holds
  using TileShape = cute::Shape<cute::Int<c.tile_m>, cute::Int<c.tile_n>, cute::Int<c.tile_k>>;
  using ClusterShape = cute::Shape<cute::Int<c.cluster_m>, cute::Int<c.cluster_n>, cute::_1>;
  static constexpr bool kCooperative = c.schedule == Sm90Schedule::kCooperative;
  using MainloopSchedule = std::conditional_t<kCooperative, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                              cutlass::gemm::KernelTmaWarpSpecializedPingpong>;
  using EpilogueSchedule = std::conditional_t<kCooperative, cutlass::epilogue::TmaWarpSpecializedCooperative,
                                              cutlass::epilogue::TmaWarpSpecialized>;
  using Fusion = Sm90Fusion<Kind, T, TileShape>;
  // CUTLASS's layout tags name the GEMM operands A (M x K) and B (K x N): RowMajor A and
  // ColumnMajor B are K-major; ColumnMajor A and RowMajor B are MN-major (the builders then pick
  // the transposed smem layouts that wgmma reads with .tnspA / .tnspB).
  static constexpr bool kAMn = a_mn_major(Ops), kBMn = b_mn_major(Ops);
  using LayoutA = std::conditional_t<kAMn, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using LayoutB = std::conditional_t<kBMn, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float,  // accumulator, compute
      void, cutlass::layout::RowMajor, kAlign,                          // no C
      T, cutlass::layout::RowMajor, kAlign,                             // D [M, N] row-major
      EpilogueSchedule, typename Fusion::Op>::CollectiveOp;

  // The mainloop gets the smem the epilogue leaves: as many pipeline stages as fit.
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      T, LayoutA, kAlign,  // forward: A = x [M, K] row-major, K-major
      T, LayoutB, kAlign,  // forward: B = W [N, K] row-major = a K x N column-major operand, K-major
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::PersistentScheduler>;
};

}  // namespace detail

// The kernel. __grid_constant__: the TMA descriptors in Params must stay in parameter space (the
// hardware reads them by address). Only sm_90a has wgmma/setmaxnreg: elsewhere the body is empty.
template <class Kernel>
__global__ void __launch_bounds__(Kernel::MaxThreadsPerBlock, Kernel::MinBlocksPerMultiprocessor)
    sm90_gemm_kernel(const __grid_constant__ typename Kernel::Params params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ char smem[];
  Kernel op;
  op(params, smem);
#endif
}

namespace detail {

// The persistent launch of a CUTLASS sm90 kernel built on table row `c` (any epilogue): a grid of
// the clusters that fit at once, the scheduler's swizzle and raster, the TMA descriptors, a cluster
// launch on `stream`. The caller has filled the problem, mainloop and epilogue arguments.
template <class Kernel>
void sm90_launch(typename Kernel::Arguments& args, const Sm90TileConfig& c, int device, cudaStream_t stream) {
  const void* func = reinterpret_cast<const void*>(&sm90_gemm_kernel<Kernel>);
  const int smem = Kernel::SharedStorageSize;
  const int cluster = c.cluster_m * c.cluster_n;
  args.hw_info.device_id = device;
  args.hw_info.sm_count = device_info(device).sms;
  // Clusters that fit at once (a cluster's CTAs share a GPC): the persistent grid's size.
  args.hw_info.max_active_clusters = max_active_clusters(func, device, Kernel::MaxThreadsPerBlock, smem, cluster);
  const long long m = cute::get<0>(args.problem_shape), n = cute::get<1>(args.problem_shape);
  args.scheduler.max_swizzle_size = fitted_swizzle(c, (m + c.tile_m - 1) / c.tile_m, (n + c.tile_n - 1) / c.tile_n);
  using Raster = typename Kernel::TileScheduler::RasterOrderOptions;
  args.scheduler.raster_order = c.raster == Sm90Raster::kAlongM   ? Raster::AlongM
                                : c.raster == Sm90Raster::kAlongN ? Raster::AlongN
                                                                  : Raster::Heuristic;

  KP_CHECK_ARG(Kernel::can_implement(args),
               std::string("gemm: the ") + c.name + " kernel cannot run this problem (alignment of a size or stride)");
  KP_CHECK_ARG(Kernel::get_workspace_size(args) == 0,
               std::string("gemm: the ") + c.name + " kernel wants a workspace, which kp does not pass yet");
  // Builds the TMA descriptors (cuTensorMapEncodeTiled, reached through the runtime's driver
  // entry points: the module links no libcuda).
  const typename Kernel::Params params = Kernel::to_underlying_arguments(args, nullptr);

  {
    std::lock_guard<std::mutex> lock(kp::detail::cache_mu());
    kp::detail::prepare(func, device, smem, cluster);  // once: the > 48 KB smem opt-in
  }
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = c.cluster_m;
  attr[0].val.clusterDim.y = c.cluster_n;
  attr[0].val.clusterDim.z = 1;
  cfg.gridDim = Kernel::get_grid_shape(params);
  cfg.blockDim = Kernel::get_block_shape();
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  KP_CHECK_CUDA(cudaLaunchKernelEx(&cfg, &sm90_gemm_kernel<Kernel>, params));
  KP_CHECK_LAUNCH();
}

}  // namespace detail

template <int DType, class Config, class Kind, Operands Ops>
const void* Sm90Gemm<DType, Config, Kind, Ops>::kernel() {
  using Kernel = typename detail::Sm90Types<DType, Config, Kind, Ops>::Kernel;
  return reinterpret_cast<const void*>(&sm90_gemm_kernel<Kernel>);
}

template <int DType, class Config, class Kind, Operands Ops>
int Sm90Gemm<DType, Config, Kind, Ops>::smem_bytes() {
  return detail::Sm90Types<DType, Config, Kind, Ops>::Kernel::SharedStorageSize;
}

template <int DType, class Config, class Kind, Operands Ops>
int Sm90Gemm<DType, Config, Kind, Ops>::threads() {
  return detail::Sm90Types<DType, Config, Kind, Ops>::Kernel::MaxThreadsPerBlock;
}

template <int DType, class Config, class Kind, Operands Ops>
void Sm90Gemm<DType, Config, Kind, Ops>::run(const Problem& p, const typename Kind::Args& e, int device,
                                             cudaStream_t stream) {
  using Ty = detail::Sm90Types<DType, Config, Kind, Ops>;
  using Kernel = typename Ty::Kernel;
  using T = typename Ty::T;
  constexpr Sm90TileConfig c = Ty::c;
  KP_CHECK_ARG(p.dtype == DType, std::string("gemm: dtype code ") + std::to_string(p.dtype) + " given to the " +
                                     dtype_name(DType) + " kernel");
  check_problem(p, sizeof(T), Ops);
  if (p.m == 0 || p.n == 0) return;
  DeviceGuard guard(device);

  typename Kernel::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), 1};
  args.mainloop.ptr_A = static_cast<const T*>(p.a);
  if constexpr (Ty::kAMn) args.mainloop.dA = cute::make_stride(cute::Int<1>{}, p.lda, int64_t(0));
  else args.mainloop.dA = cute::make_stride(p.lda, cute::Int<1>{}, int64_t(0));
  args.mainloop.ptr_B = static_cast<const T*>(p.b);
  if constexpr (Ty::kBMn) args.mainloop.dB = cute::make_stride(cute::Int<1>{}, p.ldb, int64_t(0));
  else args.mainloop.dB = cute::make_stride(p.ldb, cute::Int<1>{}, int64_t(0));
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = cute::make_stride(p.ldd, cute::Int<1>{}, int64_t(0));
  args.epilogue.ptr_D = static_cast<T*>(p.d);
  args.epilogue.dD = cute::make_stride(p.ldd, cute::Int<1>{}, int64_t(0));
  Ty::Fusion::fill(args.epilogue.thread, e);

  detail::sm90_launch<Kernel>(args, with_scheduler_override(c), device, stream);
}

}  // namespace kp::gemm
