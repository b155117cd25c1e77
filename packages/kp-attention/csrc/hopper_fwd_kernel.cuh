// kp-attention's Hopper forward kernel (sm_90a): TMA, wgmma, warp specialization, FA3's overlaps.
// hopper_fwd.h describes the CTA (a producer warpgroup, two 64-row consumer warpgroups) and its
// tile table; fwd_kernel.cuh is the sm80 kernel it mirrors (the same contract, masks, softmax
// arithmetic in exp2 units and key-block split, fwd_work.cuh).
//
// A consumer warpgroup, key blocks last first (key_blocks: masked edge blocks, mask-free middle):
//   first block:  S = Q K^T | softmax -> P
//   each next n:  [turn] S = Q K[n]^T (async), rescale O, O += P V[n+1] (async) [pass the turn] |
//                 wait S: mask, softmax of block n (max, exp2, sums) while PV runs |
//                 wait PV: P = S in 16 bit
//   last:         rescale O, O += P V; out = O / sum, lse
// The turn (two named barriers) makes the warpgroups issue their GEMMs alternately, so one's
// softmax runs under the other's tensor-core work. Stages are released to the producer as soon as
// the GEMM that read them has completed.
//
// Persistent where the tiles have equal work (hopper_fwd_launch.cuh): a CTA an SM walks the tiles
// (query blocks) c, c + grid, ...; the producer loads the next tile's q (once the S GEMMs of the
// last are done: q_empty) and k / v while the consumers finish the last PV and store (FA3's
// epilogue overlap). Causal, windowed and varlen calls launch a CTA a tile (the loop runs once).
//
// Out-of-bounds rows: TMA zero-fills q rows past seqlen_q (batched; varlen: past total_q, rows of
// the next sequence otherwise, never stored) and k / v rows past seqlen_k (batched). In varlen a
// key block that runs past its sequence's end is copied by the producer warp with cp.async
// (zero-filled rows, then fence.proxy.async), as the k tensor's row count is not passed.
#pragma once
#include <cute/tensor.hpp>
#include <cute/arch/cluster_sm90.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "fwd.h"
#include "fwd_softmax.cuh"
#include "fwd_work.cuh"
#include "hopper_common.cuh"
#include "hopper_fwd_traits.cuh"

