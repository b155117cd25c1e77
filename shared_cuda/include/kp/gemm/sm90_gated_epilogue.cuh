// The epilogue of kp's gated GEMM (sm90_gated.h): h = act(gate + bg) * (up + bu) from the fp32
// accumulators of a GEMM against the interleaved weight Wi, in registers, rounded once to h's
// dtype, stored straight to global memory (no smem, no TMA store).
//
// Why its own epilogue: CUTLASS's visitor trees (EVT) map one accumulator element to one output
// element; h has half the accumulator's columns. Why direct stores: a thread holds two adjacent
// columns of h per 8-column group (below), so each store is 4 bytes, and a warp's stores of one
// group fill 8 rows x 16 bytes; the tile's 64 (coop 128x256) or 32 (pingpong 128x128) stores a
// thread are a few % of a tile's mainloop, and this epilogue needs no smem, leaving the whole 227
// KB to the mainloop's stages.
//
// The collective interface is CUTLASS's DefaultEpilogue's (operator() with the accumulators and
// the TiledMma), wrapped in detail::Sm90TmaWarpSpecializedAdapter, which gives it the load/store
// pipeline members the sm90 warp-specialized kernels (cooperative and pingpong) call.
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/detail.hpp>
#include <cutlass/numeric_conversion.h>

#include <cstdint>

#include "kp/gemm/activation.cuh"
#include "kp/gemm/sm90_gated.h"

namespace kp::gemm {

// Run-time arguments, filled from GatedProblem.
struct GatedEpilogueArgs {
  void* h = nullptr;
  int64_t ldh = 0;
  void* pre = nullptr;  // null: the pre-activations are not saved
  int64_t ldp = 0;
  const void* bias = nullptr;  // [2I] in W's order, or null
  int64_t inter = 0;
  int act = static_cast<int>(Act::kSilu);
};

template <class T>
class Sm90GatedEpilogue {
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
  using Arguments = GatedEpilogueArgs;
  using Params = GatedEpilogueArgs;

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
  template <class ProblemShape>
  static bool can_implement(ProblemShape const& shape, Arguments const& args) {
    // Whole 16-column blocks of Wi: gate and up of every h column inside the problem.
    return cute::get<1>(shape) % (2 * kGatedBlock) == 0 && cute::get<1>(shape) == 2 * args.inter;
  }

  CUTLASS_HOST_DEVICE
  Sm90GatedEpilogue(Params const& params, SharedStorage const& = SharedStorage()) : params_(params) {}

  CUTLASS_DEVICE bool is_source_needed() { return false; }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl, cute::Tensor<FrgEngine, FrgLayout> const& acc,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    using namespace cute;
    // The accumulator fragment of an sm90 wgmma TiledMma: ((2 columns, 2 row halves, N/8 column
    // groups), MMA_M, MMA_N). Gate group 2b and up group 2b + 1 hold the same columns of h.
    static_assert(rank(FrgLayout{}) == 3 && rank<0>(FrgLayout{}) == 3, "not an sm90 wgmma accumulator fragment");
    static_assert(size<0, 0>(FrgLayout{}) == 2 && size<0, 1>(FrgLayout{}) == 2 && size<0, 2>(FrgLayout{}) % 2 == 0,
                  "the gated epilogue pairs 8-column groups 2b and 2b + 1 of a 64 x N wgmma fragment");
    static_assert(size<1>(BlockShapeMNK{}) % (2 * kGatedBlock) == 0, "tile_n must be a multiple of 16");

    Tensor tc = thread_coords(problem_shape_mnkl, blk_shape_mnk, blk_coord_mnkl, tiled_mma, thread_idx);
    const int m = get<0>(problem_shape_mnkl), n = get<1>(problem_shape_mnkl);
    switch (static_cast<Act>(params_.act)) {  // uniform: one branch a tile, outside the element loop
      case Act::kGeluTanh: return store(acc, tc, m, n, [](float x) { return gelu_tanh(x); });
      default: return store(acc, tc, m, n, [](float x) { return silu(x); });
    }
  }

