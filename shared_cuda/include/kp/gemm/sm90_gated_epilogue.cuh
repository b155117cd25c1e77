// The epilogue of kp's gated GEMM (sm90_gated.h): h = act(gate + bg) * (up + bu) from the fp32
// accumulators of a GEMM against the interleaved weight Wi, in registers, rounded once to h's
// dtype, stored straight to global memory (no smem, no TMA store).
//
// Why its own epilogue: CUTLASS's visitor trees (EVT) map one accumulator element to one output
// element; h has half the accumulator's columns. Why direct stores: this epilogue needs no smem,
// leaving the whole 227 KB to the mainloop's stages. A thread holds two adjacent columns of each
// 8-column group, so the four threads of a quad swap pairs (shuffles) to store 16 bytes each, 64
// contiguous bytes of a row a quad (store(), below); the 4-byte stores of one pair each, 8 rows x
// 16 bytes a warp, made saving P cost 10% of the GEMM.
//
// The collective interface: register_epilogue.cuh.
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/detail.hpp>
#include <cutlass/numeric_conversion.h>

#include <cstdint>

#include "kp/gemm/activation.cuh"
#include "kp/gemm/quad_io.cuh"
#include "kp/gemm/register_epilogue.cuh"
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
class Sm90GatedEpilogue : public RegisterEpilogue<Sm90GatedEpilogue<T>, T, GatedEpilogueArgs> {
  using Base = RegisterEpilogue<Sm90GatedEpilogue<T>, T, GatedEpilogueArgs>;
  using Base::params_;

 public:
  using Base::Base;

  template <class ProblemShape>
  static bool can_implement(ProblemShape const& shape, typename Base::Arguments const& args) {
    // Whole 16-column blocks of Wi: gate and up of every h column inside the problem.
    return cute::get<1>(shape) % (2 * kGatedBlock) == 0 && cute::get<1>(shape) == 2 * args.inter;
  }

  // Gate group 2b and up group 2b + 1 of the accumulator hold the same columns of h.
  template <class Acc, class Coords>
  CUTLASS_DEVICE void epilogue(Acc const& acc, Coords const& tc, int m, int n) const {
    static_assert(decltype(cute::size<0, 2>(acc))::value % 2 == 0,
                  "the gated epilogue pairs 8-column groups 2b and 2b + 1 of a 64 x N wgmma fragment");
    switch (static_cast<Act>(params_.act)) {  // uniform: one branch a tile, outside the element loop
      case Act::kGeluTanh: return store(acc, tc, m, n, [](float x) { return gelu_tanh(x); });
      default: return store(acc, tc, m, n, [](float x) { return silu(x); });
    }
  }

  // h (and P) from one thread's accumulators `acc` with coordinates `tc` (thread_coords), for a
  // problem of m rows and n = 2I columns of Wi.
  //
  // On the GPU, four 16-column blocks of Wi at a time (32 columns of h and of each half of P): the
  // four threads of a quad (t = lane % 4), which hold columns 2t, 2t + 1 of every block, swap
  // their pairs so that thread t holds all 8 columns of block t, and store 16 bytes; the quad
  // writes 64 contiguous bytes of a row. Before, each 4-byte store of a warp touched 8 rows x 16
  // bytes: saving P cost 10% of the gated GEMM at 8192 x 4096 -> 2 x 14336 (3304 against 3011 us,
  // H200, 2026-11-29), the load/store unit splitting every store into 8 row requests. The host
  // (tools/check_gated_epilogue.cu) and blocks at the problem's right edge take one block at a time.
  template <class Acc, class Coords, class F>
  CUTLASS_HOST_DEVICE void store(Acc const& acc, Coords const& tc, int m, int n, F act) const {
    using namespace cute;
    constexpr int kBlocks = decltype(size<0, 2>(acc))::value / 2;  // 16-column blocks of Wi in a fragment's N mode
    CUTLASS_PRAGMA_UNROLL
    for (int mn = 0; mn < size<2>(acc); ++mn) {
      CUTLASS_PRAGMA_UNROLL
      for (int mm = 0; mm < size<1>(acc); ++mm) {
#if defined(__CUDA_ARCH__)
        if constexpr (kBlocks % 4 == 0) {
          CUTLASS_PRAGMA_UNROLL
          for (int b0 = 0; b0 < kBlocks; b0 += 4) {
            // Warp-uniform: a warp's threads share their column blocks (they differ in rows).
            if (wide_ok_ && get<1>(tc(make_coord(make_coord(0, 0, 2 * b0 + 6), mm, mn))) < n) {
              store_quad(acc, tc, m, mm, mn, b0, act);
            } else {
              CUTLASS_PRAGMA_UNROLL
              for (int b = b0; b < b0 + 4; ++b) store_block(acc, tc, m, n, mm, mn, b, act);
            }
          }
        } else  // NOLINT: the host's path below is the else of the device's
#endif
        {
          CUTLASS_PRAGMA_UNROLL
          for (int b = 0; b < kBlocks; ++b) store_block(acc, tc, m, n, mm, mn, b, act);
        }
      }
    }
  }

