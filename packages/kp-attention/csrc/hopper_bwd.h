// The Hopper (sm_90a) backward: its tile table and host entry point. No CUTLASS here: bwd.cu
// includes it (the kernel is in hopper_bwd_kernel.cuh, instantiated in hopper_bwd_d<D>.cu).
//
// A CTA = block_n = 128 keys of one (sequence, kv head); k and v stay in shared memory while the
// query blocks (block_m rows) of every query head of the GQA group stream through a two-stage
// ring. 3 warpgroups (384 threads):
//   warpgroup 0   producer: one warp loads k and v once (TMA), then q, dO (TMA) and the rows' lse
//                 (in exp2 units) and delta (plain loads into shared memory) of each query block;
//                 setmaxnreg leaves it 40 registers
//   warpgroups 1, 2   consumers, 64 keys each (one wgmma M): S^T = K Q^T and dP^T = V dO^T from
//                 shared memory (SS); P^T and dS^T in registers; dV += P^T dO and dK += dS^T Q with
//                 P^T, dS^T as register A operands (RS); dS^T to shared memory, then dQ = dS K (SS)
//                 added to dq_accum with vector fp32 reductions (red.global.add.v2.f32)
// dQ [block_m, d] in 64 x 64 tiles, one a consumer warpgroup, each summing all 128 keys: by columns
// at d 128 (block_m 64), by rows at d 64 (block_m 128; a 32-column slice of the 128-byte swizzle
// atom is no wgmma operand). Both warpgroups' dS must be in shared memory first (a named barrier).
// GQA: the query heads of a kv head's group run in one CTA (dK, dV summed in registers) unless that
// leaves fewer than 8 CTAs an SM: then kv_splits CTAs share them and add fp32 dK, dV into a scratch
// buffer (converted after), so causal calls with few kv heads do not wait on a few long CTAs.
//
// Per consumer thread (64 rows x n columns of fp32 over 128 threads = n / 2 registers):
//   dK + dV: d,  S^T + dP^T: block_m,  dQ: 32
//
//   head_dim  block_m  block_n  stages  smem: k, v + q, dO ring + dS x 2     regs (producer / consumer)
//   64        128      128      2       32 + 64 + 64 = 160 KB               24 / 240
//   128       64       128      2       64 + 64 + 32 = 160 KB               32 / 232
// (FA3's shapes for these head dims; block_m 64 at d 64 ran x0.87-1.02 of FlashAttention-2 on an
// H200, its GEMMs too small for the syncs of a step.) The launch holds 168 x 384 = 64512 registers;
// ptxas (sm_90a, nvcc 13.0) spills: d64 consumers at 232 (16 bytes; 8 at 240), d128's producer at
// 24 (8 bytes; none at 32); softcap kernels 16-156 bytes at every split tried (a tanh per score
// kept for dS). Deterministic calls (no atomics) take the sm80-class kernels.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "bwd.h"

namespace kp_attention {

struct HopperBwdTile {
  int head_dim, block_m, block_n, stages, producer_regs, consumer_regs;  // regs: setmaxnreg
  static constexpr int kConsumers = 2;  // consumer warpgroups, 64 keys each
  constexpr int threads() const { return 128 * (kConsumers + 1); }
  // k, v; the q and dO rings; two dS buffers (block_m x block_n, 16-bit)
  constexpr int smem_bytes() const {
    return (2 * block_n + 2 * stages * block_m) * head_dim * 2 + 2 * block_m * block_n * 2;
  }
};

inline constexpr HopperBwdTile kHopperBwdTiles[] = {
    {64, 128, 128, 2, 24, 240},
    {128, 64, 128, 2, 32, 232},
};

constexpr const HopperBwdTile* hopper_bwd_tile(int head_dim) {
  for (const HopperBwdTile& t : kHopperBwdTiles)
    if (t.head_dim == head_dim) return &t;
  return nullptr;
}

// What the Hopper launcher needs beside BwdParams: the row extents (varlen: q's and k's rows) and
// the GQA split's scratch, fp32, twice dk's elements (nullptr: no split).
struct HopperBwdExtra {
  int64_t total_q, total_k;
  float* dkv_accum;
};

// Launches the Hopper backward of one head dim and dtype on p (dq_accum non-null: the atomic dQ
// path); false, launching nothing, when the call breaks a TMA rule (the caller runs the sm80-class
// kernels instead).
template <int HeadDim, int DType>
bool run_hopper_bwd(const BwdParams& p, const HopperBwdExtra& x, int device, cudaStream_t stream);

// Which backward a call of this device and head dim takes with atomics (deterministic=False):
// "sm90" (the Hopper kernel) or "sm80"; TMA's per-call rules aside. Deterministic calls take
// "sm80" always.
const char* bwd_kernel_name(int device, int head_dim);

}  // namespace kp_attention