  // The (m, n) problem coordinates of each accumulator element of thread `thread_idx` in tile
  // `blk_coord_mnkl`, n a column of Wi. Host and device: tools/check_gated_epilogue.cu runs these
  // two functions on the CPU.
  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class TiledMma>
  CUTLASS_HOST_DEVICE static auto thread_coords(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                                BlockCoordMNKL blk_coord_mnkl, TiledMma tiled_mma, int thread_idx) {
    using namespace cute;
    Tensor coords = local_tile(make_identity_tensor(make_shape(get<0>(problem_shape_mnkl), get<1>(problem_shape_mnkl))),
                               take<0, 2>(blk_shape_mnk),
                               make_coord(get<0>(blk_coord_mnkl), get<1>(blk_coord_mnkl)));  // (BLK_M, BLK_N)
    return tiled_mma.get_thread_slice(thread_idx).partition_C(coords);  // like the accumulator fragment
  }

  // h (and P) from one thread's accumulators `acc` with coordinates `tc` (thread_coords), for a
  // problem of m rows and n = 2I columns of Wi.
  template <class Acc, class Coords, class F>
  CUTLASS_HOST_DEVICE void store(Acc const& acc, Coords const& tc, int m, int n, F act) const {
    using namespace cute;
    T* h = static_cast<T*>(params_.h);
    T* pre = static_cast<T*>(params_.pre);
    const T* bias = static_cast<const T*>(params_.bias);
    const int64_t inter = params_.inter;
    CUTLASS_PRAGMA_UNROLL
    for (int mn = 0; mn < size<2>(acc); ++mn) {
      CUTLASS_PRAGMA_UNROLL
      for (int mm = 0; mm < size<1>(acc); ++mm) {
        CUTLASS_PRAGMA_UNROLL
        for (int b = 0; b < size<0, 2>(acc) / 2; ++b) {
          // Gate columns c, c + 1 of h (c even) for both row halves: the same bias pair.
          const int col = get<1>(tc(make_coord(make_coord(0, 0, 2 * b), mm, mn)));  // of Wi: 16 (c / 8) + c % 8
          if (col >= n) continue;  // n = 2I: whole 16-column blocks are in or out
          const int64_t c = (col / (2 * kGatedBlock)) * kGatedBlock + col % kGatedBlock;
          float2 bg = make_float2(0.f, 0.f), bu = bg;
          if (bias) {
            bg = load_pair(bias + c);
            bu = load_pair(bias + inter + c);
          }
          CUTLASS_PRAGMA_UNROLL
          for (int half = 0; half < 2; ++half) {
            const auto gi = make_coord(make_coord(0, half, 2 * b), mm, mn);
            const auto gj = make_coord(make_coord(1, half, 2 * b), mm, mn);
            const auto ui = make_coord(make_coord(0, half, 2 * b + 1), mm, mn);
            const auto uj = make_coord(make_coord(1, half, 2 * b + 1), mm, mn);
            const int64_t row = get<0>(tc(gi));
            if (row >= m) continue;
            const float g0 = acc(gi) + bg.x, g1 = acc(gj) + bg.y;
            const float u0 = acc(ui) + bu.x, u1 = acc(uj) + bu.y;
            *reinterpret_cast<uint32_t*>(h + row * params_.ldh + c) = pack(act(g0) * u0, act(g1) * u1);
            if (pre) {  // the backward's input, in W's order: [gate_pre | up_pre]
              T* p = pre + row * params_.ldp + c;
              *reinterpret_cast<uint32_t*>(p) = pack(g0, g1);
              *reinterpret_cast<uint32_t*>(p + inter) = pack(u0, u1);
            }
          }
        }
      }
    }
  }

 private:
  Params params_;

  using Pair = cutlass::Array<T, 2>;
  static CUTLASS_HOST_DEVICE uint32_t pack(float a, float b) {
    const Pair v = cutlass::NumericArrayConverter<T, float, 2>::convert(cutlass::Array<float, 2>{a, b});
    return reinterpret_cast<uint32_t const&>(v);
  }
  static CUTLASS_HOST_DEVICE float2 load_pair(const T* p) {  // 2 elements of a 4-byte aligned bias
    const Pair v = *reinterpret_cast<const Pair*>(p);
    return make_float2(static_cast<float>(v[0]), static_cast<float>(v[1]));
  }
};

}  // namespace kp::gemm
