// kp-attention's forward kernel, FlashAttention-2 style, on sm_80 instructions (mma.sync m16n8k16,
// cp.async, ldmatrix) through CuTe:
//
//   a CTA = block_m query rows of one (sequence, query head); its q tile loads once, then the key
//   blocks its rows may see stream through one k and one v tile of shared memory, last block first:
//     wait k[n]  | load v[n] (async) | S = Q K[n]^T | (softcap, mask) |
//     wait v[n]  | load k[n-1] (async) | online softmax (fp32, exp2) | O += P V[n]
//   so each load runs under the other product's MMAs. At the end O / rowsum is stored as the
//   input dtype and lse = ln(sum exp(s)) as fp32.
//
// Masks only where needed: the key blocks that some row sees only in part (the causal diagonal,
// a window's edges, the block past seqlen_k) run the masked step; the blocks between them, seen
// whole by every row, run the step without mask or -inf guard. Blocks no row sees are skipped.
// Rows that see no key end with a zero sum: out = 0 and lse = -inf, with no NaN on the way
// (every exponent is taken against a finite shift).
//
// One template flag beside the traits' head dim and dtype: kSoftcap (s = softcap tanh(scale q.k /
// softcap), a tanh per score). Causal and windows need none: the mask compares key - row with the
// band they allow (fwd_softmax.cuh), the widest band without them, and runs on the blocks that
// need it only (FA2's Is_causal / Is_local / Is_even_MN as a per-block choice at run time, both
// loop bodies in every kernel). Negative scales (without softcap) negate the scores at run time.
#pragma once
#include <cute/tensor.hpp>

#include "fwd.h"
#include "fwd_gemm.cuh"
#include "fwd_softmax.cuh"
#include "fwd_traits.cuh"
#include "fwd_work.cuh"

