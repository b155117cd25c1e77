// The attention backward's launcher: every argument checked again (Python checked them first), the
// call folded into the kernels' parameters; then delta (and dq_accum zeroed), the kernels of its
// head dim and dtype (bwd_launch.cuh), and with atomics the conversion of dq_accum to dq.
#include <cstring>
#include <cstdint>
#include <string>

#include "bwd.h"
#include "bwd_rows.cuh"
#include "bwd_tiles.h"
#include "checks.h"
#include "hopper_bwd.h"
#include "kp/dtype.cuh"
#include "kp/error.cuh"
#include "kp/launch.cuh"

namespace kp_attention {
namespace {

using args::kMaxInt;

void check(const BwdArgs& a) {
  args::check_problem(a, "backward", bwd_tile(static_cast<int>(a.head_dim)) != nullptr, a.total_k);
  KP_CHECK_ARG(a.lse != nullptr && a.delta != nullptr && a.dq != nullptr && a.dk != nullptr && a.dv != nullptr,
               "kp_attention: lse, delta, dq, dk and dv must be allocated");
  KP_CHECK_ARG(reinterpret_cast<uintptr_t>(a.delta) % 16 == 0 && reinterpret_cast<uintptr_t>(a.dq_accum) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(a.dq) % 16 == 0 && reinterpret_cast<uintptr_t>(a.dk) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(a.dv) % 16 == 0,
               "kp_attention: delta, dq_accum, dq, dk and dv must be 16-byte aligned");
  args::check_qkv(a);
  args::check_aligned("out", a.out, {});
  args::check_aligned("grad_output", a.dout, {a.do_batch, a.do_row, a.do_head});
}

BwdParams params(const BwdArgs& a) {
  BwdParams p{};
  args::fold(a, p);  // as the forward: q, k, v, lse, the sizes, the options; o_*: dq's strides
  p.dout = a.dout, p.delta = a.delta, p.dq_accum = a.dq_accum, p.dq = a.dq, p.dk = a.dk, p.dv = a.dv;
  p.do_batch = a.do_batch, p.do_row = a.do_row, p.do_head = a.do_head;
  p.dk_row = a.heads_kv * a.head_dim;
  p.dk_batch = a.cu_q != nullptr ? 0 : a.seqlen_k * p.dk_row;
  p.heads_kv = static_cast<int>(a.heads_kv);
  // The gradient of the score with respect to q.k is scale (times 1 - t^2 under softcap: d/dx
  // softcap tanh(x scale / softcap)), applied to dK and dQ once at their stores.
  p.scale = static_cast<float>(a.scale);
  return p;
}

template <class T2>
void launch_rows(const BwdArgs& a, const BwdParams& p, int device, cudaStream_t stream, bool after) {
  const bool varlen = a.cu_q != nullptr;
  const int64_t seqlen = varlen ? a.total_q : a.seqlen_q;
  const int64_t rows = (varlen ? 1 : a.batch) * seqlen * a.heads_q;
  if (rows == 0) return;
  if (!after) {
    int lanes = 1;  // a power of two covering d / 8 lanes of 16 bytes
    while (lanes < 32 && 8 * lanes < a.head_dim) lanes *= 2;
    const int64_t per_block = 256 / lanes;
    const int64_t blocks = (rows + per_block - 1) / per_block;
    KP_CHECK_ARG(blocks <= kMaxInt, "kp_attention: too many rows for the backward's delta kernel");
    kp::launch(&bwd::delta_kernel<T2>, device, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, stream, 1,
               static_cast<const T2*>(a.out), static_cast<const T2*>(a.dout), a.delta, a.dq_accum, rows, seqlen,
               static_cast<int>(a.heads_q), static_cast<int>(a.head_dim), lanes, varlen ? int64_t{0} : a.do_batch,
               a.do_row, a.do_head);
  } else if (a.dq_accum != nullptr) {
    const int64_t n4 = rows * a.head_dim / 4;
    const int64_t blocks = (n4 + 255) / 256 < 65536 ? (n4 + 255) / 256 : 65536;
    kp::launch(&bwd::dq_convert_kernel<T2>, device, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, stream, 1,
               static_cast<const float*>(a.dq_accum), static_cast<T2*>(a.dq), n4, p.scale);
  }
}

template <class T2, int DType>
void run(const BwdArgs& a, const BwdParams& p, int device, cudaStream_t stream) {
  launch_rows<T2>(a, p, device, stream, false);
  // The atomic dQ path at the Hopper kernel's head dims on sm_90 (hopper_bwd.h); a call that breaks
  // a TMA rule, and every deterministic call, takes the sm80-class kernels.
  if (a.dq_accum != nullptr && std::strcmp(bwd_kernel_name(device, static_cast<int>(a.head_dim)), "sm90") == 0) {
    bool done = false;
    if (a.head_dim == 64) done = run_hopper_bwd<64, DType>(p, HopperBwdExtra{a.total_q, a.total_k, a.dkv_accum}, device, stream);
    if (a.head_dim == 128) done = run_hopper_bwd<128, DType>(p, HopperBwdExtra{a.total_q, a.total_k, a.dkv_accum}, device, stream);
    if (done) return launch_rows<T2>(a, p, device, stream, true);
  }
  switch (a.head_dim) {
    case 64: run_bwd<64, DType>(p, device, stream); break;
    case 96: run_bwd<96, DType>(p, device, stream); break;
    case 128: run_bwd<128, DType>(p, device, stream); break;
    case 192: run_bwd<192, DType>(p, device, stream); break;
    case 256: run_bwd<256, DType>(p, device, stream); break;
    default: return;  // check() refused it
  }
  launch_rows<T2>(a, p, device, stream, true);
}

}  // namespace

std::string bwd_device_problem(int device, int head_dim) {
  const kp::DeviceInfo& info = kp::device_info(device);
  if (info.major < 8)
    return "device " + std::to_string(device) + " is sm_" + std::to_string(10 * info.major + info.minor) +
           ": kp-attention's CUDA kernels need sm_80 or newer (mma.sync on bf16, cp.async, ldmatrix)";
  const BwdTile* t = bwd_tile(head_dim);
  if (t == nullptr) return "the CUDA backward has no kernels for head_dim " + std::to_string(head_dim);
  const int need = t->smem_bytes() > t->dq_smem_bytes() ? t->smem_bytes() : t->dq_smem_bytes();
  if (need > info.smem_optin)
    return "the CUDA backward at head_dim " + std::to_string(head_dim) + " needs " + std::to_string(need) +
           " bytes of shared memory a CTA; device " + std::to_string(device) + " allows " +
           std::to_string(info.smem_optin);
  return "";
}

void attention_bwd(const BwdArgs& a, int device, cudaStream_t stream) {
  check(a);
  const std::string why = bwd_device_problem(device, static_cast<int>(a.head_dim));
  KP_CHECK_ARG(why.empty(), "kp_attention: " + why);
  const BwdParams p = params(a);
  kp::DeviceGuard guard(device);
  if (a.dtype == kp::kBF16)
    run<__nv_bfloat162, kp::kBF16>(a, p, device, stream);
  else
    run<__half2, kp::kF16>(a, p, device, stream);
}

}  // namespace kp_attention
