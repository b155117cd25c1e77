// The Hopper (sm_90a) forward: its tile table and host entry points. No CUTLASS here: fwd.cu and
// bindings.cpp include it (the kernels are in hopper_fwd_kernel.cuh, instantiated in
// hopper_fwd_d<D>.cu).
//
// A tile = block_m = 128 query rows of one (sequence, query head); without causal mask, window or
// varlen (tiles of equal work) one persistent CTA an SM walks them, else a CTA a tile. A CTA has 3
// warpgroups (384 threads):
//   warpgroup 0   producer: one warp issues the TMA loads (q once, then k and v tiles of block_n
//                 keys into a ring of `stages` shared-memory slots, each completing on an mbarrier);
//                 setmaxnreg gives its registers to the consumers (72 kept)
//   warpgroups 1, 2   consumers, 64 query rows each (one wgmma M): S = Q K^T with wgmma from
//                 shared memory (SS), the online softmax in registers, O += P V with P from
//                 registers (RS); 216 registers each
// Overlap: each consumer issues S[n] = Q K[n]^T and O += P[n-1] V[n-1] back to back, then runs the
// softmax of block n while the tensor cores work (intra-warpgroup); the two consumers take turns
// issuing their GEMMs (two named barriers, FA3's ping-pong), so one warpgroup's softmax runs under
// the other's GEMMs.
//
// Per consumer thread (64 rows x n columns of fp32 over 128 threads = n / 2 registers):
//   O: d / 2,  S: block_n / 2,  P (16-bit, live while the PV GEMM of the last block runs): block_n / 4
//
//   head_dim  block_m  block_n  stages  smem: q + k, v rings   O + S + P regs  why
//   64        128      128      2       16 + 64 = 80 KB         32 + 64 + 32    FA3's d64 shape less its
//                                                                               3rd consumer warpgroup
//   128       128      128      2       32 + 128 = 160 KB       64 + 64 + 32    FA3's causal d128 shape;
//                                                                               its 176 keys (non-causal)
//                                                                               is a tuning step
// smem = (block_m + 2 stages block_n) d 2 bytes. Limits: 227 KB of smem a CTA (sm_90);
// 216 x 256 + 72 x 128 = 64512 registers = 168 x 384, what the launch (384 threads, 1 CTA an SM)
// holds. FA3's 240 / 24 spilled the producer's TMA coordinates and tile loop (112 bytes); 224 / 56
// spilled 60 bytes in the persistent producer; 208 / 88 a wgmma descriptor in the softcap
// consumers; 216 / 72: none. block_n a multiple of 16 (the PV k-step) and of 8 (wgmma n), at most
// 256 (wgmma n, the TMA box); head_dim a multiple of 64 (the 128-byte swizzle atom: a TMA box row).
//
// Head dims 96, 192 and 256 have no row: the sm80 kernel (fwd_kernel.cuh) serves them on Hopper too
// (96 is no multiple of the 64-column atom; 192 / 256 would need block_n 64-80 or fewer stages to fit
// O + S in 216 registers: a tuning step). So do calls whose q / k / v break TMA's rules (strides
// multiples of 16 bytes below 2^40, 16-byte aligned starts, extents below 2^31: int32 coordinates).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "fwd.h"

namespace kp_attention {

struct HopperTile {
  int head_dim, block_m, block_n, stages;
  static constexpr int kConsumers = 2;  // consumer warpgroups, 64 rows each
  constexpr int threads() const { return 128 * (kConsumers + 1); }
  // q, then the k and v rings (the barriers live in static smem)
  constexpr int smem_bytes() const { return (block_m + 2 * stages * block_n) * head_dim * 2; }
};

inline constexpr HopperTile kHopperTiles[] = {
    {64, 128, 128, 2},
    {128, 128, 128, 2},
};

constexpr const HopperTile* hopper_tile(int head_dim) {
  for (const HopperTile& t : kHopperTiles)
    if (t.head_dim == head_dim) return &t;
  return nullptr;
}

// What the Hopper launcher needs beside FwdParams: the row extents of the TMA descriptors.
struct HopperExtra {
  int64_t total_q;   // varlen: q's rows (batched: unused)
  int64_t heads_kv;
};

// Launches the Hopper kernel of one head dim and dtype (hopper_fwd_kernel.cuh); false, launching
// nothing, when the call breaks a TMA rule (the caller runs the sm80 kernel instead).
template <int HeadDim, int DType>
bool run_hopper_fwd(const FwdParams& p, const HopperExtra& x, int device, cudaStream_t stream);

// Whether this module carries sm_90a code and `device` is sm_90 (H100 / H200): the Hopper kernels
// run there; elsewhere their bodies are empty stubs.
bool hopper_fwd_available(int device);

// Which kernel attention_fwd takes for a call of this device, head dim and dtype: "sm90" or "sm80"
// (TMA's per-call rules aside). For tests and `python -m kp_core`.
const char* fwd_kernel_name(int device, int head_dim);

// true: every call takes the sm80 kernel (also KP_ATTENTION_FWD_KERNEL=sm80 at import); for tests
// and benchmarks that compare the two.
void set_force_sm80_fwd(bool on);

}  // namespace kp_attention
