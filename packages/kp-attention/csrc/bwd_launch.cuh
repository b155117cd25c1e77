// run_bwd<HeadDim, DType>: the backward kernels of one head dim and dtype and their launch. Included
// only by the instantiation files bwd_d<head_dim>.cu (one a head dim, both dtypes: the files
// compile in parallel). Each run_bwd instantiates these 4 kernels, listed on purpose:
//
//   bwd_kernel<kSoftcap = false / true>   dK, dV (and dQ by atomics unless deterministic)
//   dq_kernel<kSoftcap = false / true>    dQ when deterministic=True (no atomics)
//
// Causal, windows and tails are run-time masks on the blocks that need them (as the forward);
// the atomic / deterministic dQ is a run-time branch (dq_accum null or not), not a template flag.
// 5 head dims x 2 dtypes x 4 = 40 kernels an arch.
#pragma once
#include <cuda_runtime.h>

#include "bwd.h"
#include "bwd_kernel.cuh"
#include "kp/error.cuh"
#include "kp/launch.cuh"

namespace kp_attention {

template <int HeadDim, int DType>
void run_bwd(const BwdParams& params, int device, cudaStream_t stream) {
  using Tr = bwd::Traits<HeadDim, DType>;
  using DTr = bwd::DqTraits<HeadDim, DType>;
  BwdParams p = params;
  p.n_blocks = static_cast<int>((static_cast<int64_t>(p.seqlen_k) + Tr::kBlockN - 1) / Tr::kBlockN);
  p.m_blocks = static_cast<int>((static_cast<int64_t>(p.seqlen_q) + DTr::kBlockM - 1) / DTr::kBlockM);
  const int64_t ctas = static_cast<int64_t>(p.n_blocks) * p.batch * p.heads_kv;
  const int64_t dq_ctas = static_cast<int64_t>(p.m_blocks) * p.batch * p.heads_q;
  if (ctas == 0) return;
  KP_CHECK_ARG(ctas <= 0x7fffffff && dq_ctas <= 0x7fffffff,
               "kp_attention: the backward's grid (key or query blocks x batch x heads) passes 2^31 - 1 CTAs");
  const int smem_optin = kp::device_info(device).smem_optin;
  KP_CHECK_ARG(Tr::kSmemBytes <= smem_optin && DTr::kSmemBytes <= smem_optin,
               "kp_attention: the backward at head_dim " + std::to_string(HeadDim) + " needs " +
                   std::to_string(Tr::kSmemBytes) + " bytes of shared memory a CTA; device " +
                   std::to_string(device) + " allows " + std::to_string(smem_optin));
  kp::launch(p.softcap ? &bwd::bwd_kernel<Tr, true> : &bwd::bwd_kernel<Tr, false>, device,
             dim3(static_cast<unsigned>(ctas)), dim3(Tr::kThreads), static_cast<size_t>(Tr::kSmemBytes), stream, 1, p);
  if (p.dq_accum == nullptr && dq_ctas > 0)
    kp::launch(p.softcap ? &bwd::dq_kernel<DTr, true> : &bwd::dq_kernel<DTr, false>, device,
               dim3(static_cast<unsigned>(dq_ctas)), dim3(DTr::kThreads), static_cast<size_t>(DTr::kSmemBytes),
               stream, 1, p);
}

}  // namespace kp_attention
