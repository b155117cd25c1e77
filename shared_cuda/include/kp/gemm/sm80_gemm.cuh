// kp's sm80 GEMM, the definitions: CUTLASS 3.x's sm80 multistage collective (cp.async into a
// swizzled smem ring, ldmatrix, mma.sync m16n8k16, fp32 accumulators) under its non-persistent
// kernel (kernel/sm70_gemm.hpp: one CTA an output tile), and the default epilogue (each thread
// stores its accumulators straight from registers) with kp's bias + activation as its thread op.
//
//   tile        128 x 128 x 64, 8 warps (2 x 4, 64 x 32 each), 3 stages: 96 KB of smem, one CTA
//               an SM on an A100 (164 KB) and on the 100 KB of sm_86/89
//   bias        read as the epilogue's source matrix C, broadcast down the rows (M stride 0)
//
// There is no CollectiveBuilder for sm80 in CUTLASS 3.x: the types below are what its sm80 tests
// assemble by hand (smem atoms of 8 x 64 elements with a 128-byte swizzle, 16-byte cp.async, 4 x
// 8x8 ldmatrix). Include this only in the files that instantiate kernels.
#pragma once
#include <cute/tensor.hpp>  // first: the cute headers below assume it
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/default_epilogue.hpp>
#include <cutlass/gemm/collective/collective_mma.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#include <mutex>
#include <type_traits>

#include "kp/error.cuh"
#include "kp/launch.cuh"
#include "kp/gemm/activation.cuh"
#include "kp/gemm/sm80_gemm.h"

namespace kp::gemm {
namespace detail {

template <int DType> struct Sm80Element;
template <> struct Sm80Element<kF16> {
  using type = cutlass::half_t;
  using Mma = cute::SM80_16x8x16_F32F16F16F32_TN;
};
template <> struct Sm80Element<kBF16> {
  using type = cutlass::bfloat16_t;
  using Mma = cute::SM80_16x8x16_F32BF16BF16F32_TN;
};

// The epilogue's thread op: D = act(acc + bias[n]) in fp32, rounded once. DefaultEpilogue calls it
// an element at a time, with the source element (the bias, C) when is_source_needed().
template <class T, class Kind>
struct Sm80ThreadOp {
  using ElementOutput = T;
  using ElementD = T;
  using ElementAccumulator = float;
  using ElementCompute = float;
  static constexpr int kCount = 1;
  struct Params {
    int act = 0;
    bool has_bias = false;
  };
  Params p;
  CUTLASS_HOST_DEVICE explicit Sm80ThreadOp(Params const& params) : p(params) {}
  CUTLASS_DEVICE bool is_source_needed() const { return p.has_bias; }
  CUTLASS_DEVICE T operator()(float acc, T bias) const { return T(out(acc + static_cast<float>(bias))); }
  CUTLASS_DEVICE T operator()(float acc) const { return T(out(acc)); }

 private:
  CUTLASS_DEVICE float out(float v) const {
    if constexpr (std::is_same_v<Kind, epi::Identity>) return v;
    else return apply_act(static_cast<Act>(p.act), v);
  }
};

template <int DType, class Kind>
struct Sm80Types {
  using T = typename Sm80Element<DType>::type;
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_64>;
  static constexpr int kStages = 3;
  // 2 x 4 warps of 64 x 32 outputs (64 accumulators a thread; 2 x 2 warps of 64 x 64 took 255
  // registers and spilled); each mma step covers 32 x 64 x 16.
  using TiledMma = cute::TiledMMA<cute::MMA_Atom<typename Sm80Element<DType>::Mma>, cute::Layout<cute::Shape<cute::_2, cute::_4, cute::_1>>,
                                  cute::Tile<cute::_32, cute::_64, cute::_16>>;
  // K-major operand tiles: 8 rows x 64 elements (128 bytes) an atom, XOR-swizzled so ldmatrix's
  // eight 16-byte rows fall in eight different bank groups.
  using SmemLayoutAtom = decltype(cute::composition(
      cute::Swizzle<3, 3, 3>{}, cute::Layout<cute::Shape<cute::_8, cute::_64>, cute::Stride<cute::_64, cute::_1>>{}));
  using SmemCopyAtom = cute::Copy_Atom<cute::SM75_U32x4_LDSM_N, T>;
  // 256 threads x 16 bytes: 32 rows x 64 elements a copy step, predicated at the problem's edges.
  using GmemTiledCopy = decltype(cute::make_tiled_copy(
      cute::Copy_Atom<cute::SM80_CP_ASYNC_CACHEGLOBAL_ZFILL<cute::uint128_t>, T>{},
      cute::Layout<cute::Shape<cute::_32, cute::_8>, cute::Stride<cute::_8, cute::_1>>{},
      cute::Layout<cute::Shape<cute::_1, cute::_8>>{}));
  using Stride = cute::Stride<int64_t, cute::_1, int64_t>;  // [rows, K-contiguous, batch]: A, B, C, D

