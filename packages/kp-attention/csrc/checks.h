// What the forward's and the backward's launchers (fwd.cu, bwd.cu) do alike with a call's
// arguments (FwdArgs, BwdArgs: the same names for the same things): the checks of its sizes,
// options and pointers (std::invalid_argument: ValueError in Python), and what of it both kernels'
// parameters (FwdParams, BwdParams) take alike. No CUTLASS here.
#pragma once
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "kp/dtype.cuh"
#include "kp/error.cuh"

namespace kp_attention::args {

constexpr int64_t kMaxInt = 0x7fffffff;
// Any diagonal beyond +-2^33 sees all or none of every sequence (lengths and windows < 2^31): the
// clamp keeps row + diagonal + window inside int64.
constexpr int64_t kMaxDiagonal = int64_t{1} << 33;

inline std::string str(int64_t v) { return std::to_string(v); }

inline void check_aligned(const char* name, const void* ptr, std::initializer_list<int64_t> strides) {
  KP_CHECK_ARG(ptr != nullptr, std::string("kp_attention: ") + name + " is a null pointer");
  // cp.async moves 16 bytes (8 elements) at a time: the start and every stride must keep that.
  KP_CHECK_ARG(reinterpret_cast<uintptr_t>(ptr) % 16 == 0,
               std::string("kp_attention: ") + name + " must start at a 16-byte aligned address (cp.async)");
  for (int64_t s : strides)
    KP_CHECK_ARG(s % 8 == 0, std::string("kp_attention: ") + name + "'s strides must be multiples of 8 elements "
                                 "(16 bytes, cp.async), got " + str(s));
}

// The checks both passes make first, in this order: dtype, head dim (`has_kernels`: the pass has
// kernels for a.head_dim), sizes, the GQA group, 2^31 bounds, varlen, window, scale and softcap.
// `pass`: "forward" or "backward", for the messages; total_k: varlen k's rows (the forward, which
// takes none, passes 0).
template <class Args>
void check_problem(const Args& a, const char* pass, bool has_kernels, int64_t total_k) {
  KP_CHECK_ARG(a.dtype == kp::kF16 || a.dtype == kp::kBF16,
               std::string("kp_attention: the CUDA ") + pass + " takes float16 and bfloat16, not " +
                   kp::dtype_name(a.dtype));
  KP_CHECK_ARG(has_kernels, std::string("kp_attention: the CUDA ") + pass +
                                " has kernels for head_dim 64, 96, 128, 192 and 256, not " + str(a.head_dim));
  KP_CHECK_ARG(a.batch >= 0 && a.seqlen_q >= 0 && a.seqlen_k >= 0 && a.total_q >= 0 && total_k >= 0 &&
                   a.heads_q > 0 && a.heads_kv > 0, "kp_attention: sizes must be >= 0 and heads > 0");
  KP_CHECK_ARG(a.heads_q % a.heads_kv == 0, "kp_attention: heads_q (" + str(a.heads_q) +
                                                ") must be a multiple of heads_kv (" + str(a.heads_kv) + ")");
  KP_CHECK_ARG(a.seqlen_q <= kMaxInt && a.seqlen_k <= kMaxInt && a.total_q <= kMaxInt && total_k <= kMaxInt &&
                   a.batch <= kMaxInt && a.heads_q <= kMaxInt,
               "kp_attention: sequence lengths, batch and heads must be below 2^31");
  KP_CHECK_ARG((a.cu_q == nullptr) == (a.cu_k == nullptr), "kp_attention: cu_seqlens_q and cu_seqlens_k go together");
  KP_CHECK_ARG(a.left >= -1 && a.right >= -1, "kp_attention: window sides must be >= -1 (-1: unbounded)");
  KP_CHECK_ARG(!(a.causal && a.right > 0), "kp_attention: causal=True sees no key right of the diagonal (right > 0)");
  KP_CHECK_ARG(std::isfinite(a.scale) && std::isfinite(a.softcap) && a.softcap >= 0,
               "kp_attention: scale must be finite and softcap finite and >= 0");
}

// q, k and v: non-null, 16-byte aligned, strides in whole 16-byte units.
template <class Args>
void check_qkv(const Args& a) {
  check_aligned("q", a.q, {a.q_batch, a.q_row, a.q_head});
  check_aligned("k", a.k, {a.k_batch, a.k_row, a.k_head});
  check_aligned("v", a.v, {a.v_batch, a.v_row, a.v_head});
}

// What FwdParams and BwdParams take alike from the call: q, k, v, lse and their strides, the
// strides of out (forward) or dq (backward), [.., heads_q, d] contiguous, and of lse [batch, heads_q,
// seqlen_q] (varlen [heads_q, total_q]), the sizes, and the options: the diagonal clamped, the
// window sides folded with causal (causal: right = 0), the scores in exp2 units.
template <class Args, class Params>
void fold(const Args& a, Params& p) {
  p.q = a.q, p.k = a.k, p.v = a.v, p.lse = a.lse, p.cu_q = a.cu_q, p.cu_k = a.cu_k;
  p.q_batch = a.q_batch, p.q_row = a.q_row, p.q_head = a.q_head;
  p.k_batch = a.k_batch, p.k_row = a.k_row, p.k_head = a.k_head;
  p.v_batch = a.v_batch, p.v_row = a.v_row, p.v_head = a.v_head;
  const bool varlen = a.cu_q != nullptr;
  p.o_row = a.heads_q * a.head_dim;
  p.o_batch = varlen ? 0 : a.seqlen_q * p.o_row;
  p.lse_head = varlen ? a.total_q : a.seqlen_q;
  p.lse_batch = varlen ? 0 : a.heads_q * a.seqlen_q;
  p.seqlen_q = static_cast<int>(a.seqlen_q), p.seqlen_k = static_cast<int>(a.seqlen_k);
  p.batch = static_cast<int>(a.batch), p.heads_q = static_cast<int>(a.heads_q);
  p.group = static_cast<int>(a.heads_q / a.heads_kv);
  p.diagonal = a.diagonal < -kMaxDiagonal ? -kMaxDiagonal : a.diagonal > kMaxDiagonal ? kMaxDiagonal : a.diagonal;
  // A window side past 2^31 - 1 keys is as unbounded as -1 (no sequence is longer).
  p.left = static_cast<int>(a.left > kMaxInt ? kMaxInt : a.left);
  p.right = a.causal ? 0 : static_cast<int>(a.right > kMaxInt ? kMaxInt : a.right);
  // Scores in exp2 units: s log2(e). softcap: t = tanh(scale q.k / softcap) and s = softcap t;
  // else s = scale q.k, taken as |scale| (-q.k) when scale < 0 so the factor stays > 0 (the row
  // max commutes with it). A zero scale keeps a tiny factor: every visible score is then equal
  // and 0 x -inf never occurs.
  constexpr double kLog2e = 1.4426950408889634;
  p.softcap = a.softcap > 0;
  p.negate = !p.softcap && a.scale < 0;
  const double factor = p.softcap ? a.softcap * kLog2e : std::fabs(a.scale) * kLog2e;
  p.factor = static_cast<float>(factor > 1e-30 ? factor : 1e-30);
  p.tanh_scale = p.softcap ? static_cast<float>(a.scale / a.softcap) : 0.0f;
}

}  // namespace kp_attention::args