  // Block b (gate group 2b, up group 2b + 1) of mode (mm, mn): 4-byte stores of this thread's pairs.
  template <class Acc, class Coords, class F>
  CUTLASS_HOST_DEVICE void store_block(Acc const& acc, Coords const& tc, int m, int n, int mm, int mn, int b,
                                       F act) const {
    using namespace cute;
    // Gate columns c, c + 1 of h (c even) for both row halves: the same bias pair.
    const int col = get<1>(tc(make_coord(make_coord(0, 0, 2 * b), mm, mn)));  // of Wi: 16 (c / 8) + c % 8
    if (col >= n) return;  // n = 2I: whole 16-column blocks are in or out
    const int64_t c = h_column(col);
    float2 bg, bu;
    bias_pairs(c, bg, bu);
    CUTLASS_PRAGMA_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int64_t row = get<0>(tc(make_coord(make_coord(0, half, 2 * b), mm, mn)));
      if (row >= m) continue;
      uint32_t hv, gv, uv;
      pairs(acc, mm, mn, b, half, bg, bu, act, hv, gv, uv);
      *reinterpret_cast<uint32_t*>(h_ + row * params_.ldh + c) = hv;
      if (pre_) {  // the backward's input, in W's order: [gate_pre | up_pre]
        T* p = pre_ + row * params_.ldp + c;
        *reinterpret_cast<uint32_t*>(p) = gv;
        *reinterpret_cast<uint32_t*>(p + params_.inter) = uv;
      }
    }
  }