namespace kp_attention::fwd {

// One key block n: S = Q K^T, the online softmax update, O += P V; `next` >= 0 is the key block
// whose k tile loads meanwhile (the loop's next), -1 for none.
template <class Tr, bool kSoftcap, bool kMask, class AccO, class Stat>
__device__ __forceinline__ void key_block(const FwdParams& p, const Work& w, const Smem<Tr>& sm, int n, int next,
                                          AccO& acc_o, Stat& m, Stat& l) {
  using namespace cute;
  using T = typename Tr::T;
  constexpr int BN = Tr::kBlockN;
  typename Tr::TiledMma mma;
  Tensor acc_s = partition_fragment_C(mma, Shape<Int<Tr::kBlockM>, Int<BN>>{});
  clear(acc_s);

  cp_async_wait<0>();  // k[n] (and, the first time, q) has landed ...
  __syncthreads();     // ... for every thread, and every warp is done reading v[n + 1]
  const int64_t key0 = static_cast<int64_t>(n) * BN;
  load_rows<Tr>(static_cast<const T*>(p.v) + w.v + key0 * p.v_row, p.v_row, w.seqlen_k - key0, sm.v());
  cp_async_fence();

  gemm_smem<Tr>(acc_s, sm.q(), sm.k());
  Tensor s = make_tensor(acc_s.data(), rows_cols(acc_s.layout()));
  if constexpr (kSoftcap) {
    CUTE_UNROLL
    for (int i = 0; i < size(s); ++i) s(i) = tanh_accurate(s(i) * p.tanh_scale);
  } else if (p.negate) {  // a negative scale: factor is |scale| log2 e, so the max still commutes
    CUTE_UNROLL
    for (int i = 0; i < size(s); ++i) s(i) = -s(i);
  }
  if constexpr (kMask) {
    auto thr = mma.get_slice(threadIdx.x);
    Tensor c = thr.partition_C(make_identity_tensor(Shape<Int<Tr::kBlockM>, Int<BN>>{}));
    Tensor coords = make_tensor(c.data(), rows_cols(c.layout()));
    mask_scores(s, coords, w.m0, static_cast<int>(key0), w.seqlen_k, band(w.diagonal, p.left, p.right));
  }

  cp_async_wait<0>();  // v[n] has landed ...
  __syncthreads();     // ... for every thread, and every warp is done reading k[n]
  if (next >= 0) {
    const int64_t next0 = static_cast<int64_t>(next) * BN;
    load_rows<Tr>(static_cast<const T*>(p.k) + w.k + next0 * p.k_row, p.k_row, w.seqlen_k - next0, sm.k());
    cp_async_fence();
  }

  Tensor o = make_tensor(acc_o.data(), rows_cols(acc_o.layout()));
  softmax_block<kMask>(s, o, m, l, p.factor);
  Tensor p16 = to_16bit<T>(acc_s);  // P rounded to the input dtype once, as the MMA takes it
  Tensor pa = make_tensor(p16.data(), scores_as_a(p16.layout()));
  gemm_pv<Tr>(acc_o, pa, sm.vt(), sm.vt_shape());
}

// out = O / rowsum as T (4-byte stores of column pairs, rows < seqlen_q), lse = ln(rowsum) + max
// in natural log, by one thread of each quad; a row that saw nothing: 0 and -inf.
template <class Tr, class AccO, class Stat>
__device__ __forceinline__ void store_out(const FwdParams& p, const Work& w, AccO& acc_o, Stat& m, Stat& l) {
  using namespace cute;
  using T = typename Tr::T;
  typename Tr::TiledMma mma;
  auto thr = mma.get_slice(threadIdx.x);
  Tensor c = thr.partition_C(make_identity_tensor(Shape<Int<Tr::kBlockM>, Int<Tr::kHeadDim>>{}));
  Tensor coords = make_tensor(c.data(), rows_cols(c.layout()));
  Tensor o = make_tensor(acc_o.data(), rows_cols(acc_o.layout()));
  T* out = static_cast<T*>(p.out) + w.out;
  CUTE_UNROLL
  for (int r = 0; r < size<0>(o); ++r) {
    const float sum = quad_sum(l(r));
    const bool seen = sum > 0.0f;  // the row's max contributes 2^0 = 1 once any key was seen
    const float inv = seen ? 1.0f / sum : 0.0f;
    const int row = w.m0 + get<0>(coords(r, 0));
    if (row >= w.seqlen_q) continue;
    T* dst = out + static_cast<int64_t>(row) * p.o_row;
    CUTE_UNROLL
    for (int j = 0; j < size<1>(o); j += 2)  // columns j, j + 1 are neighbours (one MMA tile's pair)
      *reinterpret_cast<uint32_t*>(dst + get<1>(coords(r, j))) = pack2<T>(o(r, j) * inv, o(r, j + 1) * inv);
    if ((threadIdx.x & 3) == 0)
      p.lse[w.lse + row] = seen ? (m(r) + log2f(sum)) * 0.6931471805599453f : -INFINITY;
  }
}

template <class Tr, bool kSoftcap>
__global__ void __launch_bounds__(Tr::kThreads, 1) fwd_kernel(const __grid_constant__ FwdParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800  // the host launches nothing below sm_80
  using namespace cute;
  using T = typename Tr::T;
  Work w;
  if (!locate<Tr::kBlockM>(p, w, blockIdx.x)) return;
  const int64_t last_row = (w.m0 + Tr::kBlockM < w.seqlen_q ? w.m0 + Tr::kBlockM : w.seqlen_q) - 1;
  const KeyBlocks kb = key_blocks<Tr::kBlockN>(w.m0, last_row, w.seqlen_k, w.diagonal, p.left, p.right);

  typename Tr::TiledMma mma;
  Tensor acc_o = partition_fragment_C(mma, Shape<Int<Tr::kBlockM>, Int<Tr::kHeadDim>>{});
  clear(acc_o);
  constexpr int kRows = decltype(size<0>(rows_cols(acc_o.layout())))::value;  // rows a thread holds
  Tensor m = make_tensor<float>(Shape<Int<kRows>>{});  // running max, exp2 units
  Tensor l = make_tensor<float>(Shape<Int<kRows>>{});  // this thread's share of the row sum
  fill(m, -INFINITY);
  clear(l);

  if (kb.hi > kb.lo) {
    extern __shared__ __align__(128) char smem[];
    const Smem<Tr> sm{reinterpret_cast<T*>(smem)};
    const int64_t first = static_cast<int64_t>(kb.hi - 1) * Tr::kBlockN;
    load_rows<Tr>(static_cast<const T*>(p.q) + w.q + static_cast<int64_t>(w.m0) * p.q_row, p.q_row,
                  w.seqlen_q - w.m0, sm.q());
    load_rows<Tr>(static_cast<const T*>(p.k) + w.k + first * p.k_row, p.k_row, w.seqlen_k - first, sm.k());
    cp_async_fence();
    for (int n = kb.hi - 1; n >= kb.lo; --n) {
      const int next = n > kb.lo ? n - 1 : -1;
      if (n >= kb.mid_hi || n < kb.mid_lo)
        key_block<Tr, kSoftcap, true>(p, w, sm, n, next, acc_o, m, l);
      else
        key_block<Tr, kSoftcap, false>(p, w, sm, n, next, acc_o, m, l);
    }
  }
  locate<Tr::kBlockM>(p, w, cta_again());  // the epilogue's offsets, recomputed (fwd_work.cuh)
  store_out<Tr>(p, w, acc_o, m, l);
#endif
}

}  // namespace kp_attention::fwd
