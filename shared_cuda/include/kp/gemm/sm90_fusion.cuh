// The plug-in point of kp's sm90 GEMM: each epilogue kind of epilogues.h mapped to the CUTLASS
// epilogue fusion that computes it in the GEMM's epilogue warps, and its run-time arguments
// filled from kp's.
//
//   template <class ElementD, class TileShape> struct Sm90Fusion<Kind, ElementD, TileShape> {
//     using Op = <a cutlass::epilogue::fusion operation, or an Sm90EVT<...> tree>;
//     template <class FusionArgs> static void fill(FusionArgs&, const Kind::Args&);
//   };
//
// Op goes to CUTLASS's epilogue CollectiveBuilder, which builds the visitor tree (EVT) for the TMA
// warp-specialized epilogue; fill() writes the tree's Arguments (alpha/beta, vector pointers,
// node arguments). TileShape is there for EVT nodes that stage per-tile vectors in shared memory
// (Sm90RowBroadcast and friends), e.g. kp-quant's per-row x per-column scales:
//   Sm90EVT<Sm90Compute<multiplies>, Sm90ColBroadcast<...> /*row scale*/,
//            Sm90EVT<Sm90Compute<multiplies>, Sm90RowBroadcast<...> /*column scale*/, Sm90AccFetch>>
// A new kind is a struct in epilogues.h, a specialization here, and a line in the package's
// instantiation list.
#pragma once
#include <cutlass/array.h>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/layout/matrix.h>

#include <type_traits>

#include "kp/gemm/activation.cuh"
#include "kp/gemm/epilogues.h"

namespace kp::gemm {

// CUTLASS's Sm90Compute node hands a functor's `Arguments` to it with every fragment, so the
// activation is a run-time value. The switch sits outside the element loop: one uniform branch a
// fragment.
struct ActArgs {
  int act = 0;
};

template <class T>
struct RuntimeAct {
  using Arguments = ActArgs;
  CUTLASS_DEVICE T operator()(T const& x, Arguments const& a) const {
    return T(apply_act(static_cast<Act>(a.act), static_cast<float>(x)));
  }
};

template <class T, int N>
struct RuntimeAct<cutlass::Array<T, N>> {
  using Arguments = ActArgs;

  template <class F>
  CUTLASS_DEVICE static cutlass::Array<T, N> each(cutlass::Array<T, N> const& v, F f) {
    cutlass::Array<T, N> y;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) y[i] = T(f(static_cast<float>(v[i])));
    return y;
  }

  CUTLASS_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& v, Arguments const& a) const {
    switch (static_cast<Act>(a.act)) {
      case Act::kRelu: return each(v, [](float x) { return relu(x); });
      case Act::kGelu: return each(v, [](float x) { return gelu(x); });
      case Act::kGeluTanh: return each(v, [](float x) { return gelu_tanh(x); });
      case Act::kSilu: return each(v, [](float x) { return silu(x); });
      default: return v;
    }
  }
};

template <class Kind, class ElementD, class TileShape>
struct Sm90Fusion;

// D = 1 * acc (+ 0 * C, never read: ElementC is void, so no C tile is loaded).
template <class ElementD, class TileShape>
struct Sm90Fusion<epi::Identity, ElementD, TileShape> {
  using Op = cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>;
  template <class FusionArgs>
  static void fill(FusionArgs& f, const epi::Identity::Args&) {
    f.alpha = 1.f;
    f.beta = 0.f;
  }
};

// D = act(1 * acc + bias[n]): CUTLASS's per-column-bias + activation tree (the bias is a row
// vector broadcast down the columns, Sm90RowBroadcast; a null bias reads as zeros).
template <class ElementD, class TileShape>
struct Sm90Fusion<epi::BiasAct, ElementD, TileShape> {
  using Op = cutlass::epilogue::fusion::LinCombPerColBiasEltAct<RuntimeAct, ElementD, float, ElementD, void, float>;
  template <class FusionArgs>
  static void fill(FusionArgs& f, const epi::BiasAct::Args& a) {
    using Bias = std::remove_cv_t<std::remove_pointer_t<decltype(f.bias_ptr)>>;
    f.alpha = 1.f;
    f.beta = 0.f;
    f.bias_ptr = static_cast<const Bias*>(a.bias);
    f.activation.act = a.act;
  }
};

// D = act(1 * acc + bias[n]) and Aux = 1 * acc + bias[n]: CUTLASS's per-column-bias + activation
// tree with an aux store node between the bias and the activation (Sm90AuxStore: staged through
// smem, stored by TMA like D). Aux has D's dtype: the saved pre-activation is rounded once, as the
// output is.
template <class ElementD, class TileShape>
struct Sm90Fusion<epi::BiasActAux, ElementD, TileShape> {
  using Op = cutlass::epilogue::fusion::LinCombPerColBiasEltActAux<cutlass::layout::RowMajor, RuntimeAct, ElementD,
                                                                   float, ElementD, ElementD, void, float>;
  template <class FusionArgs>
  static void fill(FusionArgs& f, const epi::BiasActAux::Args& a) {
    using Bias = std::remove_cv_t<std::remove_pointer_t<decltype(f.bias_ptr)>>;
    using Aux = std::remove_pointer_t<decltype(f.aux_ptr)>;
    f.alpha = 1.f;
    f.beta = 0.f;
    f.bias_ptr = static_cast<const Bias*>(a.bias);
    f.activation.act = a.act;
    f.aux_ptr = static_cast<Aux*>(a.aux);
    f.dAux = cute::make_stride(a.aux_ld, cute::Int<1>{}, int64_t(0));
  }
};

}  // namespace kp::gemm
