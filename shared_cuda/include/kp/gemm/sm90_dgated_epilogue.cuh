// The epilogue of kp's gated-gradient GEMM (sm90_dgated.h): dP = [dh up act'(gate) | dh act(gate)]
// from the fp32 accumulators dh, reading P = [gate | up] as the gated forward saved it, rounded
// once to dP's dtype, stored straight to global memory (no smem: the mainloop keeps all of it).
//
// Why its own epilogue: each accumulator element gives two outputs (one in each half of dP) from
// two loads (one from each half of P); CUTLASS's visitor trees map one accumulator element to one
// output element. P is read and dP written in 16-byte accesses after a quad swap (quad_io.cuh).
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>

#include <cstdint>

#include "kp/gemm/activation.cuh"
#include "kp/gemm/quad_io.cuh"
#include "kp/gemm/register_epilogue.cuh"
#include "kp/gemm/sm90_dgated.h"

namespace kp::gemm {

// Run-time arguments, filled from DGatedProblem.
struct DGatedEpilogueArgs {
  void* dpre = nullptr;  // [M, 2I]
  int64_t lddp = 0;
  const void* pre = nullptr;  // [M, 2I]
  int64_t ldp = 0;
  int64_t inter = 0;
  int act = static_cast<int>(Act::kSilu);
};

template <class T>
class Sm90DGatedEpilogue : public RegisterEpilogue<Sm90DGatedEpilogue<T>, T, DGatedEpilogueArgs> {
  using Base = RegisterEpilogue<Sm90DGatedEpilogue<T>, T, DGatedEpilogueArgs>;
  using Base::params_;

 public:
  using Base::Base;

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& shape, typename Base::Arguments const& args) {
    return cute::get<1>(shape) == args.inter && args.inter % 8 == 0;  // whole 8-column groups
  }

  template <class Acc, class Coords>
  CUTLASS_DEVICE void epilogue(Acc const& acc, Coords const& tc, int m, int n) const {
    switch (static_cast<Act>(params_.act)) {  // uniform: one branch a tile, outside the element loop
      case Act::kGeluTanh: return store(acc, tc, m, n, [](float g) { return gelu_tanh_and_grad(g); });
      default: return store(acc, tc, m, n, [](float g) { return silu_and_grad(g); });
    }
  }

 private:
  // dP from one thread's accumulators `acc` with coordinates `tc`, for m rows and n = I columns:
  // four 8-column groups at a time (16-byte accesses), one group at a time (4-byte ones) where
  // the four pass the problem's right edge.
  template <class Acc, class Coords, class F>
  CUTLASS_DEVICE void store(Acc const& acc, Coords const& tc, int m, int n, F f_df) const {
    using namespace cute;
    constexpr int kGroups = decltype(size<0, 2>(acc))::value;
    CUTLASS_PRAGMA_UNROLL
    for (int mn = 0; mn < size<2>(acc); ++mn) {
      CUTLASS_PRAGMA_UNROLL
      for (int mm = 0; mm < size<1>(acc); ++mm) {
        CUTLASS_PRAGMA_UNROLL
        for (int j0 = 0; j0 < kGroups; j0 += 4) {
          // Warp-uniform: a warp's threads share their column groups (they differ in rows).
          if (j0 + 4 <= kGroups && get<1>(tc(make_coord(make_coord(0, 0, j0 + 3), mm, mn))) < n) {
            four_groups(acc, tc, m, mm, mn, j0, f_df);
          } else {
            CUTLASS_PRAGMA_UNROLL
            for (int j = j0; j < j0 + 4 && j < kGroups; ++j) one_group(acc, tc, m, n, mm, mn, j, f_df);
          }
        }
      }
    }
  }

