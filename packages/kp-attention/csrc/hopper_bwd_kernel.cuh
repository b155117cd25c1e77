// kp-attention's Hopper backward kernel (sm_90a): TMA, wgmma, warp specialization. hopper_bwd.h
// describes the CTA (a producer warpgroup, two 64-key consumer warpgroups) and its tile table;
// bwd_kernel.cuh is the sm80-class backward it mirrors (the same contract and arithmetic: P in
// exp2 units against lse, dS = P (dP - delta), times 1 - t^2 under softcap; dK scaled at its store,
// dQ when dq_accum is converted).
//
// A consumer warpgroup, each query block m of each query head of the group (hopper_bwd.h's order):
//   wait q, lse, delta: S^T = K Q^T (async) | wait dO: dP^T = V dO^T (async) | wait S^T:
//   P^T = 2^(S^T factor - lse), masked where the block needs it (under dP^T's GEMM) | wait dP^T:
//   dS^T = P^T (dP^T - delta) | dV += P^T dO, dK += dS^T Q (async, registers as A) | dS^T -> smem | barrier |
//   dQ = dS K (async) | wait all: release q, dO | dQ rows -> dq_accum (red.global.add.v2.f32)
//
// Out-of-bounds rows: TMA zero-fills q / dO rows past seqlen_q (batched; varlen: past total_q, rows
// of the next sequence otherwise) and k / v rows past seqlen_k (batched). Query rows past seqlen_q
// get lse = +inf from the producer, so their P and dS are 0 whatever q and dO hold; key rows past
// seqlen_k are masked (every query block of such a CTA takes the mask), never stored. In varlen a
// key block that runs past its sequence's end is copied by the producer warp with cp.async
// (zero-filled rows), as the k tensor's row count is not passed.
#pragma once
#include <cute/tensor.hpp>
#include <cute/arch/cluster_sm90.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "bwd.h"
#include "fwd_softmax.cuh"
#include "fwd_work.cuh"
#include "hopper_bwd_traits.cuh"
#include "hopper_common.cuh"

namespace kp_attention::hopper_bwd {

using fwd::Band;
using hopper::acc_as_a;
using hopper::cp_async_16;
using hopper::wg_gemm;
using hopper::rows_cols;

// Where a CTA works: block_n keys from n0 of one (sequence, kv head); TMA coordinates (the
// sequence's first q and k rows, the batch index) and element offsets of dK / dV, dq_accum and lse.
struct Work {
  int n0, hk, b, bq, q0, k0, seqlen_q, seqlen_k, h_first, h_end;
  int64_t diagonal, dk, dq, lse;
};

// Key blocks fastest (neighbouring CTAs read the same q, dO from L2), block 0 first (under a causal
// mask the most query blocks see it), then the GQA split, then (batch, kv head).
template <class Tr>
__device__ __forceinline__ Work locate(const Params<Tr>& hp, int cta) {  // cta < 2^31 (run_hopper_bwd)
  const BwdParams& p = hp.p;
  Work w;
  const int rest = cta / p.n_blocks;
  w.n0 = (cta - rest * p.n_blocks) * Tr::kBlockN;
  const int bh = rest / hp.kv_splits;
  const int split = rest - bh * hp.kv_splits;
  w.b = bh / p.heads_kv;
  w.hk = bh - w.b * p.heads_kv;
  w.h_first = w.hk * p.group + split * hp.heads_per_cta;
  w.h_end = w.h_first + hp.heads_per_cta;
  if (p.cu_q != nullptr) {
    w.q0 = p.cu_q[w.b];
    w.k0 = p.cu_k[w.b];
    w.seqlen_q = p.cu_q[w.b + 1] - w.q0;
    w.seqlen_k = p.cu_k[w.b + 1] - w.k0;
    w.diagonal = static_cast<int64_t>(w.seqlen_k) - w.seqlen_q;
    w.bq = 0;
    w.dk = static_cast<int64_t>(w.k0) * p.dk_row;
    w.dq = static_cast<int64_t>(w.q0) * p.o_row;
    w.lse = w.q0;
  } else {
    w.q0 = w.k0 = 0;
    w.seqlen_q = p.seqlen_q;
    w.seqlen_k = p.seqlen_k;
    w.diagonal = p.diagonal;
    w.bq = w.b;
    w.dk = w.b * p.dk_batch;
    w.dq = w.b * p.o_batch;
    w.lse = w.b * p.lse_batch;
  }
  return w;
}

// The query blocks whose rows see keys n0 .. n0 + block_n - 1: the forward's key_blocks with rows and
// keys swapped (key - row in [diagonal - left, diagonal + right] <=> row - key in [-diagonal - right,
// -diagonal + left]). A block running past seqlen_k has every query block masked.
template <int kBlockM, int kBlockN>
__device__ __forceinline__ fwd::KeyBlocks query_blocks(const BwdParams& p, const Work& w) {
  const int last_key = (w.n0 + kBlockN < w.seqlen_k ? w.n0 + kBlockN : w.seqlen_k) - 1;
  fwd::KeyBlocks qb = fwd::key_blocks<kBlockM>(w.n0, last_key, w.seqlen_q, -w.diagonal, p.right, p.left);
  if (w.n0 + kBlockN > w.seqlen_k) qb.mid_hi = qb.mid_lo;
  return qb;
}

// lse in exp2 units, +inf for a row that sees no key (lse = -inf): 2^(x - inf) = 0, never NaN.
__device__ __forceinline__ float lse_exp2(float lse) {
  return lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
}

// Named barriers: 1 = the two consumer warpgroups (256 threads), 2 + wg = one consumer warpgroup.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void red_add2(float* dst, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(a), "f"(b) : "memory");
}

