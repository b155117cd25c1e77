// The epilogue kinds of kp's GEMMs and their run-time arguments, without CUTLASS: what a package's
// host dispatch and bindings see. sm90_fusion.cuh maps each kind to the CUTLASS epilogue that
// computes it inside the GEMM (the plug-in point: a new kind is a struct here and a Fusion there).
//
// Every kind computes D = f(acc) in fp32 from the fp32 accumulator and rounds once to D's dtype.
#pragma once
#include <cstdint>

namespace kp::gemm {

// Activation codes: kp_fused_mlp.linear.ACTIVATIONS lists the same names in this order.
enum class Act : int { kNone = 0, kRelu = 1, kGelu = 2, kGeluTanh = 3, kSilu = 4 };
constexpr int kNumActs = 5;
inline const char* act_name(int a) {
  constexpr const char* names[kNumActs] = {"none", "relu", "gelu", "gelu_tanh", "silu"};
  return a >= 0 && a < kNumActs ? names[a] : "?";
}

namespace epi {

// D = acc: the bare GEMM (no source matrix C, no vectors). The kernel the GEMM's speed is measured by.
struct Identity {
  static constexpr const char* name = "identity";
  struct Args {};
};

// D = act(acc + bias[n]): bias of D's dtype, [N] contiguous and 16-byte aligned, or null (no bias);
// the activation is a run-time code (one kernel for all of them: the branch is uniform across the
// grid, so it costs a few instructions a fragment, not a kernel an activation at compile time).
struct BiasAct {
  static constexpr const char* name = "bias_act";
  struct Args {
    const void* bias = nullptr;
    int act = 0;
  };
};

// D = act(acc + bias[n]) as BiasAct, and Aux = acc + bias[n] (the pre-activation Z, rounded to D's
// dtype): what a backward needs for act'(Z). Aux is [M, N] row-major, row stride aux_ld (elements),
// 16-byte aligned with 16-byte row strides (TMA stores it, like D).
struct BiasActAux {
  static constexpr const char* name = "bias_act_aux";
  struct Args {
    const void* bias = nullptr;
    int act = 0;
    void* aux = nullptr;
    int64_t aux_ld = 0;
  };
};

}  // namespace epi
}  // namespace kp::gemm