  // The dP pairs of accumulator pair (dh0, dh1) at gate pair g and up pair u (packed).
  template <class F>
  static CUTLASS_DEVICE void grad_pairs(float dh0, float dh1, uint32_t g, uint32_t u, F f_df, uint32_t& dg,
                                        uint32_t& du) {
    const float2 gf = quad::unpack<T>(g), uf = quad::unpack<T>(u);
    const float2 a0 = f_df(gf.x), a1 = f_df(gf.y);  // (act, act')
    dg = quad::pack<T>(dh0 * uf.x * a0.y, dh1 * uf.y * a1.y);
    du = quad::pack<T>(dh0 * a0.x, dh1 * a1.x);
  }

  // Groups j0 .. j0 + 3 of mode (mm, mn), all inside the problem. Thread t loads and stores the 8
  // columns of group j0 + t; quad::transpose converts between that and the accumulator's pairs.
  template <class Acc, class Coords, class F>
  CUTLASS_DEVICE void four_groups(Acc const& acc, Coords const& tc, int m, int mm, int mn, int j0, F f_df) const {
    using namespace cute;
    const int t = static_cast<int>(threadIdx.x) & 3;
    const int64_t c = get<1>(tc(make_coord(make_coord(0, 0, j0), mm, mn))) + 6 * t;  // 8 j0 + 2t -> 8 (j0 + t)
    uint32_t g[2][4], u[2][4];
    CUTLASS_PRAGMA_UNROLL
    for (int half = 0; half < 2; ++half) {  // both row halves' loads in flight before any math
      const int64_t row = get<0>(tc(make_coord(make_coord(0, half, j0), mm, mn)));
      if (row < m) {
        const T* p = pre_ + row * params_.ldp + c;
        quad::load16(p, g[half]);
        quad::load16(p + params_.inter, u[half]);
      } else {
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < 4; ++i) g[half][i] = u[half][i] = 0u;
      }
    }
    CUTLASS_PRAGMA_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int64_t row = get<0>(tc(make_coord(make_coord(0, half, j0), mm, mn)));
      quad::transpose(g[half], t);  // every lane of the warp takes part; the row check comes after
      quad::transpose(u[half], t);
      uint32_t dg[4], du[4];
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < 4; ++i)
        grad_pairs(acc(make_coord(make_coord(0, half, j0 + i), mm, mn)),
                   acc(make_coord(make_coord(1, half, j0 + i), mm, mn)), g[half][i], u[half][i], f_df, dg[i], du[i]);
      quad::transpose(dg, t);
      quad::transpose(du, t);
      if (row < m) {
        T* d = dpre_ + row * params_.lddp + c;
        quad::store16(d, dg);
        quad::store16(d + params_.inter, du);
      }
    }
  }

  // Group j of mode (mm, mn): this thread's pairs, 4-byte accesses.
  template <class Acc, class Coords, class F>
  CUTLASS_DEVICE void one_group(Acc const& acc, Coords const& tc, int m, int n, int mm, int mn, int j, F f_df) const {
    using namespace cute;
    const int64_t col = get<1>(tc(make_coord(make_coord(0, 0, j), mm, mn)));
    if (col >= n) return;  // n = I, a multiple of 8: whole groups are in or out
    CUTLASS_PRAGMA_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int64_t row = get<0>(tc(make_coord(make_coord(0, half, j), mm, mn)));
      if (row >= m) continue;
      const T* p = pre_ + row * params_.ldp + col;
      uint32_t dg, du;
      grad_pairs(acc(make_coord(make_coord(0, half, j), mm, mn)), acc(make_coord(make_coord(1, half, j), mm, mn)),
                 *reinterpret_cast<const uint32_t*>(p), *reinterpret_cast<const uint32_t*>(p + params_.inter), f_df,
                 dg, du);
      T* d = dpre_ + row * params_.lddp + col;
      *reinterpret_cast<uint32_t*>(d) = dg;
      *reinterpret_cast<uint32_t*>(d + params_.inter) = du;
    }
  }

  T* dpre_ = static_cast<T*>(params_.dpre);
  const T* pre_ = static_cast<const T*>(params_.pre);
};

}  // namespace kp::gemm
