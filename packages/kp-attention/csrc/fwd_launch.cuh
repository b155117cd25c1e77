// run_fwd<HeadDim, DType>: the forward kernels of one head dim and dtype and their launch. Included
// only by the instantiation files fwd_d<head_dim>.cu (one a head dim, both dtypes: the files
// compile in parallel). Each run_fwd instantiates these 2 kernels, listed on purpose:
//
//   kSoftcap = false   every call without softcap (causal, windows, tails: fwd_kernel.cuh)
//   kSoftcap = true    softcap > 0 (a tanh per score)
//
// 5 head dims x 2 dtypes x 2 = 20 kernels an arch. A causal / window flag (4 kernels a file) would
// save two integer compares per score of the masked blocks only, and doubled the build.
#pragma once
#include <cuda_runtime.h>

#include "fwd.h"
#include "fwd_kernel.cuh"
#include "kp/error.cuh"
#include "kp/launch.cuh"

namespace kp_attention {

namespace fwd {
template <class Tr>
using KernelFn = void (*)(FwdParams);

template <class Tr>
KernelFn<Tr> pick(bool softcap) {
  return softcap ? &fwd_kernel<Tr, true> : &fwd_kernel<Tr, false>;
}
}  // namespace fwd

template <int HeadDim, int DType>
void run_fwd(const FwdParams& params, int device, cudaStream_t stream) {
  using Tr = fwd::Traits<HeadDim, DType>;
  FwdParams p = params;
  p.m_blocks = static_cast<int>((static_cast<int64_t>(p.seqlen_q) + Tr::kBlockM - 1) / Tr::kBlockM);
  const int64_t ctas = static_cast<int64_t>(p.m_blocks) * p.batch * p.heads_q;
  if (ctas == 0) return;
  KP_CHECK_ARG(ctas <= 0x7fffffff, "kp_attention: " + std::to_string(ctas) + " CTAs (query blocks of " +
                                       std::to_string(Tr::kBlockM) + " rows x batch x heads_q) pass a grid's 2^31 - 1");
  const int smem_optin = kp::device_info(device).smem_optin;
  KP_CHECK_ARG(Tr::kSmemBytes <= smem_optin,
               "kp_attention: head_dim " + std::to_string(HeadDim) + " needs " + std::to_string(Tr::kSmemBytes) +
                   " bytes of shared memory a CTA; device " + std::to_string(device) + " allows " +
                   std::to_string(smem_optin));
  kp::launch(fwd::pick<Tr>(p.softcap), device, dim3(static_cast<unsigned>(ctas)),
             dim3(Tr::kThreads), static_cast<size_t>(Tr::kSmemBytes), stream, 1, p);
}

template <int HeadDim, int DType>
const void* fwd_kernel_ptr() {
  return reinterpret_cast<const void*>(fwd::pick<fwd::Traits<HeadDim, DType>>(false));
}

}  // namespace kp_attention
