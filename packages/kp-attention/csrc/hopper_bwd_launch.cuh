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
#include <type_traits>

#include "hopper_bwd.h"
#include "hopper_bwd_kernel.cuh"
#include "bwd_rows.cuh"  // from_float2
#include "hopper_tma.h"
#include "kp/error.cuh"
#include "kp/launch.cuh"

namespace kp_attention {

namespace hopper_bwd {

// The GQA split's scratch to dk (times scale), dv in the input dtype: acc holds dk's n2 pairs, then
// dv's. T2: __half2 or __nv_bfloat162.
template <class T2>
__global__ void __launch_bounds__(256) dkv_convert_kernel(const float* acc, T2* dk, T2* dv, int64_t n2, float scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x; i < n2;
       i += static_cast<int64_t>(gridDim.x) * 256) {
    const float2 a = reinterpret_cast<const float2*>(acc)[i];
    const float2 b = reinterpret_cast<const float2*>(acc)[n2 + i];
    dk[i] = bwd::from_float2(a.x * scale, a.y * scale, static_cast<T2*>(nullptr));
    dv[i] = bwd::from_float2(b.x, b.y, static_cast<T2*>(nullptr));
  }
}

}  // namespace hopper_bwd

template <int HeadDim, int DType>
bool run_hopper_bwd(const BwdParams& params, const HopperBwdExtra& x, int device, cudaStream_t stream) {
  using namespace cute;
  using Tr = hopper_bwd::Traits<HeadDim, DType>;
  using hopper::Dim;
  constexpr int kElem = sizeof(typename Tr::T);
  BwdParams p = params;
  const bool varlen = p.cu_q != nullptr;
  // q, dO: (rows, d, heads, batch); varlen: the packed rows of every sequence as one batch.
  const int64_t q_rows = varlen ? x.total_q : p.seqlen_q;
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
  const int64_t ctas_whole = static_cast<int64_t>(p.n_blocks) * p.batch * p.heads_kv;  // a group a CTA
  if (ctas_whole == 0) return true;
  // The GQA split (hopper_bwd.h): the fewest CTAs a group that give 8 CTAs an SM.
  int splits = 1;
  if (x.dkv_accum != nullptr) {
    const int64_t want = 8 * static_cast<int64_t>(kp::device_info(device).sms);
    while (splits < p.group && ctas_whole * splits < want) {
      ++splits;
      while (p.group % splits != 0) ++splits;
    }
  }
  const int64_t ctas = ctas_whole * splits;
  KP_CHECK_ARG(ctas <= 0x7fffffff, "kp_attention: the backward's grid (key blocks of " +
                                       std::to_string(Tr::kBlockN) + " x batch x heads_kv) passes 2^31 - 1 CTAs");
  const int64_t dk_elems = (varlen ? x.total_k : static_cast<int64_t>(p.batch) * p.seqlen_k) * p.heads_kv * HeadDim;
  if (splits > 1) KP_CHECK_CUDA(cudaMemsetAsync(x.dkv_accum, 0, 2 * dk_elems * sizeof(float), stream));
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
  hp.dkv_accum = splits > 1 ? x.dkv_accum : nullptr;
  hp.dv_offset = dk_elems;
  hp.kv_splits = splits;
  hp.heads_per_cta = p.group / splits;
  auto kernel = p.softcap ? &hopper_bwd::hopper_bwd_kernel<Tr, true> : &hopper_bwd::hopper_bwd_kernel<Tr, false>;
  kp::launch(kernel, device, dim3(static_cast<unsigned>(ctas)), dim3(Tr::kThreads),
             static_cast<size_t>(Tr::kSmemBytes), stream, 1, hp);
  if (splits > 1) {
    using T2 = std::conditional_t<DType == kp::kBF16, __nv_bfloat162, __half2>;
    const int64_t n2 = dk_elems / 2;
    const unsigned blocks = static_cast<unsigned>((n2 + 255) / 256 < 65536 ? (n2 + 255) / 256 : 65536);
    kp::launch(&hopper_bwd::dkv_convert_kernel<T2>, device, dim3(blocks), dim3(256), 0, stream, 1,
               static_cast<const float*>(x.dkv_accum), static_cast<T2*>(p.dk), static_cast<T2*>(p.dv), n2, p.scale);
  }
  return true;
}

}  // namespace kp_attention