  using Mainloop = cutlass::gemm::collective::CollectiveMma<
      cutlass::gemm::MainloopSm80CpAsync<kStages, cute::Shape<cute::_1, cute::_1, cute::_1>>, TileShape,
      T, Stride, T, Stride, TiledMma,
      GmemTiledCopy, SmemLayoutAtom, SmemCopyAtom, cute::identity,   // A
      GmemTiledCopy, SmemLayoutAtom, SmemCopyAtom, cute::identity>;  // B
  using ThreadOp = Sm80ThreadOp<T, Kind>;
  using Epilogue = cutlass::epilogue::collective::DefaultEpilogue<T, Stride, Stride, ThreadOp, cutlass::gemm::EpilogueDefault>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue>;
};

}  // namespace detail

// mma.sync, ldmatrix and cp.async exist from sm_80: older device passes get an empty body (the
// host never launches it there: sm80_device_problem()).
template <class Kernel>
__global__ void __launch_bounds__(Kernel::MaxThreadsPerBlock, Kernel::MinBlocksPerMultiprocessor)
    sm80_gemm_kernel(const __grid_constant__ typename Kernel::Params params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ char smem[];
  Kernel op;
  op(params, smem);
#endif
}

template <int DType, class Kind>
const void* Sm80Gemm<DType, Kind>::kernel() {
  using Kernel = typename detail::Sm80Types<DType, Kind>::Kernel;
  return reinterpret_cast<const void*>(&sm80_gemm_kernel<Kernel>);
}

template <int DType, class Kind>
int Sm80Gemm<DType, Kind>::smem_bytes() {
  return detail::Sm80Types<DType, Kind>::Kernel::SharedStorageSize;
}

template <int DType, class Kind>
int Sm80Gemm<DType, Kind>::threads() {
  return detail::Sm80Types<DType, Kind>::Kernel::MaxThreadsPerBlock;
}

template <int DType, class Kind>
void Sm80Gemm<DType, Kind>::run(const Problem& p, const typename Kind::Args& e, int device, cudaStream_t stream) {
  using Types = detail::Sm80Types<DType, Kind>;
  using Kernel = typename Types::Kernel;
  using T = typename Types::T;
  check_problem(p, sizeof(T));
  if (p.m == 0 || p.n == 0) return;
  if (!sm80_runs_on(device)) KP_CHECK_ARG(false, "gemm: " + sm80_device_problem(device));
  const T* bias = nullptr;
  int act = 0;
  if constexpr (!std::is_same_v<Kind, epi::Identity>) {
    bias = static_cast<const T*>(e.bias);
    act = e.act;
  }
  typename Kernel::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), 1};
  args.mainloop = {static_cast<const T*>(p.a), {p.lda, cute::_1{}, int64_t{0}}, static_cast<const T*>(p.b),
                   {p.ldb, cute::_1{}, int64_t{0}}};
  // The bias as C: row stride 0, so every row of the tile reads the same N values.
  args.epilogue = {{act, bias != nullptr}, bias, {int64_t{0}, cute::_1{}, int64_t{0}}, static_cast<T*>(p.d),
                   {p.ldd, cute::_1{}, int64_t{0}}};
  args.hw_info.device_id = device;
  KP_CHECK_ARG(Kernel::can_implement(args), "gemm (sm80): the kernel cannot run this problem");
  const typename Kernel::Params params = Kernel::to_underlying_arguments(args, nullptr);
  const dim3 grid = Kernel::get_grid_shape(params);
  KP_CHECK_ARG(grid.y <= 65535, "gemm (sm80): N is too large for one launch (N / 128 tiles > 65535)");
  kp::launch(&sm80_gemm_kernel<Kernel>, device, grid, dim3(Kernel::MaxThreadsPerBlock),
             static_cast<size_t>(Kernel::SharedStorageSize), stream, 1, params);
}

}  // namespace kp::gemm
