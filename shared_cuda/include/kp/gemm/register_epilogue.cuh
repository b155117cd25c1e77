// The collective interface of kp's register epilogues (sm90_gated_epilogue.cuh,
// sm90_dgated_epilogue.cuh): epilogues that read the fp32 accumulators in registers and access
// global memory directly (no smem, no TMA store, no C operand), so the mainloop gets all of the
// shared memory. The interface is CUTLASS's DefaultEpilogue's (operator() with the accumulators
// and the TiledMma); detail::Sm90TmaWarpSpecializedAdapter wraps it with the load/store pipeline
// members the sm90 warp-specialized kernels (cooperative and pingpong) call.
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/detail.hpp>

#include <cstddef>
#include <cstdint>

namespace kp::gemm {

// The members every register epilogue shares. Derived (CRTP) defines
//   template <class Acc, class Coords> CUTLASS_DEVICE void epilogue(Acc const& acc, Coords const& tc, int m, int n) const
// for one thread's accumulators `acc` with their problem coordinates `tc` (thread_coords), in a
// problem of m x n; Args: its run-time arguments (also its Params).
template <class Derived, class T, class Args>
class RegisterEpilogue {
 public:
  // What the sm90 kernels read of an epilogue's types (no C, and D is described by Params).
  using ElementC = void;
  using ElementD = T;
  using StrideC = cute::Stride<int64_t, cute::Int<1>, int64_t>;
  using StrideD = StrideC;
  using ElementAccumulator = float;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;

  struct SharedStorage {};
  using TensorStorage = SharedStorage;
  using Arguments = Args;
  using Params = Args;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE
  RegisterEpilogue(Params const& params, SharedStorage const& = SharedStorage()) : params_(params) {}

  CUTLASS_DEVICE bool is_source_needed() { return false; }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl, cute::Tensor<FrgEngine, FrgLayout> const& acc,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    using namespace cute;
    // The accumulator fragment of an sm90 wgmma TiledMma: ((2 columns, 2 row halves, N/8 column
    // groups), MMA_M, MMA_N); thread t of a quad holds columns 8j + 2t, 8j + 2t + 1 of group j.
    static_assert(rank(FrgLayout{}) == 3 && rank<0>(FrgLayout{}) == 3, "not an sm90 wgmma accumulator fragment");
    static_assert(size<0, 0>(FrgLayout{}) == 2 && size<0, 1>(FrgLayout{}) == 2, "not a 64 x N wgmma fragment");
    Tensor tc = thread_coords(problem_shape_mnkl, blk_shape_mnk, blk_coord_mnkl, tiled_mma, thread_idx);
    static_cast<Derived const*>(this)->epilogue(acc, tc, get<0>(problem_shape_mnkl), get<1>(problem_shape_mnkl));
  }

  // The (m, n) problem coordinates of each accumulator element of thread `thread_idx` in tile
  // `blk_coord_mnkl`. Host and device: tools/check_gated_epilogue.cu runs it on the CPU.
  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class TiledMma>
  CUTLASS_HOST_DEVICE static auto thread_coords(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                                BlockCoordMNKL blk_coord_mnkl, TiledMma tiled_mma, int thread_idx) {
    using namespace cute;
    Tensor coords = local_tile(make_identity_tensor(make_shape(get<0>(problem_shape_mnkl), get<1>(problem_shape_mnkl))),
                               take<0, 2>(blk_shape_mnk),
                               make_coord(get<0>(blk_coord_mnkl), get<1>(blk_coord_mnkl)));  // (BLK_M, BLK_N)
    return tiled_mma.get_thread_slice(thread_idx).partition_C(coords);  // like the accumulator fragment
  }

 protected:
  Params params_;
};

}  // namespace kp::gemm