#if defined(__CUDA_ARCH__)
  // Blocks b0 .. b0 + 3 of mode (mm, mn), all inside the problem: 16-byte stores after a quad swap.
  // h, then P's gate and up halves, one at a time, the bias re-read (L1) where it is used: the 256 x
  // 192 tile's 192 accumulators leave ~48 registers (12 pairs and 8 biases live spilled).
  template <class Acc, class Coords, class F>
  CUTLASS_DEVICE void store_quad(Acc const& acc, Coords const& tc, int m, int mm, int mn, int b0, F act) const {
    using namespace cute;
    const int t = static_cast<int>(threadIdx.x) & 3;
    const int64_t c0 = h_column(get<1>(tc(make_coord(make_coord(0, 0, 2 * b0), mm, mn))));  // 8 b0' + 2t
    const int64_t c = c0 + 6 * t;  // this thread's 8 columns after the swap (block b0 + t's): c0 - 2t + 8t
    const T* bias = static_cast<const T*>(params_.bias);
    CUTLASS_PRAGMA_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int64_t row = get<0>(tc(make_coord(make_coord(0, half, 2 * b0), mm, mn)));
      // Element e of block b0 + i's gate (up) pair, with its bias.
      auto gate = [&](int i, int e) {
        return acc(make_coord(make_coord(e, half, 2 * (b0 + i)), mm, mn)) + (bias ? float(bias[c0 + 8 * i + e]) : 0.f);
      };
      auto up = [&](int i, int e) {
        return acc(make_coord(make_coord(e, half, 2 * (b0 + i) + 1), mm, mn)) +
               (bias ? float(bias[params_.inter + c0 + 8 * i + e]) : 0.f);
      };
      uint32_t v[4];
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < 4; ++i) v[i] = pack(act(gate(i, 0)) * up(i, 0), act(gate(i, 1)) * up(i, 1));
      quad::transpose(v, t);  // every lane of the warp takes part; the row check comes after
      if (row < m) quad::store16(h_ + row * params_.ldh + c, v);
      if (pre_) {  // the backward's input, in W's order: [gate_pre | up_pre]
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < 4; ++i) v[i] = pack(gate(i, 0), gate(i, 1));
        quad::transpose(v, t);
        if (row < m) quad::store16(pre_ + row * params_.ldp + c, v);
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < 4; ++i) v[i] = pack(up(i, 0), up(i, 1));
        quad::transpose(v, t);
        if (row < m) quad::store16(pre_ + row * params_.ldp + params_.inter + c, v);
      }
    }
  }

#endif

  // h's column of Wi's column `col` (a gate column: col % 16 < 8).
  static CUTLASS_HOST_DEVICE int64_t h_column(int col) { return (col / (2 * kGatedBlock)) * kGatedBlock + col % kGatedBlock; }

  CUTLASS_HOST_DEVICE void bias_pairs(int64_t c, float2& bg, float2& bu) const {
    bg = make_float2(0.f, 0.f), bu = bg;
    if (params_.bias) {
      const T* bias = static_cast<const T*>(params_.bias);
      bg = load_pair(bias + c);
      bu = load_pair(bias + params_.inter + c);
    }
  }

  // Row half `half` of block b: h's pair and the gate and up pre-activation pairs, packed.
  template <class Acc, class F>
  static CUTLASS_HOST_DEVICE void pairs(Acc const& acc, int mm, int mn, int b, int half, float2 bg, float2 bu, F act,
                                        uint32_t& hv, uint32_t& gv, uint32_t& uv) {
    using namespace cute;
    const float g0 = acc(make_coord(make_coord(0, half, 2 * b), mm, mn)) + bg.x;
    const float g1 = acc(make_coord(make_coord(1, half, 2 * b), mm, mn)) + bg.y;
    const float u0 = acc(make_coord(make_coord(0, half, 2 * b + 1), mm, mn)) + bu.x;
    const float u1 = acc(make_coord(make_coord(1, half, 2 * b + 1), mm, mn)) + bu.y;
    hv = pack(act(g0) * u0, act(g1) * u1);
    gv = pack(g0, g1);
    uv = pack(u0, u1);
  }

 private:
  T* h_ = static_cast<T*>(params_.h);
  T* pre_ = static_cast<T*>(params_.pre);
  // The 16-byte stores need 16-byte aligned rows: h's and P's bases and row strides, and I.
  bool wide_ok_ = (reinterpret_cast<uintptr_t>(params_.h) | reinterpret_cast<uintptr_t>(params_.pre)) % 16 == 0 &&
                  params_.ldh % 8 == 0 && params_.ldp % 8 == 0 && params_.inter % 8 == 0;

  static CUTLASS_HOST_DEVICE uint32_t pack(float a, float b) { return quad::pack<T>(a, b); }
  static CUTLASS_HOST_DEVICE float2 load_pair(const T* p) {  // 2 elements of a 4-byte aligned bias
    return quad::unpack<T>(*reinterpret_cast<const uint32_t*>(p));
  }
};

}  // namespace kp::gemm