namespace kp_attention::hopper {

using fwd::Band;

// Where a CTA works: fwd_work.cuh's order (query blocks fastest, last block first), as TMA
// coordinates (row offsets of the sequence, head, batch index) and the out / lse offsets.
struct Work {
  int m0, seqlen_q, seqlen_k, h, hk, bq, q0, k0;
  int64_t diagonal, out, lse;
};

__device__ __forceinline__ Work locate(const FwdParams& p, int tile) {  // tiles < 2^31 (run_hopper_fwd)
  Work w;
  const int m_block = p.m_blocks - 1 - tile % p.m_blocks;
  const int bh = tile / p.m_blocks;
  const int b = bh / p.heads_q;
  w.h = bh % p.heads_q;
  w.hk = w.h / p.group;
  w.m0 = m_block * 128;
  if (p.cu_q != nullptr) {
    w.q0 = p.cu_q[b];
    w.k0 = p.cu_k[b];
    w.seqlen_q = p.cu_q[b + 1] - w.q0;
    w.seqlen_k = p.cu_k[b + 1] - w.k0;
    w.diagonal = static_cast<int64_t>(w.seqlen_k) - w.seqlen_q;
    w.bq = 0;
    w.out = static_cast<int64_t>(w.q0) * p.o_row;
    w.lse = w.h * p.lse_head + w.q0;
  } else {
    w.q0 = w.k0 = 0;
    w.seqlen_q = p.seqlen_q;
    w.seqlen_k = p.seqlen_k;
    w.diagonal = p.diagonal;
    w.bq = b;
    w.out = b * p.o_batch;
    w.lse = b * p.lse_batch + w.h * p.lse_head;
  }
  w.out += w.h * p.o_head;
  return w;
}

// Named barriers 1 and 2: consumer warpgroup i waits on barrier 1 + i for its turn to issue GEMMs;
// the other warpgroup's 128 threads arrive on it (256 threads a barrier). Id 0 is __syncthreads.
__device__ __forceinline__ void turn_wait(int wg) {
  asm volatile("bar.sync %0, 256;\n" ::"r"(1 + wg) : "memory");
}
__device__ __forceinline__ void turn_pass(int wg) {
  asm volatile("bar.arrive %0, 256;\n" ::"r"(2 - wg) : "memory");
}

// Scores (by rows, columns) -> p = 2^(s factor - m), unnormalized, with the running max m, this
// thread's share of the row sum l and the factor alpha that rescales the rows of O. kMask: the
// block may hold keys a row does not see (-inf), so a row that has seen none keeps a finite shift.
template <bool kSoftcap, bool kMask, class S, class C, class Stat>
__device__ __forceinline__ void softmax(const FwdParams& p, S& s, C const& coords, int row0, int key0, int seqlen_k,
                                        Band band, Stat& m, Stat& l, Stat& alpha) {
  using namespace cute;
  if constexpr (kSoftcap) {
    CUTE_UNROLL
    for (int i = 0; i < size(s); ++i) s(i) = fwd::tanh_accurate(s(i) * p.tanh_scale);
  } else if (p.negate) {
    CUTE_UNROLL
    for (int i = 0; i < size(s); ++i) s(i) = -s(i);
  }
  if constexpr (kMask) fwd::mask_scores(s, coords, row0, key0, seqlen_k, band);
  CUTE_UNROLL
  for (int r = 0; r < size<0>(s); ++r) {
    float mx = -INFINITY;
    CUTE_UNROLL
    for (int c = 0; c < size<1>(s); ++c) mx = fmaxf(mx, s(r, c));
    const float m_new = fmaxf(m(r), fwd::quad_max(mx) * p.factor);
    const float shift = kMask && m_new == -INFINITY ? 0.0f : m_new;
    alpha(r) = fwd::exp2_fast(m(r) - shift);  // m = -inf (nothing seen yet): 0
    m(r) = m_new;
    float sum = 0.0f;
    CUTE_UNROLL
    for (int c = 0; c < size<1>(s); ++c) {
      s(r, c) = fwd::exp2_fast(fmaf(s(r, c), p.factor, -shift));
      sum += s(r, c);
    }
    l(r) = l(r) * alpha(r) + sum;
  }
}

template <class Tr, bool kSoftcap>
__global__ void __launch_bounds__(Tr::kThreads, 1) hopper_fwd_kernel(const __grid_constant__ Params<Tr> hp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace cute;
  using T = typename Tr::T;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  constexpr int BN = Tr::kBlockN, D = Tr::kHeadDim, kStages = Tr::kStages;
  const FwdParams& p = hp.p;

  extern __shared__ char smem_raw[];
  // The 128-byte swizzle repeats every 1024 bytes: tiles start on a 1024-byte boundary.
  char* smem = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  T* q_ptr = reinterpret_cast<T*>(smem);
  T* k_ptr = q_ptr + Tr::kBlockM * D;
  T* v_ptr = k_ptr + kStages * BN * D;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Tr::kTileBytes);
  uint64_t* q_full = bars;
  uint64_t* q_empty = bars + 1;
  uint64_t* k_full = bars + 2;
  uint64_t* k_empty = k_full + kStages;
  uint64_t* v_full = k_empty + kStages;
  uint64_t* v_empty = v_full + kStages;
  Tensor sQ = make_tensor(make_smem_ptr(q_ptr), typename Tr::SmemQ{});
  Tensor sK = make_tensor(make_smem_ptr(k_ptr), typename Tr::SmemKV{});
  Tensor sV = make_tensor(make_smem_ptr(v_ptr), typename Tr::SmemKV{});
  Tensor sVt = make_tensor(make_smem_ptr(v_ptr), typename Tr::SmemVt{});