// S^T and dP^T (rows: keys, columns: query rows) -> P^T in s, dS^T in dp, in one pass: the softcap
// kernels (dS needs each score's tanh, kept for the pass). lse2, delta: the stage's rows in shared
// memory. kMask: the block may hold pairs the query row does not see.
template <bool kMask, class S, class C>
__device__ __forceinline__ void softcap_gradients(const BwdParams& p, S& s, S& dp, C const& coords, const float* lse2,
                                                  const float* delta, int key0, int row0, int seqlen_k, Band band) {
  using namespace cute;
  const float fs = p.negate ? -p.factor : p.factor;
  CUTE_UNROLL
  for (int c = 0; c < size<1>(s); ++c) {
    const int col = get<1>(coords(0, c));
    const float l = lse2[col], dl = delta[col];
    CUTE_UNROLL
    for (int r = 0; r < size<0>(s); ++r) {
      const float t = fwd::tanh_accurate(s(r, c) * p.tanh_scale);
      float pr = fwd::exp2_fast(fmaf(t, fs, -l));
      if constexpr (kMask) {
        if (!fwd::sees(row0 + col, key0 + get<0>(coords(r, c)), seqlen_k, band)) pr = 0.0f;
      }
      s(r, c) = pr;
      dp(r, c) = pr * (dp(r, c) - dl) * (1.0f - t * t);
    }
  }
}

// Without softcap, in two passes: P^T needs S^T only, so it runs while dP^T's GEMM does (d64 x1.04-1.07
// on an H200). Issuing dV += P^T dO before dS^T's pass as well keeps P^T in fp32 and in 16 bits at
// once: 68 bytes of spill at d64, 16 at d128 (ptxas, nvcc 13.0).
template <bool kMask, class S, class C>
__device__ __forceinline__ void probs(const BwdParams& p, S& s, C const& coords, const float* lse2, int key0,
                                      int row0, int seqlen_k, Band band) {
  using namespace cute;
  const float fs = p.negate ? -p.factor : p.factor;
  CUTE_UNROLL
  for (int c = 0; c < size<1>(s); ++c) {
    const int col = get<1>(coords(0, c));
    const float l = lse2[col];
    CUTE_UNROLL
    for (int r = 0; r < size<0>(s); ++r) {
      float pr = fwd::exp2_fast(fmaf(s(r, c), fs, -l));
      if constexpr (kMask) {
        if (!fwd::sees(row0 + col, key0 + get<0>(coords(r, c)), seqlen_k, band)) pr = 0.0f;
      }
      s(r, c) = pr;
    }
  }
}

