// run_hopper_bwd<HeadDim, DType>: the TMA descriptors of one call and the launch of the Hopper
// backward (hopper_bwd_kernel.cuh). Included only by hopper_bwd_d<D>.cu. Each instantiation lists
// these 2 kernels, like the forward (hopper_fwd_launch.cuh):
//
//   kSoftcap = false   every call without softcap (causal, windows, tails: masked blocks at run time)
//   kSoftcap = true    softcap > 0
//
// 2 head dims x 2 dtypes x 2 = 8 kernels (sm_90a code only; other archs compile empty stubs).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "hopper_bwd.h"
#include "hopper_bwd_kernel.cuh"
#include "hopper_tma.h"
#include "kp/error.cuh"
#include "kp/launch.cuh"

namespace kp_attention {

template <int HeadDim, int DType>
bool run_hopper_bwd(const BwdParams& params, int64_t total_q, int device, cudaStream_t stream) {
  using namespace cute;
  using Tr = hopper_bwd::Traits<HeadDim, DType>;
  using hopper::Dim;
  constexpr int kElem = sizeof(typename Tr::T);
  BwdParams p = params;
  const bool varlen = p.cu_q != nullptr;
  // q, dO: (rows, d, heads, batch); varlen: the packed rows of every sequence as one batch.
  const int64_t q_rows = varlen ? total_q : p.seqlen_q;
  Dim q[3] = {{q_rows, p.q_row}, {p.heads_q, p.q_head}, {varlen ? 1 : p.batch, p.q_batch}};
  Dim dout[3] = {{q_rows, p.do_row}, {p.heads_q, p.do_head}, {varlen ? 1 : p.batch, p.do_batch}};
  // k, v: varlen does not pass k's row count; TMA reads only blocks inside their sequence (a block
  // that reaches past its end is copied with cp.async), so the extent is the largest legal.
  const int64_t k_rows = varlen ? (int64_t{1} << 31) - 1 : p.seqlen_k;
  Dim k[3] = {{k_rows, p.k_row}, {p.heads_kv, p.k_head}, {varlen ? 1 : p.batch, p.k_batch}};
  Dim v[3] = {{k_rows, p.v_row}, {p.heads_kv, p.v_head}, {varlen ? 1 : p.batch, p.v_batch}};
  if (!hopper::tma_ok(p.q, kElem, q, 3, HeadDim) || !hopper::tma_ok(p.dout, kElem, dout, 3, HeadDim) ||
      !hopper::tma_ok(p.k, kElem, k, 3, HeadDim) || !hopper::tma_ok(p.v, kElem, v, 3, HeadDim))
    return false;

  p.n_blocks = static_cast<int>((static_cast<int64_t>(p.seqlen_k) + Tr::kBlockN - 1) / Tr::kBlockN);
  const int64_t ctas = static_cast<int64_t>(p.n_blocks) * p.batch * p.heads_kv;
  if (ctas == 0) return true;
  KP_CHECK_ARG(ctas <= 0x7fffffff, "kp_attention: the backward's grid (key blocks of " +
                                       std::to_string(Tr::kBlockN) + " x batch x heads_kv) passes 2^31 - 1 CTAs");
  auto layout = [](const Dim* d) {
    return typename Tr::GLayout(
        make_shape(static_cast<int32_t>(d[0].extent), int32_t{HeadDim}, static_cast<int32_t>(d[1].extent),
                   static_cast<int32_t>(d[2].extent)),
        make_stride(d[0].stride, Int<1>{}, d[1].stride, d[2].stride));
  };
  hopper_bwd::Params<Tr> hp{};
  hp.tma_q = make_tma_copy(SM90_TMA_LOAD{}, Tr::gtensor(p.q, layout(q)), typename Tr::SmemQStage{});
  hp.tma_do = make_tma_copy(SM90_TMA_LOAD{}, Tr::gtensor(p.dout, layout(dout)), typename Tr::SmemQStage{});
  hp.tma_k = make_tma_copy(SM90_TMA_LOAD{}, Tr::gtensor(p.k, layout(k)), typename Tr::SmemKV{});
  hp.tma_v = make_tma_copy(SM90_TMA_LOAD{}, Tr::gtensor(p.v, layout(v)), typename Tr::SmemKV{});
  hp.p = p;
  hp.q_rows = static_cast<int32_t>(q[0].extent), hp.q_batches = static_cast<int32_t>(q[2].extent);
  hp.k_rows = static_cast<int32_t>(k[0].extent), hp.k_batches = static_cast<int32_t>(k[2].extent);
  auto kernel = p.softcap ? &hopper_bwd::hopper_bwd_kernel<Tr, true> : &hopper_bwd::hopper_bwd_kernel<Tr, false>;
  kp::launch(kernel, device, dim3(static_cast<unsigned>(ctas)), dim3(Tr::kThreads),
             static_cast<size_t>(Tr::kSmemBytes), stream, 1, hp);
  return true;
}

}  // namespace kp_attention