  const int warp_group = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    Barrier::init(q_full, 1);
    Barrier::init(q_empty, 128 * HopperTile::kConsumers);
    CUTE_UNROLL
    for (int s = 0; s < kStages; ++s) {
      Barrier::init(k_full + s, 1);
      Barrier::init(v_full + s, 1);
      Barrier::init(k_empty + s, 128 * HopperTile::kConsumers);
      Barrier::init(v_empty + s, 128 * HopperTile::kConsumers);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  // Persistent: CTA c works on tiles c, c + grid, ... The producer and the consumers walk the same
  // tiles and skip the same ones (a varlen block past its sequence's end; tiles whose rows see no
  // key load nothing), so the barrier phases stay paired: q_full / q_empty flip once a tile with
  // keys, the k / v ring's stage and phase run on across tiles.
  auto key_range = [&](const Work& w) {
    const int last_row = (w.m0 + Tr::kBlockM < w.seqlen_q ? w.m0 + Tr::kBlockM : w.seqlen_q) - 1;
    return fwd::key_blocks<BN>(w.m0, last_row, w.seqlen_k, w.diagonal, p.left, p.right);
  };
  const int tiles = p.m_blocks * p.batch * p.heads_q;

  if (warp_group == 0) {
    // ---------------------------------------------------------------------------------- producer
    cutlass::arch::warpgroup_reg_dealloc<Tr::kProducerRegs>();
    if (threadIdx.x / 32 != 0) return;
    const int lane = threadIdx.x % 32;
    const bool varlen = p.cu_q != nullptr;
    if (lane == 0) {
      prefetch_tma_descriptor(hp.tma_q.get_tma_descriptor());
      prefetch_tma_descriptor(hp.tma_k.get_tma_descriptor());
      prefetch_tma_descriptor(hp.tma_v.get_tma_descriptor());
    }
    int stage = 0;
    uint32_t phase = 0, q_phase = 0;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const Work w = locate(p, tile);
      if (w.m0 >= w.seqlen_q) continue;
      const fwd::KeyBlocks kb = key_range(w);
      if (kb.hi <= kb.lo) continue;
      if (lane == 0) {
        Tensor mQ = hp.tma_q.get_tma_tensor(make_shape(hp.q_rows, D, p.heads_q, hp.q_batches));
        Tensor gQ = local_tile(domain_offset(make_coord(w.q0 + w.m0, 0), mQ(_, _, w.h, w.bq)),
                               Shape<Int<Tr::kBlockM>, Int<D>>{}, make_coord(0, 0));
        auto [tQg, tQs] =
            tma_partition(hp.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
        Barrier::wait(q_empty, q_phase ^ 1);  // the last tile's S GEMMs are done with q
        Barrier::arrive_and_expect_tx(q_full, Tr::kQBytes);
        copy(hp.tma_q.with(*q_full), tQg, tQs);
      }
      q_phase ^= 1;
      // k and v have one shape and one box: their TMA coordinates are the same (the strides live in
      // the descriptors), so one coordinate tensor serves both (fewer producer registers).
      Tensor mK = hp.tma_k.get_tma_tensor(make_shape(hp.k_rows, D, hp.heads_kv, hp.k_batches));
      const int kv_b = varlen ? 0 : w.bq;
      Tensor gK = local_tile(domain_offset(make_coord(w.k0, 0), mK(_, _, w.hk, kv_b)), Shape<Int<BN>, Int<D>>{},
                             make_coord(_, 0));  // (BN, D, blocks)
      auto [tKg, tKs] = tma_partition(hp.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
      auto [tVg_unused, tVs] =
          tma_partition(hp.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gK));

      // A tile of block n by cp.async (varlen, past the sequence's end): rows >= seqlen_k zero-filled.
      auto copy_rows = [&](const void* base, int64_t row_stride, int64_t head_off, int n, auto& s_tile,
                           uint64_t* full) {
        const T* src = static_cast<const T*>(base) + head_off + (static_cast<int64_t>(w.k0) + n * BN) * row_stride;
        const int rows = w.seqlen_k - n * BN;
#pragma unroll 1
        for (int i = lane; i < BN * (D / 8); i += 32) {
          const int r = i / (D / 8), c = i % (D / 8) * 8;
          cp_async_16(&s_tile(r, c), src + r * row_stride + c, r < rows);
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the tensor cores read it next
        __syncwarp();
        if (lane == 0) Barrier::arrive(full);
      };

      for (int n = kb.hi - 1; n >= kb.lo; --n) {
        const bool manual = varlen && (n + 1) * BN > w.seqlen_k;
        Barrier::wait(k_empty + stage, phase ^ 1);  // a fresh barrier's "previous phase" is complete
        if (manual) {
          Tensor s_k = sK(_, _, stage);
          copy_rows(p.k, p.k_row, w.hk * p.k_head, n, s_k, k_full + stage);
        } else if (lane == 0) {
          Barrier::arrive_and_expect_tx(k_full + stage, Tr::kKVBytes);
          copy(hp.tma_k.with(k_full[stage]), tKg(_, n), tKs(_, stage));
        }
        Barrier::wait(v_empty + stage, phase ^ 1);
        if (manual) {
          Tensor s_v = sV(_, _, stage);
          copy_rows(p.v, p.v_row, w.hk * p.v_head, n, s_v, v_full + stage);
        } else if (lane == 0) {
          Barrier::arrive_and_expect_tx(v_full + stage, Tr::kKVBytes);
          copy(hp.tma_v.with(v_full[stage]), tKg(_, n), tVs(_, stage));
        }
        if (++stage == kStages) stage = 0, phase ^= 1;
      }
    }
  } else {
    // ---------------------------------------------------------------------------------- consumers
    cutlass::arch::warpgroup_reg_alloc<Tr::kConsumerRegs>();
    const int wg = warp_group - 1;
    const int tid = threadIdx.x % 128;
    typename Tr::MmaS mma_s;
    typename Tr::MmaO mma_o;
    auto thr_s = mma_s.get_thread_slice(tid);
    auto thr_o = mma_o.get_thread_slice(tid);
    Tensor tSrQ = thr_s.partition_fragment_A(local_tile(sQ, Shape<_64, Int<D>>{}, make_coord(wg, 0)));
    Tensor tSrK = thr_s.partition_fragment_B(sK);   // (MMA, 1, D / 16, stages)
    Tensor tOrV = thr_o.partition_fragment_B(sVt);  // (MMA, 1, BN / 16, stages)
    Tensor acc_o = partition_fragment_C(mma_o, Shape<_64, Int<D>>{});
    Tensor o = make_tensor(acc_o.data(), rows_cols(acc_o.layout()));
    constexpr int kRows = decltype(size<0>(o))::value;  // 2: rows lane / 4 and lane / 4 + 8 of the warp's 16
    Tensor m = make_tensor<float>(Shape<Int<kRows>>{});
    Tensor l = make_tensor<float>(Shape<Int<kRows>>{});
    Tensor alpha = make_tensor<float>(Shape<Int<kRows>>{});
    Tensor acc_s = partition_fragment_C(mma_s, Shape<_64, Int<BN>>{});
    Tensor s = make_tensor(acc_s.data(), rows_cols(acc_s.layout()));
    Tensor cs = thr_s.partition_C(make_identity_tensor(Shape<_64, Int<BN>>{}));
    Tensor coords = make_tensor(cs.data(), rows_cols(cs.layout()));
    Tensor p16 = make_tensor<T>(acc_s.layout());
    Tensor tOrP = make_tensor(p16.data(), acc_as_a(p16.layout()));
    int stage = 0;
    uint32_t phase = 0, q_phase = 0;

    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const Work w = locate(p, tile);
      if (w.m0 >= w.seqlen_q) continue;
      const fwd::KeyBlocks kb = key_range(w);
      const int row0 = w.m0 + 64 * wg;  // the warpgroup's first row in the sequence
      clear(acc_o);
      fill(m, -INFINITY);
      clear(l);

      if (kb.hi > kb.lo) {
        const Band band = fwd::band(w.diagonal, p.left, p.right);
        auto to_p = [&] {
          uint32_t* dst = reinterpret_cast<uint32_t*>(raw_pointer_cast(p16.data()));
          CUTE_UNROLL
          for (int i = 0; i < size(acc_s) / 2; ++i) dst[i] = fwd::pack2<T>(acc_s(2 * i), acc_s(2 * i + 1));
        };
        // O's rows times the alpha of the last softmax (its max's change): O then matches the P of
        // that block, whose PV comes next (FA3's order: O is free while the S GEMM runs).
        auto rescale_o = [&] {
          CUTE_UNROLL
          for (int r = 0; r < kRows; ++r) {
            CUTE_UNROLL
            for (int c = 0; c < size<1>(o); ++c) o(r, c) *= alpha(r);
          }
        };
        auto run_softmax = [&](int n) {
          if (n >= kb.mid_hi || n < kb.mid_lo)
            softmax<kSoftcap, true>(p, s, coords, row0, n * BN, w.seqlen_k, band, m, l, alpha);
          else
            softmax<kSoftcap, false>(p, s, coords, row0, n * BN, w.seqlen_k, band, m, l, alpha);
        };

        Barrier::wait(q_full, q_phase);
        if (wg == 1) turn_pass(wg);  // warpgroup 0 goes first
        int prev = 0;
        uint32_t prev_phase = 0;
        // First block: S, softmax.
        int n = kb.hi - 1;
        Barrier::wait(k_full + stage, phase);
        turn_wait(wg);
        wg_gemm<true>(mma_s, tSrQ, tSrK(_, _, _, stage), acc_s);
        if (!(wg == 1 && n == kb.lo)) turn_pass(wg);  // warpgroup 1's last turn is passed to no one
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_s);  // S is read only after the wait
        Barrier::arrive(k_empty + stage);
        run_softmax(n);
        to_p();
        prev = stage, prev_phase = phase;
        if (++stage == kStages) stage = 0, phase ^= 1;
        // Next blocks: S of this block and PV of the previous one in flight together.
        for (n = kb.hi - 2; n >= kb.lo; --n) {
          Barrier::wait(k_full + stage, phase);
          turn_wait(wg);
          wg_gemm<true>(mma_s, tSrQ, tSrK(_, _, _, stage), acc_s);
          rescale_o();  // under the S GEMM: O to the running max of the previous block
          Barrier::wait(v_full + prev, prev_phase);
          warpgroup_fence_operand(tOrP);
          wg_gemm<false>(mma_o, tOrP, tOrV(_, _, _, prev), acc_o);
          if (!(wg == 1 && n == kb.lo)) turn_pass(wg);
          warpgroup_wait<1>();  // S done (PV may still run)
          warpgroup_fence_operand(acc_s);
          Barrier::arrive(k_empty + stage);
          run_softmax(n);
          warpgroup_wait<0>();  // PV done: O and the previous P are free
          warpgroup_fence_operand(acc_o);
          warpgroup_fence_operand(tOrP);
          Barrier::arrive(v_empty + prev);
          to_p();
          prev = stage, prev_phase = phase;
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
        // Every S GEMM of the tile is done: q may be overwritten by the next tile's.
        Barrier::arrive(q_empty);
        q_phase ^= 1;
        // The last block's PV.
        rescale_o();
        Barrier::wait(v_full + prev, prev_phase);
        warpgroup_fence_operand(tOrP);
        wg_gemm<false>(mma_o, tOrP, tOrV(_, _, _, prev), acc_o);
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_o);
        warpgroup_fence_operand(tOrP);
        Barrier::arrive(v_empty + prev);
      }

      // out = O / rowsum as T (4-byte stores of column pairs, rows < seqlen_q), lse = ln(rowsum) +
      // max in natural log; a row that saw nothing: 0 and -inf. The producer is loading the next
      // tile's q and k / v meanwhile.
      Tensor co = thr_o.partition_C(make_identity_tensor(Shape<_64, Int<D>>{}));
      Tensor ocoords = make_tensor(co.data(), rows_cols(co.layout()));
      // The out / lse offsets recomputed from the tile index (asm volatile: not CSE'd with the first
      // locate), so they are not kept live across the key loop (the softcap kernels spilled them).
      int tile_again;
      asm volatile("mov.b32 %0, %1;\n" : "=r"(tile_again) : "r"(tile));
      const Work we = locate(p, tile_again);
      T* out = static_cast<T*>(p.out) + we.out;
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) {
        const float sum = fwd::quad_sum(l(r));
        const bool seen = sum > 0.0f;
        const float inv = seen ? 1.0f / sum : 0.0f;
        const int row = we.m0 + 64 * wg + get<0>(ocoords(r, 0));
        if (row >= we.seqlen_q) continue;
        T* dst = out + static_cast<int64_t>(row) * p.o_row;
        CUTE_UNROLL
        for (int c = 0; c < size<1>(o); c += 2)
          *reinterpret_cast<uint32_t*>(dst + get<1>(ocoords(r, c))) =
              fwd::pack2<T>(o(r, c) * inv, o(r, c + 1) * inv);
        if ((threadIdx.x & 3) == 0)
          p.lse[we.lse + row] = seen ? (m(r) + log2f(sum)) * 0.6931471805599453f : -INFINITY;
      }
    }
  }
#endif
}

}  // namespace kp_attention::hopper
