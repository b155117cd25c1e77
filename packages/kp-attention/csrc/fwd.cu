// The attention forward's launcher: every argument checked again (Python checked them first), the
// call folded into the kernels' parameters, then the kernels of its head dim and dtype.
#include <cmath>
#include <cstdint>
#include <string>

#include "fwd.h"
#include "fwd_tiles.h"
#include "hopper_fwd.h"
#include "kp/dtype.cuh"
#include "kp/error.cuh"
#include "kp/launch.cuh"

namespace kp_attention {
namespace {

constexpr int64_t kMaxInt = 0x7fffffff;
// Any diagonal beyond +-2^33 sees all or none of every sequence (lengths and windows < 2^31): the
// clamp keeps row + diagonal + window inside int64.
constexpr int64_t kMaxDiagonal = int64_t{1} << 33;

std::string str(int64_t v) { return std::to_string(v); }

void check_aligned(const char* name, const void* ptr, std::initializer_list<int64_t> strides) {
  KP_CHECK_ARG(ptr != nullptr, std::string("kp_attention: ") + name + " is a null pointer");
  // cp.async moves 16 bytes (8 elements) at a time: the start and every stride must keep that.
  KP_CHECK_ARG(reinterpret_cast<uintptr_t>(ptr) % 16 == 0,
               std::string("kp_attention: ") + name + " must start at a 16-byte aligned address (cp.async)");
  for (int64_t s : strides)
    KP_CHECK_ARG(s % 8 == 0, std::string("kp_attention: ") + name + "'s strides must be multiples of 8 elements "
                                 "(16 bytes, cp.async), got " + str(s));
}

void check(const FwdArgs& a) {
  KP_CHECK_ARG(a.dtype == kp::kF16 || a.dtype == kp::kBF16,
               std::string("kp_attention: the CUDA forward takes float16 and bfloat16, not ") +
                   kp::dtype_name(a.dtype));
  KP_CHECK_ARG(fwd_tile(static_cast<int>(a.head_dim)) != nullptr,
               "kp_attention: the CUDA forward has kernels for head_dim 64, 96, 128, 192 and 256, not " +
                   str(a.head_dim));
  KP_CHECK_ARG(a.batch >= 0 && a.seqlen_q >= 0 && a.seqlen_k >= 0 && a.total_q >= 0 && a.heads_q > 0 &&
                   a.heads_kv > 0, "kp_attention: sizes must be >= 0 and heads > 0");
  KP_CHECK_ARG(a.heads_q % a.heads_kv == 0, "kp_attention: heads_q (" + str(a.heads_q) +
                                                ") must be a multiple of heads_kv (" + str(a.heads_kv) + ")");
  KP_CHECK_ARG(a.seqlen_q <= kMaxInt && a.seqlen_k <= kMaxInt && a.total_q <= kMaxInt && a.batch <= kMaxInt &&
                   a.heads_q <= kMaxInt, "kp_attention: sequence lengths, batch and heads must be below 2^31");
  KP_CHECK_ARG((a.cu_q == nullptr) == (a.cu_k == nullptr), "kp_attention: cu_seqlens_q and cu_seqlens_k go together");
  KP_CHECK_ARG(a.left >= -1 && a.right >= -1, "kp_attention: window sides must be >= -1 (-1: unbounded)");
  KP_CHECK_ARG(!(a.causal && a.right > 0), "kp_attention: causal=True sees no key right of the diagonal (right > 0)");
  KP_CHECK_ARG(std::isfinite(a.scale) && std::isfinite(a.softcap) && a.softcap >= 0,
               "kp_attention: scale must be finite and softcap finite and >= 0");
  KP_CHECK_ARG(a.out != nullptr && a.lse != nullptr, "kp_attention: out and lse must be allocated");
  check_aligned("q", a.q, {a.q_batch, a.q_row, a.q_head});
  check_aligned("k", a.k, {a.k_batch, a.k_row, a.k_head});
  check_aligned("v", a.v, {a.v_batch, a.v_row, a.v_head});
}

FwdParams params(const FwdArgs& a) {
  FwdParams p{};
  p.q = a.q, p.k = a.k, p.v = a.v, p.out = a.out, p.lse = a.lse, p.cu_q = a.cu_q, p.cu_k = a.cu_k;
  p.q_batch = a.q_batch, p.q_row = a.q_row, p.q_head = a.q_head;
  p.k_batch = a.k_batch, p.k_row = a.k_row, p.k_head = a.k_head;
  p.v_batch = a.v_batch, p.v_row = a.v_row, p.v_head = a.v_head;
  const bool varlen = a.cu_q != nullptr;
  p.o_head = a.head_dim;
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
  return p;
}

}  // namespace

std::string fwd_device_problem(int device) {
  const kp::DeviceInfo& info = kp::device_info(device);
  if (info.major < 8)
    return "device " + std::to_string(device) + " is sm_" + std::to_string(10 * info.major + info.minor) +
           ": kp-attention's CUDA kernels need sm_80 or newer (mma.sync on bf16, cp.async, ldmatrix)";
  return "";
}

void attention_fwd(const FwdArgs& a, int device, cudaStream_t stream) {
  check(a);
  const std::string why = fwd_device_problem(device);
  KP_CHECK_ARG(why.empty(), "kp_attention: " + why);
  const FwdParams p = params(a);
  if (p.batch == 0 || p.seqlen_q == 0) return;  // no query row
  kp::DeviceGuard guard(device);
  const bool bf16 = a.dtype == kp::kBF16;
  // Hopper (sm_90a in this build, an sm_90 device): the TMA / wgmma kernel at the head dims of its
  // table (hopper_fwd.h: 64, 128); 96, 192, 256, and calls whose strides break TMA's rules
  // (run_hopper_fwd returns false), take the sm80 kernel below.
  if (hopper_fwd_available(device)) {
    const HopperExtra x{a.total_q, a.heads_kv};
    switch (a.head_dim) {
      case 64:
        if (bf16 ? run_hopper_fwd<64, kp::kBF16>(p, x, device, stream)
                 : run_hopper_fwd<64, kp::kF16>(p, x, device, stream))
          return;
        break;
      case 128:
        if (bf16 ? run_hopper_fwd<128, kp::kBF16>(p, x, device, stream)
                 : run_hopper_fwd<128, kp::kF16>(p, x, device, stream))
          return;
        break;
      default: break;
    }
  }
  switch (a.head_dim) {
    case 64: return bf16 ? run_fwd<64, kp::kBF16>(p, device, stream) : run_fwd<64, kp::kF16>(p, device, stream);
    case 96: return bf16 ? run_fwd<96, kp::kBF16>(p, device, stream) : run_fwd<96, kp::kF16>(p, device, stream);
    case 128: return bf16 ? run_fwd<128, kp::kBF16>(p, device, stream) : run_fwd<128, kp::kF16>(p, device, stream);
    case 192: return bf16 ? run_fwd<192, kp::kBF16>(p, device, stream) : run_fwd<192, kp::kF16>(p, device, stream);
    case 256: return bf16 ? run_fwd<256, kp::kBF16>(p, device, stream) : run_fwd<256, kp::kF16>(p, device, stream);
    default: break;  // check() refused it
  }
}

const void* probe_kernel() { return fwd_kernel_ptr<64, kp::kF16>(); }

}  // namespace kp_attention
