// The Hopper (sm_90a) backward: its tile table and host entry point. No CUTLASS here: bwd.cu
// includes it (the kernel is in hopper_bwd_kernel.cuh, instantiated in hopper_bwd_d<D>.cu).
//
// A CTA = block_n = 128 keys of one (sequence, kv head); k and v stay in shared memory while the
// query blocks (block_m = 64 rows) of every query head of the GQA group stream through a two-stage
// ring. 3 warpgroups (384 threads):
//   warpgroup 0   producer: one warp loads k and v once (TMA), then q, dO (TMA) and the rows' lse
//                 (in exp2 units) and delta (plain loads into shared memory) of each query block;
//                 setmaxnreg leaves it 40 registers
//   warpgroups 1, 2   consumers, 64 keys each (one wgmma M): S^T = K Q^T and dP^T = V dO^T from
//                 shared memory (SS); P^T and dS^T in registers; dV += P^T dO and dK += dS^T Q with
//                 P^T, dS^T as register A operands (RS); dS^T to shared memory, then dQ = dS K (SS)
//                 added to dq_accum with vector fp32 reductions (red.global.add.v2.f32)
// dQ's split between the consumers:
//   head_dim 128: by columns: each computes dQ[:, 64 wg : 64 wg + 64] over all 128 keys, so both
//                 warpgroups' dS must be in shared memory first (a named barrier of 256 threads);
//   head_dim 64:  by keys: each computes dQ over its own 64 keys (a 32-column slice of the 128-byte
//                 swizzle atom is no wgmma operand), so the warpgroups never wait on each other, at
//                 twice the reductions of a column split.
//
// Per consumer thread (64 rows x n columns of fp32 over 128 threads = n / 2 registers):
//   dK + dV: d,  S^T + dP^T: 64,  dQ: 32 (both head dims)
//
//   head_dim  block_m  block_n  stages  smem: k, v + q, dO ring + dS x 2     regs (producer / consumer)
//   64        64       128      2       32 + 32 + 32 = 96 KB                40 / 232
//   128       64       128      2       64 + 64 + 32 = 160 KB               40 / 232
// (FA3's shapes for these head dims.) 232 x 256 + 40 x 128 = 64512 = 168 x 384 registers, what
// the launch holds. Deterministic calls (no atomics) take the sm80-class kernels (bwd_kernel.cuh).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "bwd.h"

namespace kp_attention {

struct HopperBwdTile {
  int head_dim, block_m, block_n, stages;
  static constexpr int kConsumers = 2;  // consumer warpgroups, 64 keys each
  constexpr int threads() const { return 128 * (kConsumers + 1); }
  // k, v; the q and dO rings; two dS buffers (block_m x block_n, 16-bit)
  constexpr int smem_bytes() const {
    return (2 * block_n + 2 * stages * block_m) * head_dim * 2 + 2 * block_m * block_n * 2;
  }
};

inline constexpr HopperBwdTile kHopperBwdTiles[] = {
    {64, 64, 128, 2},
    {128, 64, 128, 2},
};

constexpr const HopperBwdTile* hopper_bwd_tile(int head_dim) {
  for (const HopperBwdTile& t : kHopperBwdTiles)
    if (t.head_dim == head_dim) return &t;
  return nullptr;
}

// Launches the Hopper backward of one head dim and dtype on p (dq_accum non-null: the atomic dQ
// path); false, launching nothing, when the call breaks a TMA rule (the caller runs the sm80-class
// kernels instead). total_q: varlen q's rows (batched: unused).
template <int HeadDim, int DType>
bool run_hopper_bwd(const BwdParams& p, int64_t total_q, int device, cudaStream_t stream);

// Which backward a call of this device and head dim takes with atomics (deterministic=False):
// "sm90" (the Hopper kernel) or "sm80"; TMA's per-call rules aside. Deterministic calls take
// "sm80" always.
const char* bwd_kernel_name(int device, int head_dim);

}  // namespace kp_attention
