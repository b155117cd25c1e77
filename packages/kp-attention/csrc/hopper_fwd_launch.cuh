// run_hopper_fwd<HeadDim, DType>: the TMA descriptors of one call and the launch of the Hopper
// kernel (hopper_fwd_kernel.cuh). Included only by hopper_fwd_d<D>.cu. Each instantiation lists
// these 2 kernels, like the sm80 forward (fwd_launch.cuh):
//
//   kSoftcap = false   every call without softcap (causal, windows, tails: masked blocks at run time)
//   kSoftcap = true    softcap > 0 (a tanh per score)
//
// 2 head dims x 2 dtypes x 2 = 8 Hopper kernels (sm_90a code only; other archs compile empty stubs).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "hopper_fwd.h"
#include "hopper_fwd_kernel.cuh"
#include "hopper_tma.h"
#include "kp/error.cuh"
#include "kp/launch.cuh"

namespace kp_attention {

namespace hopper {

template <class Tr>
using KernelFn = void (*)(Params<Tr>);

template <class Tr>
KernelFn<Tr> pick(bool softcap) {
  return softcap ? &hopper_fwd_kernel<Tr, true> : &hopper_fwd_kernel<Tr, false>;
}

}  // namespace hopper

template <int HeadDim, int DType>
bool run_hopper_fwd(const FwdParams& params, const HopperExtra& x, int device, cudaStream_t stream) {
  using namespace cute;
  using Tr = hopper::Traits<HeadDim, DType>;
  using hopper::Dim;
  constexpr int kElem = sizeof(typename Tr::T);
  FwdParams p = params;
  const bool varlen = p.cu_q != nullptr;
  // q: (rows, d, heads, batch); varlen: the packed rows of every sequence as one batch.
  Dim q[3] = {{varlen ? x.total_q : p.seqlen_q, p.q_row}, {p.heads_q, p.q_head}, {varlen ? 1 : p.batch, p.q_batch}};
  // k, v: varlen does not pass k's row count; TMA reads only blocks inside their sequence (the
  // blocks that reach past its end are copied with cp.async), so the extent is the largest legal.
  const int64_t k_rows = varlen ? (int64_t{1} << 31) - 1 : p.seqlen_k;
  Dim k[3] = {{k_rows, p.k_row}, {x.heads_kv, p.k_head}, {varlen ? 1 : p.batch, p.k_batch}};
  Dim v[3] = {{k_rows, p.v_row}, {x.heads_kv, p.v_head}, {varlen ? 1 : p.batch, p.v_batch}};
  if (!hopper::tma_ok(p.q, kElem, q, 3, HeadDim) || !hopper::tma_ok(p.k, kElem, k, 3, HeadDim) ||
      !hopper::tma_ok(p.v, kElem, v, 3, HeadDim))
    return false;

  p.m_blocks = static_cast<int>((static_cast<int64_t>(p.seqlen_q) + Tr::kBlockM - 1) / Tr::kBlockM);
  const int64_t tiles = static_cast<int64_t>(p.m_blocks) * p.batch * p.heads_q;
  if (tiles == 0) return true;
  KP_CHECK_ARG(tiles <= 0x7fffffff, "kp_attention: " + std::to_string(tiles) + " tiles (query blocks of " +
                                        std::to_string(Tr::kBlockM) + " rows x batch x heads_q) pass 2^31 - 1");
  // Persistent (one CTA an SM: 384 threads x 168 registers and ~165 KB of smem allow no second)
  // where every tile has the same work: batched, no causal mask, no window. Elsewhere one CTA a
  // tile (the same kernel; its tile loop runs once): a static stride over tiles of unequal work
  // (the causal diagonal) left CTAs ~17% apart at seqlen 4096, which the hardware's dynamic CTA
  // dispatch balances (a dynamic tile scheduler is a tuning step).
  const bool uniform = p.cu_q == nullptr && p.left < 0 && p.right < 0;
  const int64_t sms = kp::device_info(device).sms;
  const unsigned grid = static_cast<unsigned>(uniform && tiles > sms ? sms : tiles);
  auto layout = [](const Dim* d) {
    return typename Tr::GLayout(
        make_shape(static_cast<int32_t>(d[0].extent), int32_t{HeadDim}, static_cast<int32_t>(d[1].extent),
                   static_cast<int32_t>(d[2].extent)),
        make_stride(d[0].stride, Int<1>{}, d[1].stride, d[2].stride));
  };
  hopper::Params<Tr> hp{};
  hp.tma_q = make_tma_copy(SM90_TMA_LOAD{}, Tr::gtensor(p.q, layout(q)), typename Tr::SmemQ{});
  hp.tma_k = make_tma_copy(SM90_TMA_LOAD{}, Tr::gtensor(p.k, layout(k)), typename Tr::SmemKVStage{});
  hp.tma_v = make_tma_copy(SM90_TMA_LOAD{}, Tr::gtensor(p.v, layout(v)), typename Tr::SmemKVStage{});
  hp.p = p;
  hp.q_rows = static_cast<int32_t>(q[0].extent), hp.q_batches = static_cast<int32_t>(q[2].extent);
  hp.k_rows = static_cast<int32_t>(k[0].extent), hp.k_batches = static_cast<int32_t>(k[2].extent);
  hp.heads_kv = static_cast<int32_t>(x.heads_kv);
  kp::launch(hopper::pick<Tr>(p.softcap), device, dim3(grid), dim3(Tr::kThreads),
             static_cast<size_t>(Tr::kSmemBytes), stream, 1, hp);
  return true;
}

}  // namespace kp_attention
