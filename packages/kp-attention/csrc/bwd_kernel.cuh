// kp-attention's backward kernels, FlashAttention-2 style, on sm_80 instructions through CuTe.
//
// delta = rowsum(dO * O) comes first (bwd_rows.cuh, launched by bwd.cu), and zeroes dq_accum.
//
// Main kernel (bwd_kernel): a CTA = block_n keys of one (sequence, kv head). Its k and v tiles load
// once; then, for each query head of its GQA group and each query block that sees any of its keys
// (the mirror of the forward's key_blocks: mask-free middle, masked edges), one step:
//   wait q, dO | S = Q K^T, dP = dO V^T | P = 2^(s factor - lse log2 e), dS = P (dP - delta)
//   (softcap: dS (1 - t^2)) -> P, dS to smem | dV += P^T dO, dK += dS^T Q (fp32 registers)
//   | load the next q, dO (async) | dQ = dS K, added to dq_accum with fp32 atomics
// dK and dV are summed over the whole group in registers (a fixed order: deterministic) and stored
// once, dK times scale, in the input dtype. Keys no row sees get zeros.
//
// deterministic=True (dq_accum == nullptr): the main kernel skips dQ and dq_kernel, a CTA a query
// block, streams the key blocks its rows see like the forward, recomputing S, dP and dS, and
// writes dq = scale dS K without atomics.
//
// Rows that see no key have lse = -inf: their exponent is taken against +inf, so P = 0 and dS = 0
// (no -inf - -inf). Rows past seqlen_q likewise (never stored); keys past seqlen_k are masked.
#pragma once
#include <cute/tensor.hpp>

#include "bwd.h"
#include "bwd_traits.cuh"
#include "fwd_gemm.cuh"
#include "fwd_softmax.cuh"
#include "fwd_work.cuh"