template <class S, class C>
__device__ __forceinline__ void dscores(S const& s, S& dp, C const& coords, const float* delta) {
  using namespace cute;
  CUTE_UNROLL
  for (int c = 0; c < size<1>(s); ++c) {
    const float dl = delta[get<1>(coords(0, c))];
    CUTE_UNROLL
    for (int r = 0; r < size<0>(s); ++r) dp(r, c) = s(r, c) * (dp(r, c) - dl);
  }
}

// An fp32 accumulator as 16-bit pairs (the register A operand of the next GEMM).
template <class T, class Acc, class Out>
__device__ __forceinline__ void to_16bit(Acc const& acc, Out& out) {
  uint32_t* dst = reinterpret_cast<uint32_t*>(cute::raw_pointer_cast(out.data()));
  CUTE_UNROLL
  for (int i = 0; i < cute::size(acc) / 2; ++i) dst[i] = fwd::pack2<T>(acc(2 * i), acc(2 * i + 1));
}

template <class Tr, bool kSoftcap>
__global__ void __launch_bounds__(Tr::kThreads, 1) hopper_bwd_kernel(const __grid_constant__ Params<Tr> hp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace cute;
  using T = typename Tr::T;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, D = Tr::kHeadDim, kStages = Tr::kStages;
  const BwdParams& p = hp.p;

  const Work w = locate(hp, static_cast<int>(blockIdx.x));
  if (w.n0 >= w.seqlen_k) return;  // varlen: past this sequence's keys (the whole CTA)
  const fwd::KeyBlocks qb = query_blocks<BM, BN>(p, w);
  const bool any = qb.hi > qb.lo;

  extern __shared__ char smem_raw[];
  // The 128-byte swizzle repeats every 1024 bytes: tiles start on a 1024-byte boundary.
  char* smem = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  T* k_ptr = reinterpret_cast<T*>(smem);
  T* v_ptr = k_ptr + BN * D;
  T* q_ptr = v_ptr + BN * D;
  T* do_ptr = q_ptr + kStages * BM * D;
  T* ds_ptr = do_ptr + kStages * BM * D;
  float* lse_s = reinterpret_cast<float*>(ds_ptr + 2 * BM * BN);  // [stages][BM], exp2 units
  float* delta_s = lse_s + kStages * BM;                          // [stages][BM]
  uint64_t* kv_full = reinterpret_cast<uint64_t*>(delta_s + kStages * BM);
  uint64_t* q_full = kv_full + 1;
  uint64_t* q_empty = q_full + kStages;
  uint64_t* do_full = q_empty + kStages;
  uint64_t* do_empty = do_full + kStages;
  Tensor sK = make_tensor(make_smem_ptr(k_ptr), typename Tr::SmemKV{});
  Tensor sV = make_tensor(make_smem_ptr(v_ptr), typename Tr::SmemKV{});
  Tensor sKt = make_tensor(make_smem_ptr(k_ptr), typename Tr::SmemKt{});
  Tensor sQ = make_tensor(make_smem_ptr(q_ptr), typename Tr::SmemQ{});
  Tensor sDo = make_tensor(make_smem_ptr(do_ptr), typename Tr::SmemQ{});
  Tensor sQt = make_tensor(make_smem_ptr(q_ptr), typename Tr::SmemQt{});
  Tensor sDot = make_tensor(make_smem_ptr(do_ptr), typename Tr::SmemQt{});
  Tensor sDS = make_tensor(make_smem_ptr(ds_ptr), typename Tr::SmemDS{});

  const int warp_group = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    Barrier::init(kv_full, 1);
    CUTE_UNROLL
    for (int s = 0; s < kStages; ++s) {
      Barrier::init(q_full + s, 32);  // the producer warp: lse, delta stores; lane 0 the q TMA too
      Barrier::init(do_full + s, 1);
      Barrier::init(q_empty + s, 128 * HopperBwdTile::kConsumers);
      Barrier::init(do_empty + s, 128 * HopperBwdTile::kConsumers);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  const int h_first = w.h_first, h_end = w.h_end;

  if (warp_group == 0) {
    // ---------------------------------------------------------------------------------- producer
    cutlass::arch::warpgroup_reg_dealloc<Tr::kProducerRegs>();
    if (threadIdx.x / 32 != 0 || !any) return;
    const int lane = threadIdx.x % 32;
    const bool varlen = p.cu_q != nullptr;
    if (lane == 0) {
      prefetch_tma_descriptor(hp.tma_q.get_tma_descriptor());
      prefetch_tma_descriptor(hp.tma_do.get_tma_descriptor());
    }
    // k and v, once. k and v have one shape and box: one coordinate tensor serves both.
    if (varlen && w.n0 + BN > w.seqlen_k) {  // past the sequence's end: cp.async, rows zero-filled
      const int rows = w.seqlen_k - w.n0;
      const T* k_src = static_cast<const T*>(p.k) + w.hk * p.k_head + (static_cast<int64_t>(w.k0) + w.n0) * p.k_row;
      const T* v_src = static_cast<const T*>(p.v) + w.hk * p.v_head + (static_cast<int64_t>(w.k0) + w.n0) * p.v_row;
#pragma unroll 1
      for (int i = lane; i < BN * (D / 8); i += 32) {
        const int r = i / (D / 8), c = i % (D / 8) * 8;
        cp_async_16(&sK(r, c), k_src + r * p.k_row + c, r < rows);
        cp_async_16(&sV(r, c), v_src + r * p.v_row + c, r < rows);
      }
      asm volatile("cp.async.wait_all;\n" ::: "memory");
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the tensor cores read them next
      __syncwarp();
      if (lane == 0) Barrier::arrive(kv_full);
    } else if (lane == 0) {
      Tensor mK = hp.tma_k.get_tma_tensor(make_shape(hp.k_rows, D, p.heads_kv, hp.k_batches));
      Tensor gK = local_tile(domain_offset(make_coord(w.k0 + w.n0, 0), mK(_, _, w.hk, w.bq)),
                             Shape<Int<BN>, Int<D>>{}, make_coord(0, 0));
      auto [tKg, tKs] = tma_partition(hp.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
      auto [tVg_unused, tVs] =
          tma_partition(hp.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gK));
      Barrier::arrive_and_expect_tx(kv_full, 2 * Tr::kKVBytes);
      copy(hp.tma_k.with(*kv_full), tKg, tKs);
      copy(hp.tma_v.with(*kv_full), tKg, tVs);
    }
    int stage = 0;
    uint32_t phase = 0;
    for (int h = h_first; h < h_end; ++h) {
      // q and dO share one shape and box (their strides live in the descriptors)
      Tensor mQ = hp.tma_q.get_tma_tensor(make_shape(hp.q_rows, D, p.heads_q, hp.q_batches));
      Tensor gQ = local_tile(domain_offset(make_coord(w.q0, 0), mQ(_, _, h, w.bq)), Shape<Int<BM>, Int<D>>{},
                             make_coord(_, 0));  // (BM, D, blocks)
      auto [tQg, tQs] = tma_partition(hp.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
      auto [tDg_unused, tDs] =
          tma_partition(hp.tma_do, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sDo), group_modes<0, 2>(gQ));
      const int64_t rows_at = w.lse + h * p.lse_head;
      for (int m = qb.lo; m < qb.hi; ++m) {
        Barrier::wait(q_empty + stage, phase ^ 1);  // a fresh barrier's "previous phase" is complete
        // the rows' lse (exp2 units; +inf past seqlen_q: P = 0 there) and delta
        CUTE_UNROLL
        for (int i = lane; i < BM; i += 32) {
          const int row = m * BM + i;
          const bool ok = row < w.seqlen_q;
          lse_s[stage * BM + i] = ok ? lse_exp2(p.lse[rows_at + row]) : INFINITY;
          delta_s[stage * BM + i] = ok ? p.delta[rows_at + row] : 0.0f;
        }
        // every lane arrives after its own stores (q_full counts the warp): the consumers' wait
        // orders them, as compute-sanitizer's racecheck sees it too
        if (lane == 0) {
          Barrier::arrive_and_expect_tx(q_full + stage, Tr::kQBytes);
          copy(hp.tma_q.with(q_full[stage]), tQg(_, m), tQs(_, stage));
        } else {
          Barrier::arrive(q_full + stage);
        }
        Barrier::wait(do_empty + stage, phase ^ 1);
        if (lane == 0) {
          Barrier::arrive_and_expect_tx(do_full + stage, Tr::kQBytes);
          copy(hp.tma_do.with(do_full[stage]), tQg(_, m), tDs(_, stage));
        }
        if (++stage == kStages) stage = 0, phase ^= 1;
      }
    }
  } else {
    // ---------------------------------------------------------------------------------- consumers
    cutlass::arch::warpgroup_reg_alloc<Tr::kConsumerRegs>();
    const int wg = warp_group - 1;
    const int tid = threadIdx.x % 128;
    typename Tr::MmaSdp mma_sdp;
    typename Tr::MmaKV mma_kv;
    typename Tr::MmaDq mma_dq;
    auto thr_sdp = mma_sdp.get_thread_slice(tid);
    auto thr_kv = mma_kv.get_thread_slice(tid);
    auto thr_dq = mma_dq.get_thread_slice(tid);
    Tensor tSrK = thr_sdp.partition_fragment_A(local_tile(sK, Shape<_64, Int<D>>{}, make_coord(wg, 0)));
    Tensor tSrV = thr_sdp.partition_fragment_A(local_tile(sV, Shape<_64, Int<D>>{}, make_coord(wg, 0)));
    Tensor tSrQ = thr_sdp.partition_fragment_B(sQ);    // (MMA, 1, D / 16, stages)
    Tensor tSrDo = thr_sdp.partition_fragment_B(sDo);
    Tensor tKrQt = thr_kv.partition_fragment_B(sQt);   // (MMA, 1, BM / 16, stages)
    Tensor tKrDot = thr_kv.partition_fragment_B(sDot);
    // dQ's operands: the warpgroup's 64 x 64 tile of dQ (rows at d 64, columns at d 128), all keys
    const int dq_row0 = Tr::kDqByRows ? 64 * wg : 0, dq_col0 = Tr::kDqByRows ? 0 : 64 * wg;
    Tensor dq_a = local_tile(sDS, Shape<_64, Int<BN>, _2>{}, make_coord(dq_row0 / 64, 0, 0));
    Tensor dq_b = local_tile(sKt, Shape<_64, Int<BN>>{}, make_coord(dq_col0 / 64, 0));
    Tensor tQrDS = thr_dq.partition_fragment_A(dq_a);  // (MMA, 1, keys / 16, 2)
    Tensor tQrK = thr_dq.partition_fragment_B(dq_b);   // (MMA, 1, keys / 16)

    Tensor acc_dk = partition_fragment_C(mma_kv, Shape<_64, Int<D>>{});
    Tensor acc_dv = partition_fragment_C(mma_kv, Shape<_64, Int<D>>{});
    clear(acc_dk);
    clear(acc_dv);

    if (any) {
      Tensor acc_s = partition_fragment_C(mma_sdp, Shape<_64, Int<BM>>{});
      Tensor acc_dp = partition_fragment_C(mma_sdp, Shape<_64, Int<BM>>{});
      Tensor s = make_tensor(acc_s.data(), rows_cols(acc_s.layout()));
      Tensor dp = make_tensor(acc_dp.data(), rows_cols(acc_dp.layout()));
      Tensor cs = thr_sdp.partition_C(make_identity_tensor(Shape<_64, Int<BM>>{}));
      Tensor coords = make_tensor(cs.data(), rows_cols(cs.layout()));
      Tensor p16 = make_tensor<T>(acc_s.layout());
      Tensor ds16 = make_tensor<T>(acc_dp.layout());
      Tensor tKrP = make_tensor(p16.data(), acc_as_a(p16.layout()));
      Tensor tKrDS = make_tensor(ds16.data(), acc_as_a(ds16.layout()));
      Tensor acc_dq = partition_fragment_C(mma_dq, Shape<_64, _64>{});
      Tensor dq = make_tensor(acc_dq.data(), rows_cols(acc_dq.layout()));
      Tensor cq = thr_dq.partition_C(make_identity_tensor(Shape<_64, _64>{}));
      Tensor dq_coords = make_tensor(cq.data(), rows_cols(cq.layout()));
      const Band band = fwd::band(w.diagonal, p.left, p.right);
      const int key0 = w.n0 + 64 * wg;  // this warpgroup's first key

      Barrier::wait(kv_full, 0);
      int stage = 0, buf = 0;
      uint32_t phase = 0;
      for (int h = h_first; h < h_end; ++h) {
        for (int m = qb.lo; m < qb.hi; ++m) {
          const int row0 = m * BM;
          Barrier::wait(q_full + stage, phase);
          wg_gemm<true>(mma_sdp, tSrK, tSrQ(_, _, _, stage), acc_s);
          Barrier::wait(do_full + stage, phase);
          wg_gemm<true>(mma_sdp, tSrV, tSrDo(_, _, _, stage), acc_dp);
          const float* lse2 = lse_s + stage * BM;
          const float* delta = delta_s + stage * BM;
          const bool mid = m >= qb.mid_lo && m < qb.mid_hi;  // no pair of the block is masked
          if constexpr (kSoftcap) {
            warpgroup_wait<0>();
            warpgroup_fence_operand(acc_s);
            warpgroup_fence_operand(acc_dp);
            if (mid)
              softcap_gradients<false>(p, s, dp, coords, lse2, delta, key0, row0, w.seqlen_k, band);
            else
              softcap_gradients<true>(p, s, dp, coords, lse2, delta, key0, row0, w.seqlen_k, band);
            to_16bit<T>(acc_s, p16);
            to_16bit<T>(acc_dp, ds16);
            warpgroup_fence_operand(tKrP);
            wg_gemm<false>(mma_kv, tKrP, tKrDot(_, _, _, stage), acc_dv);
          } else {
            warpgroup_wait<1>();  // S^T is done; dP^T runs under the exponentials
            warpgroup_fence_operand(acc_s);
            if (mid)
              probs<false>(p, s, coords, lse2, key0, row0, w.seqlen_k, band);
            else
              probs<true>(p, s, coords, lse2, key0, row0, w.seqlen_k, band);
            warpgroup_wait<0>();  // dP^T is done
            warpgroup_fence_operand(acc_dp);
            dscores(s, dp, coords, delta);
            to_16bit<T>(acc_s, p16);
            to_16bit<T>(acc_dp, ds16);
            warpgroup_fence_operand(tKrP);
            wg_gemm<false>(mma_kv, tKrP, tKrDot(_, _, _, stage), acc_dv);
          }
          warpgroup_fence_operand(tKrDS);
          wg_gemm<false>(mma_kv, tKrDS, tKrQt(_, _, _, stage), acc_dk);
          // dS^T -> dS in shared memory: each 16-bit pair is two neighbouring query rows of one key
          const uint32_t* ds_pairs = reinterpret_cast<const uint32_t*>(raw_pointer_cast(ds16.data()));
          CUTE_UNROLL
          for (int i = 0; i < size(cs) / 2; ++i) {
            const int key = 64 * wg + get<0>(cs(2 * i)), row = get<1>(cs(2 * i));
            *reinterpret_cast<uint32_t*>(&sDS(row, key, buf)) = ds_pairs[i];
          }
          cutlass::arch::fence_view_async_shared();  // generic-proxy stores, read by wgmma next
          named_sync(1, 256);  // both warpgroups' dS^T are in shared memory
          wg_gemm<true>(mma_dq, tQrDS(_, _, _, buf), tQrK, acc_dq);
          warpgroup_wait<0>();
          warpgroup_fence_operand(acc_dq);
          warpgroup_fence_operand(acc_dk);
          warpgroup_fence_operand(acc_dv);
          warpgroup_fence_operand(tKrP);
          warpgroup_fence_operand(tKrDS);
          Barrier::arrive(q_empty + stage);
          Barrier::arrive(do_empty + stage);
          // dQ's rows below seqlen_q into dq_accum (fp32, [.., heads_q, d] rows)
          float* dst = p.dq_accum + w.dq + h * D + dq_col0;
          CUTE_UNROLL
          for (int r = 0; r < size<0>(dq); ++r) {
            const int row = row0 + dq_row0 + get<0>(dq_coords(r, 0));
            if (row >= w.seqlen_q) continue;
            float* d = dst + static_cast<int64_t>(row) * p.o_row;
            CUTE_UNROLL
            for (int c = 0; c < size<1>(dq); c += 2) red_add2(d + get<1>(dq_coords(r, c)), dq(r, c), dq(r, c + 1));
          }
          if (++stage == kStages) stage = 0, phase ^= 1;
          buf ^= 1;
        }
      }
    }

    // dK (times scale) and dV of keys below seqlen_k, as T (4-byte stores of column pairs); with a
    // GQA split, unscaled into dkv_accum (fp32 reductions; bwd.cu converts).
    Tensor ck = thr_kv.partition_C(make_identity_tensor(Shape<_64, Int<D>>{}));
    Tensor kcoords = make_tensor(ck.data(), rows_cols(ck.layout()));
    Tensor dk = make_tensor(acc_dk.data(), rows_cols(acc_dk.layout()));
    Tensor dv = make_tensor(acc_dv.data(), rows_cols(acc_dv.layout()));
    int cta_again;
    asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(cta_again));  // offsets recomputed, not kept live
    const Work we = locate(hp, cta_again);
    const int64_t at = we.dk + we.hk * D;
    CUTE_UNROLL
    for (int r = 0; r < size<0>(dk); ++r) {
      const int key = we.n0 + 64 * wg + get<0>(kcoords(r, 0));
      if (key >= we.seqlen_k) continue;
      const int64_t row = at + static_cast<int64_t>(key) * p.dk_row;
      if (hp.kv_splits > 1) {
        CUTE_UNROLL
        for (int c = 0; c < size<1>(dk); c += 2) {
          const int col = get<1>(kcoords(r, c));
          red_add2(hp.dkv_accum + row + col, dk(r, c), dk(r, c + 1));
          red_add2(hp.dkv_accum + hp.dv_offset + row + col, dv(r, c), dv(r, c + 1));
        }
        continue;
      }
      T* gk = static_cast<T*>(p.dk) + row;
      T* gv = static_cast<T*>(p.dv) + row;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(dk); c += 2) {
        const int col = get<1>(kcoords(r, c));
        *reinterpret_cast<uint32_t*>(gk + col) = fwd::pack2<T>(dk(r, c) * p.scale, dk(r, c + 1) * p.scale);
        *reinterpret_cast<uint32_t*>(gv + col) = fwd::pack2<T>(dv(r, c), dv(r, c + 1));
      }
    }
  }
#endif
}

}  // namespace kp_attention::hopper_bwd