namespace kp_attention::bwd {

using fwd::Band;

// acc += A B^T with A [M, K] and B [N, K] in shared memory, each read with its own ldmatrix atom
// (N: K-contiguous tiles; T: the transposed views). `fa`, `fb`: the tensors whose (unswizzled)
// shapes make the register fragments. kPrefetch: each k-step's fragments load one step ahead of
// its MMAs (else just before them: fewer live registers).
template <class Mma, class AtomA, class AtomB, bool kPrefetch = true, class Acc, class SA, class FA, class SB, class FB>
__device__ __forceinline__ void gemm_ss(Acc& acc, SA const& sA, FA const& fa, SB const& sB, FB const& fb) {
  using namespace cute;
  Mma mma;
  const int tid = threadIdx.x;
  auto thr = mma.get_slice(tid);
  Tensor rA = thr.partition_fragment_A(fa);
  Tensor rB = thr.partition_fragment_B(fb);
  auto copy_a = make_tiled_copy_A(AtomA{}, mma);
  auto copy_b = make_tiled_copy_B(AtomB{}, mma);
  auto ta = copy_a.get_thread_slice(tid);
  auto tb = copy_b.get_thread_slice(tid);
  Tensor sa = ta.partition_S(sA);
  Tensor ra = ta.retile_D(rA);
  Tensor sb = tb.partition_S(sB);
  Tensor rb = tb.retile_D(rB);
  constexpr int kSteps = decltype(size<2>(rA))::value;
  if constexpr (kPrefetch) {
    cute::copy(copy_a, sa(_, _, 0), ra(_, _, 0));
    cute::copy(copy_b, sb(_, _, 0), rb(_, _, 0));
  }
  CUTE_UNROLL
  for (int k = 0; k < kSteps; ++k) {
    if (!kPrefetch) {
      cute::copy(copy_a, sa(_, _, k), ra(_, _, k));
      cute::copy(copy_b, sb(_, _, k), rb(_, _, k));
    } else if (k + 1 < kSteps) {
      cute::copy(copy_a, sa(_, _, k + 1), ra(_, _, k + 1));
      cute::copy(copy_b, sb(_, _, k + 1), rb(_, _, k + 1));
    }
    cute::gemm(mma, rA(_, _, k), rB(_, _, k), acc);
  }
}

// Where a sequence's rows start (element offsets at head 0) and its lengths.
struct Seq {
  int64_t q, k, v, dout, o, dk, lse;
  int64_t diagonal;
  int seqlen_q, seqlen_k;
};

__device__ __forceinline__ void locate_seq(const BwdParams& p, int64_t b, Seq& s) {
  if (p.cu_q != nullptr) {
    const int q0 = p.cu_q[b], k0 = p.cu_k[b];
    s.seqlen_q = p.cu_q[b + 1] - q0;
    s.seqlen_k = p.cu_k[b + 1] - k0;
    s.diagonal = static_cast<int64_t>(s.seqlen_k) - s.seqlen_q;
    s.q = q0 * p.q_row, s.dout = q0 * p.do_row, s.o = q0 * p.o_row, s.lse = q0;
    s.k = k0 * p.k_row, s.v = k0 * p.v_row, s.dk = k0 * p.dk_row;
  } else {
    s.seqlen_q = p.seqlen_q, s.seqlen_k = p.seqlen_k, s.diagonal = p.diagonal;
    s.q = b * p.q_batch, s.dout = b * p.do_batch, s.o = b * p.o_batch, s.lse = b * p.lse_batch;
    s.k = b * p.k_batch, s.v = b * p.v_batch, s.dk = b * p.dk_batch;
  }
}

// lse in exp2 units, +inf for a row that sees no key (lse = -inf): 2^(x - inf) = 0, never NaN.
__device__ __forceinline__ float lse_exp2(float lse) {
  return lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
}

// One row of scores s (raw q.k, fp32) and dP: s becomes P, dp becomes dS = P (dP - delta), times
// (1 - t^2) under softcap. `fs`: factor, negated for a negative scale without softcap.
template <bool kSoftcap, bool kMask, class S, class DP, class C>
__device__ __forceinline__ void grad_row(S& s, DP& dp, C const& coords, int r, int row, float lse2, float delta,
                                         int n0, int seqlen_k, Band bd, float fs, float tanh_scale) {
  CUTE_UNROLL
  for (int c = 0; c < cute::size<1>(s); ++c) {
    float x = s(r, c);
    float t = 0.0f;
    if constexpr (kSoftcap) {
      t = fwd::tanh_accurate(x * tanh_scale);
      x = t;
    }
    float pr = fwd::exp2_fast(fmaf(x, fs, -lse2));
    if constexpr (kMask) {
      if (!fwd::sees(row, n0 + cute::get<1>(coords(r, c)), seqlen_k, bd)) pr = 0.0f;
    }
    s(r, c) = pr;
    float ds = pr * (dp(r, c) - delta);
    if constexpr (kSoftcap) ds *= 1.0f - t * t;
    dp(r, c) = ds;
  }
}

// The fp32 accumulator of S or dP [block_m, block_n] in `mma`'s layout, zeroed.
template <class Tr, class Mma>
__device__ __forceinline__ auto scores_acc(Mma const& mma) {
  using namespace cute;
  Tensor acc = partition_fragment_C(mma, Shape<Int<Tr::kBlockM>, Int<Tr::kBlockN>>{});
  clear(acc);
  return acc;
}

// S (raw q.k) and dP of one block (rows m0.., keys n0..) in the layout of `thr` (this thread's
// slice of their MMA) become P and dS in place: grad_row over this thread's rows. lse2_of(r, lr),
// delta_of(r, lr): the row's lse (exp2 units) and delta, by fragment row r or block row lr.
template <class Tr, bool kSoftcap, bool kMask, class Thr, class AccS, class AccDp, class Lse2, class Delta>
__device__ __forceinline__ void grad_block(const BwdParams& p, Thr const& thr, AccS& acc_s, AccDp& acc_dp, int m0,
                                           int n0, int seqlen_k, Band bd, Lse2 const& lse2_of,
                                           Delta const& delta_of) {
  using namespace cute;
  Tensor c = thr.partition_C(make_identity_tensor(Shape<Int<Tr::kBlockM>, Int<Tr::kBlockN>>{}));
  Tensor coords = make_tensor(c.data(), fwd::rows_cols(c.layout()));
  Tensor s = make_tensor(acc_s.data(), fwd::rows_cols(acc_s.layout()));
  Tensor dp = make_tensor(acc_dp.data(), fwd::rows_cols(acc_dp.layout()));
  const float fs = p.negate ? -p.factor : p.factor;
  CUTE_UNROLL
  for (int r = 0; r < size<0>(s); ++r) {
    const int lr = get<0>(coords(r, 0));
    grad_row<kSoftcap, kMask>(s, dp, coords, r, m0 + lr, lse2_of(r, lr), delta_of(r, lr), n0, seqlen_k, bd, fs,
                              p.tanh_scale);
  }
}

// ------------------------------------------------------------------------------------------------
// The main kernel.

template <class Tr>
struct Smem {
  using T = typename Tr::T;
  static constexpr int M = Tr::kBlockM, N = Tr::kBlockN, D = Tr::kHeadDim;
  T* base;
  template <class L>
  __device__ __forceinline__ auto at(int offset, L const& l) const {
    return cute::make_tensor(cute::make_smem_ptr(base + offset), l);
  }
  __device__ __forceinline__ auto q() const { return at(0, typename Tr::SmemQ{}); }
  __device__ __forceinline__ auto dout() const { return at(M * D, typename Tr::SmemQ{}); }
  __device__ __forceinline__ auto k() const { return at(2 * M * D, typename Tr::SmemKV{}); }
  __device__ __forceinline__ auto v() const { return at(2 * M * D + N * D, typename Tr::SmemKV{}); }
  __device__ __forceinline__ auto p() const { return at(2 * (M + N) * D, typename Tr::SmemPdS{}); }
  __device__ __forceinline__ auto ds() const { return at(2 * (M + N) * D + M * N, typename Tr::SmemPdS{}); }
  __device__ __forceinline__ float* lse() const { return reinterpret_cast<float*>(base + 2 * (M + N) * D + 2 * M * N); }
  __device__ __forceinline__ float* delta() const { return lse() + M; }
  // transposed views and the shapes of their fragments
  __device__ __forceinline__ auto qt() const { return at(0, typename Tr::SmemQt{}); }
  __device__ __forceinline__ auto doutt() const { return at(M * D, typename Tr::SmemQt{}); }
  __device__ __forceinline__ auto qt_shape() const { return at(0, Unswizzled<typename Tr::SmemQt>{}); }
  __device__ __forceinline__ auto kt() const { return at(2 * M * D, typename Tr::SmemKt{}); }
  __device__ __forceinline__ auto kt_shape() const { return at(2 * M * D, Unswizzled<typename Tr::SmemKt>{}); }
  __device__ __forceinline__ auto pt() const { return at(2 * (M + N) * D, typename Tr::SmemPdSt{}); }
  __device__ __forceinline__ auto dst() const { return at(2 * (M + N) * D + M * N, typename Tr::SmemPdSt{}); }
  __device__ __forceinline__ auto pt_shape() const {
    return at(2 * (M + N) * D, Unswizzled<typename Tr::SmemPdSt>{});
  }
};

// S, dP, then P and dS of one query block (rows m0..) against the CTA's keys (n0..), to smem.
template <class Tr, bool kSoftcap, bool kMask>
__device__ __forceinline__ void step(const BwdParams& p, const Smem<Tr>& sm, int m0, int n0, int seqlen_k, Band bd) {
  using namespace cute;
  using T = typename Tr::T;
  typename Tr::MmaSdp mma;
  Tensor acc_s = scores_acc<Tr>(mma);
  Tensor acc_dp = scores_acc<Tr>(mma);
  gemm_ss<typename Tr::MmaSdp, typename Tr::LdsmN, typename Tr::LdsmN>(acc_s, sm.q(), sm.q(), sm.k(), sm.k());
  gemm_ss<typename Tr::MmaSdp, typename Tr::LdsmN, typename Tr::LdsmN>(acc_dp, sm.dout(), sm.dout(), sm.v(), sm.v());
  const int tid = threadIdx.x;
  grad_block<Tr, kSoftcap, kMask>(
      p, mma.get_slice(tid), acc_s, acc_dp, m0, n0, seqlen_k, bd,
      [&](int, int lr) { return lse_exp2(sm.lse()[lr]); }, [&](int, int lr) { return sm.delta()[lr]; });
  Tensor p16 = fwd::to_16bit<T>(acc_s);
  Tensor ds16 = fwd::to_16bit<T>(acc_dp);
  auto r2s = make_tiled_copy_C(typename Tr::StoreC{}, mma);
  auto tr = r2s.get_thread_slice(tid);
  cute::copy(r2s, tr.retile_S(p16), tr.partition_D(sm.p()));
  cute::copy(r2s, tr.retile_S(ds16), tr.partition_D(sm.ds()));
}

// f(a, coords, r, row) for each of this thread's rows r of an fp32 accumulator [R, C] in `Mma`'s
// layout whose block row `row` is below `rows`; a: the accumulator as rows x columns, coords: the
// (row, column) of each of its values.
template <class Mma, int R, int C, class Acc, class F>
__device__ __forceinline__ void each_row(Acc& acc, int rows, F const& f) {
  using namespace cute;
  Mma mma;
  auto thr = mma.get_slice(threadIdx.x);
  Tensor c = thr.partition_C(make_identity_tensor(Shape<Int<R>, Int<C>>{}));
  Tensor coords = make_tensor(c.data(), fwd::rows_cols(c.layout()));
  Tensor a = make_tensor(acc.data(), fwd::rows_cols(acc.layout()));
  CUTE_UNROLL
  for (int r = 0; r < size<0>(a); ++r) {
    const int row = get<0>(coords(r, 0));
    if (row >= rows) continue;
    f(a, coords, r, row);
  }
}

// dQ = dS K of one query block (dS, K from smem), added to dq_accum (fp32 atomics; the caller
// scales once when converting).
template <class Tr>
__device__ __forceinline__ void dq_atomic(float* dst, int64_t row_stride, int rows, const Smem<Tr>& sm) {
  using namespace cute;
  typename Tr::MmaDq mma;
  Tensor acc = partition_fragment_C(mma, Shape<Int<Tr::kBlockM>, Int<Tr::kHeadDim>>{});
  clear(acc);
  gemm_ss<typename Tr::MmaDq, typename Tr::LdsmN, typename Tr::LdsmT>(acc, sm.ds(), sm.ds(), sm.kt(), sm.kt_shape());
  each_row<typename Tr::MmaDq, Tr::kBlockM, Tr::kHeadDim>(acc, rows, [&](auto& a, auto const& coords, int r, int row) {
    float* d = dst + row * row_stride;
    CUTE_UNROLL
    for (int j = 0; j < size<1>(a); ++j) atomicAdd(d + get<1>(coords(r, j)), a(r, j));
  });
}

// An fp32 accumulator [rows, d] of `Mma`'s layout times `mul`, as T at dst (rows < `rows`), 4-byte
// stores of column pairs.
template <class Mma, int R, int D, class T, class Acc>
__device__ __forceinline__ void store_rows(Acc& acc, T* dst, int64_t row_stride, int rows, float mul) {
  using namespace cute;
  each_row<Mma, R, D>(acc, rows, [&](auto& a, auto const& coords, int r, int row) {
    T* d = dst + row * row_stride;
    CUTE_UNROLL
    for (int j = 0; j < size<1>(a); j += 2)
      *reinterpret_cast<uint32_t*>(d + get<1>(coords(r, j))) = fwd::pack2<T>(a(r, j) * mul, a(r, j + 1) * mul);
  });
}

// A main-kernel CTA's sequence, kv head and first key, from blockIdx.x read again (fwd_work.cuh
// cta_again): recomputed where needed rather than kept live across the query-block loop (at 255
// registers the 64-bit offsets spilled).
struct Where {
  Seq s;
  int hk, n0;
};
template <int kBlockN>
__device__ __forceinline__ void where(const BwdParams& p, Where& w) {
  const unsigned cta = static_cast<unsigned>(fwd::cta_again());  // < 2^31 (run_bwd checks)
  const unsigned bh = cta / static_cast<unsigned>(p.n_blocks);
  w.n0 = static_cast<int>(cta - bh * static_cast<unsigned>(p.n_blocks)) * kBlockN;
  const unsigned b = bh / static_cast<unsigned>(p.heads_kv);
  w.hk = static_cast<int>(bh - b * static_cast<unsigned>(p.heads_kv));
  locate_seq(p, b, w.s);
}

// Start the loads of query block m of query head h (async; the caller fences): q, dO, and the
// block's rows of lse and delta (raw: step() takes lse to exp2 units; rows past seqlen_q read as 0,
// harmless: their q and dO are zeros, so they add nothing to dK, dV, and dQ skips them).
template <class Tr>
__device__ __forceinline__ void issue(const BwdParams& p, const Smem<Tr>& sm, int h, int m) {
  using T = typename Tr::T;
  Where w;
  where<Tr::kBlockN>(p, w);
  const int m0 = m * Tr::kBlockM;
  fwd::load_rows<Tr>(static_cast<const T*>(p.q) + w.s.q + h * p.q_head + static_cast<int64_t>(m0) * p.q_row, p.q_row,
                     w.s.seqlen_q - m0, sm.q());
  fwd::load_rows<Tr>(static_cast<const T*>(p.dout) + w.s.dout + h * p.do_head + static_cast<int64_t>(m0) * p.do_row,
                     p.do_row, w.s.seqlen_q - m0, sm.dout());
  if (threadIdx.x < 2 * Tr::kBlockM) {  // lse by threads 0 .. block_m - 1, delta by the next block_m
    using Op = cute::SM80_CP_ASYNC_CACHEALWAYS_ZFILL<uint32_t>;
    const bool is_lse = threadIdx.x < Tr::kBlockM;
    const int i = is_lse ? threadIdx.x : threadIdx.x - Tr::kBlockM;
    const int row = m0 + i;
    const float* src = (is_lse ? p.lse : p.delta) + w.s.lse + h * p.lse_head + (row < w.s.seqlen_q ? row : 0);
    float* dst = (is_lse ? sm.lse() : sm.delta()) + i;
    Op::copy(*reinterpret_cast<const uint32_t*>(src), *reinterpret_cast<uint32_t*>(dst), row < w.s.seqlen_q);
  }
}

template <class Tr, bool kSoftcap>
__global__ void __launch_bounds__(Tr::kThreads, 1) bwd_kernel(const __grid_constant__ BwdParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace cute;
  using T = typename Tr::T;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, D = Tr::kHeadDim;
  // key blocks fastest (neighbouring CTAs read the same q, dO from L2), block 0 first: under a
  // causal mask it is seen by the most query blocks
  typename Tr::MmaKV mma_kv;
  Tensor acc_dk = partition_fragment_C(mma_kv, Shape<Int<BN>, Int<D>>{});
  Tensor acc_dv = partition_fragment_C(mma_kv, Shape<Int<BN>, Int<D>>{});
  clear(acc_dk);
  clear(acc_dv);
  {
    Where w;
    where<BN>(p, w);
    const int n0 = w.n0, seqlen_k = w.s.seqlen_k;
    if (n0 >= seqlen_k) return;  // varlen: past this sequence's keys
    const int last_key = (n0 + BN < seqlen_k ? n0 + BN : seqlen_k) - 1;
    // The query blocks that see keys n0..last_key: the forward's key_blocks with rows and keys
    // swapped (i - j in [-diagonal - right, -diagonal + left]).
    fwd::KeyBlocks qb = fwd::key_blocks<BM>(n0, last_key, w.s.seqlen_q, -w.s.diagonal, p.right, p.left);
    if (n0 + BN > seqlen_k) qb.mid_hi = qb.mid_lo;  // keys past the end: every block masked
    if (qb.hi > qb.lo) {
      extern __shared__ __align__(128) char smem[];
      const Smem<Tr> sm{reinterpret_cast<T*>(smem)};
      fwd::load_rows<Tr>(static_cast<const T*>(p.k) + w.s.k + w.hk * p.k_head + static_cast<int64_t>(n0) * p.k_row,
                         p.k_row, seqlen_k - n0, sm.k());
      fwd::load_rows<Tr>(static_cast<const T*>(p.v) + w.s.v + w.hk * p.v_head + static_cast<int64_t>(n0) * p.v_row,
                         p.v_row, seqlen_k - n0, sm.v());
      const Band bd = fwd::band(w.s.diagonal, p.left, p.right);
      const int h_end = (w.hk + 1) * p.group;
      int h = w.hk * p.group, m = qb.lo;
      issue<Tr>(p, sm, h, m);
      cute::cp_async_fence();
      for (;;) {
        int h_next = h, m_next = m + 1;  // the query heads of the group in turn, each over qb
        if (m_next == qb.hi) m_next = qb.lo, ++h_next;
        const bool more = h_next < h_end;
        cp_async_wait<0>();
        __syncthreads();  // q, dO, lse, delta (and k, v) landed; the last step's dQ is done
        if (m >= qb.mid_lo && m < qb.mid_hi)
          step<Tr, kSoftcap, false>(p, sm, m * BM, n0, seqlen_k, bd);
        else
          step<Tr, kSoftcap, true>(p, sm, m * BM, n0, seqlen_k, bd);
        __syncthreads();  // P, dS in smem
        gemm_ss<typename Tr::MmaKV, typename Tr::LdsmT, typename Tr::LdsmT>(acc_dv, sm.pt(), sm.pt_shape(),
                                                                           sm.doutt(), sm.qt_shape());
        gemm_ss<typename Tr::MmaKV, typename Tr::LdsmT, typename Tr::LdsmT>(acc_dk, sm.dst(), sm.pt_shape(), sm.qt(),
                                                                           sm.qt_shape());
        __syncthreads();  // every warp is done with q, dO
        if (more) {
          issue<Tr>(p, sm, h_next, m_next);
          cute::cp_async_fence();
        }
        if (p.dq_accum != nullptr) {
          Where x;
          where<BN>(p, x);
          const int m0 = m * BM;
          dq_atomic<Tr>(p.dq_accum + x.s.o + h * D + static_cast<int64_t>(m0) * p.o_row, p.o_row,
                        x.s.seqlen_q - m0, sm);
        }
        if (!more) break;
        h = h_next, m = m_next;
      }
    }
  }
  Where w;  // the epilogue's offsets, recomputed
  where<BN>(p, w);
  T* dk = static_cast<T*>(p.dk) + w.s.dk + w.hk * D + static_cast<int64_t>(w.n0) * p.dk_row;
  T* dv = static_cast<T*>(p.dv) + w.s.dk + w.hk * D + static_cast<int64_t>(w.n0) * p.dk_row;
  store_rows<typename Tr::MmaKV, BN, D>(acc_dk, dk, p.dk_row, w.s.seqlen_k - w.n0, p.scale);
  store_rows<typename Tr::MmaKV, BN, D>(acc_dv, dv, p.dk_row, w.s.seqlen_k - w.n0, 1.0f);
#endif
}

// ------------------------------------------------------------------------------------------------
// The deterministic dq kernel.

template <class Tr>
struct DqSmem {
  using T = typename Tr::T;
  static constexpr int M = Tr::kBlockM, N = Tr::kBlockN, D = Tr::kHeadDim;
  T* base;
  __device__ __forceinline__ auto q() const {
    return cute::make_tensor(cute::make_smem_ptr(base), typename Tr::SmemQ{});
  }
  __device__ __forceinline__ auto dout() const {
    return cute::make_tensor(cute::make_smem_ptr(base + M * D), typename Tr::SmemQ{});
  }
  __device__ __forceinline__ auto v() const {
    return cute::make_tensor(cute::make_smem_ptr(base + 2 * M * D), typename Tr::SmemKV{});
  }
  __device__ __forceinline__ T* k_base(int buf) const { return base + 2 * M * D + (1 + buf) * N * D; }
  __device__ __forceinline__ auto k(int buf) const {
    return cute::make_tensor(cute::make_smem_ptr(k_base(buf)), typename Tr::SmemKV{});
  }
  __device__ __forceinline__ auto kt(int buf) const {
    return cute::make_tensor(cute::make_smem_ptr(k_base(buf)), typename Tr::SmemVt{});
  }
  __device__ __forceinline__ auto kt_shape(int buf) const {
    return cute::make_tensor(cute::make_smem_ptr(k_base(buf)), typename Tr::SmemVtShape{});
  }
};

template <class Tr, bool kSoftcap, bool kMask, class AccDq, class Stat>
__device__ __forceinline__ void dq_step(const BwdParams& p, const DqSmem<Tr>& sm, int buf, int m0, int n0,
                                        int seqlen_k, Band bd, Stat const& lse2, Stat const& delta, AccDq& acc_dq,
                                        int next, const Seq& s, int hk) {
  using namespace cute;
  using T = typename Tr::T;
  typename Tr::TiledMma mma;
  Tensor acc_s = scores_acc<Tr>(mma);
  Tensor acc_dp = scores_acc<Tr>(mma);
  fwd::gemm_smem<Tr>(acc_s, sm.q(), sm.k(buf));
  fwd::gemm_smem<Tr>(acc_dp, sm.dout(), sm.v());
  __syncthreads();  // every warp is done with v
  if (next >= 0) {
    const int64_t next0 = static_cast<int64_t>(next) * Tr::kBlockN;
    fwd::load_rows<Tr>(static_cast<const T*>(p.v) + s.v + hk * p.v_head + next0 * p.v_row, p.v_row,
                       s.seqlen_k - next0, sm.v());
    cp_async_fence();
  }
  grad_block<Tr, kSoftcap, kMask>(p, mma.get_slice(threadIdx.x), acc_s, acc_dp, m0, n0, seqlen_k, bd,
                                  [&](int r, int) { return lse2(r); }, [&](int r, int) { return delta(r); });
  Tensor ds16 = fwd::to_16bit<T>(acc_dp);
  Tensor dsa = make_tensor(ds16.data(), fwd::scores_as_a(ds16.layout()));
  fwd::gemm_pv<Tr>(acc_dq, dsa, sm.kt(buf), sm.kt_shape(buf));
}

template <class Tr, bool kSoftcap>
__global__ void __launch_bounds__(Tr::kThreads, 1) dq_kernel(const __grid_constant__ BwdParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using namespace cute;
  using T = typename Tr::T;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, D = Tr::kHeadDim;
  const int m_block = p.m_blocks - 1 - static_cast<int>(blockIdx.x % p.m_blocks);  // the longest first
  const int64_t bh = blockIdx.x / p.m_blocks;
  const int h = static_cast<int>(bh % p.heads_q);
  const int hk = h / p.group;
  Seq s;
  locate_seq(p, bh / p.heads_q, s);
  const int m0 = m_block * BM;
  if (m0 >= s.seqlen_q) return;
  const int64_t last_row = (m0 + BM < s.seqlen_q ? m0 + BM : s.seqlen_q) - 1;
  const fwd::KeyBlocks kb = fwd::key_blocks<BN>(m0, last_row, s.seqlen_k, s.diagonal, p.left, p.right);

  typename Tr::TiledMma mma;
  Tensor acc_dq = partition_fragment_C(mma, Shape<Int<BM>, Int<D>>{});
  clear(acc_dq);
  if (kb.hi > kb.lo) {
    extern __shared__ __align__(128) char smem[];
    const DqSmem<Tr> sm{reinterpret_cast<T*>(smem)};
    const int64_t first = static_cast<int64_t>(kb.hi - 1) * BN;
    fwd::load_rows<Tr>(static_cast<const T*>(p.q) + s.q + h * p.q_head + static_cast<int64_t>(m0) * p.q_row, p.q_row,
                       s.seqlen_q - m0, sm.q());
    fwd::load_rows<Tr>(static_cast<const T*>(p.dout) + s.dout + h * p.do_head + static_cast<int64_t>(m0) * p.do_row,
                       p.do_row, s.seqlen_q - m0, sm.dout());
    fwd::load_rows<Tr>(static_cast<const T*>(p.k) + s.k + hk * p.k_head + first * p.k_row, p.k_row,
                       s.seqlen_k - first, sm.k(0));
    fwd::load_rows<Tr>(static_cast<const T*>(p.v) + s.v + hk * p.v_head + first * p.v_row, p.v_row,
                       s.seqlen_k - first, sm.v());
    cp_async_fence();
    // this thread's rows: lse (exp2 units, +inf: no key) and delta
    Tensor c = mma.get_slice(threadIdx.x).partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
    Tensor coords = make_tensor(c.data(), fwd::rows_cols(c.layout()));
    constexpr int kRows = decltype(size<0>(coords))::value;
    Tensor lse2 = make_tensor<float>(Shape<Int<kRows>>{});
    Tensor delta = make_tensor<float>(Shape<Int<kRows>>{});
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const int row = m0 + get<0>(coords(r, 0));
      const int64_t at = s.lse + h * p.lse_head + row;
      lse2(r) = row < s.seqlen_q ? lse_exp2(p.lse[at]) : INFINITY;
      delta(r) = row < s.seqlen_q ? p.delta[at] : 0.0f;
    }
    const Band bd = fwd::band(s.diagonal, p.left, p.right);
    int buf = 0;
    for (int n = kb.hi - 1; n >= kb.lo; --n) {
      const int next = n > kb.lo ? n - 1 : -1;
      cp_async_wait<0>();
      __syncthreads();  // k[n], v[n] landed; every warp is done with the other k buffer
      if (next >= 0) {
        const int64_t next0 = static_cast<int64_t>(next) * BN;
        fwd::load_rows<Tr>(static_cast<const T*>(p.k) + s.k + hk * p.k_head + next0 * p.k_row, p.k_row,
                           s.seqlen_k - next0, sm.k(buf ^ 1));
        cp_async_fence();
      }
      const int n0 = n * BN;
      if (n >= kb.mid_hi || n < kb.mid_lo)
        dq_step<Tr, kSoftcap, true>(p, sm, buf, m0, n0, s.seqlen_k, bd, lse2, delta, acc_dq, next, s, hk);
      else
        dq_step<Tr, kSoftcap, false>(p, sm, buf, m0, n0, s.seqlen_k, bd, lse2, delta, acc_dq, next, s, hk);
      buf ^= 1;
    }
  }
  T* dq = static_cast<T*>(p.dq) + s.o + h * D + static_cast<int64_t>(m0) * p.o_row;
  store_rows<typename Tr::TiledMma, BM, D>(acc_dq, dq, p.o_row, s.seqlen_q - m0, p.scale);
#endif
}

}  // namespace kp_attention::bwd
