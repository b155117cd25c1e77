// The backward kernels' tiles, one row a head dim: the launch configuration as data (no CUTLASS
// here, so the launcher and the bindings read it without compiling CuTe).
//
// Main kernel (bwd_kernel.cuh, FlashAttention-2 style): a CTA owns block_n keys of one (sequence,
// kv head); its k and v tiles stay in shared memory while the query blocks of every query head of
// its GQA group stream through (q, dO: block_m x d each). Per query block, 8 warps run
//   S = Q K^T and dP = dO V^T   [block_m, block_n], warps sdp_m x (8 / sdp_m)
//   dV += P^T dO, dK += dS^T Q  [block_n, d],       warps kv_n x (8 / kv_n)  (P, dS read back from smem)
//   dQ = dS K                   [block_m, d],       warps dq_m x (8 / dq_m)  (fp32 atomics, dq_accum)
// dK and dV stay in fp32 registers for the CTA's life: (dK + dV) = 2 block_n d / 256 per thread.
//
//   head_dim  block_m  block_n  sdp  kv  dq   dK+dV  S+dP  dQ   smem    why
//   64        64       128      2    4   4     64    64    16    80 KB  block_n 128: each dq atomic
//                                                                       covers 128 keys of MMAs
//   96        64        64      2    4   4     48    32    24    65 KB  block_n 128 (96 + 64) spilled 4
//                                                                       bytes with softcap (sm_90a); no
//                                                                       block_m 32 with 8 warps splits 96
//   128       32       128      2    4   2    128    32    16    96 KB  FA2's sm80 shape has block_m 64:
//                                                                       128 + 64 of S, dP spilled 60-116
//                                                                       bytes (sm_90a) whatever the order
//   192       64        64      4    2   2     96    32    48   112 KB  block_n 128 would need 192
//                                                                       registers of dK + dV
//   256       64        64      4    2   2    128    32    64   144 KB  likewise
// smem = (2 block_m + 2 block_n) d 2 (q, dO, k, v) + 2 block_m block_n 2 (P, dS) + 8 block_m
// (lse, delta). Rows d = 192, 256 need more than the 99 KB a CTA may opt into on sm_86 / sm_89: there
// the backward passes to the Triton level (bwd_device_problem); sm_80 (163 KB) and sm_90 (227 KB)
// run them all.
//
// Deterministic dq kernel (deterministic=True: no atomics): a CTA owns dq_block_m query rows of
// one (sequence, query head), warps side by side along the rows (16 rows each, like the forward),
// and streams the key blocks its rows see: S, dP, dS recomputed, dQ += dS K with dS from registers.
// smem = (2 dq_block_m + 3 dq_block_n) d 2 (q, dO, k double-buffered, v).
//   head_dim  dq_block_m  dq_block_n  warps  dQ + S + dP regs  smem
//   64        64          64          4      32 + 32 + 32       40 KB
//   96        64          64          4      48 + 32 + 32       60 KB
//   128       64          64          4      64 + 32 + 32       80 KB
//   192       64          32          4      96 + 16 + 16       84 KB
//   256       64          32          4     128 + 16 + 16      112 KB
#pragma once

namespace kp_attention {

struct BwdTile {
  int head_dim, block_m, block_n, warps, sdp_m, kv_n, dq_m;  // sdp_m, kv_n, dq_m: warps along that axis
  int dq_block_m, dq_block_n, dq_warps;                       // the deterministic dq kernel
  constexpr int threads() const { return 32 * warps; }
  constexpr int smem_bytes() const {
    return (2 * block_m + 2 * block_n) * head_dim * 2 + 2 * block_m * block_n * 2 + 8 * block_m;
  }
  constexpr int dq_threads() const { return 32 * dq_warps; }
  constexpr int dq_smem_bytes() const { return (2 * dq_block_m + 3 * dq_block_n) * head_dim * 2; }
};

inline constexpr BwdTile kBwdTiles[] = {
    {64, 64, 128, 8, 2, 4, 4, 64, 64, 4},
    {96, 64, 64, 8, 2, 4, 4, 64, 64, 4},
    {128, 32, 128, 8, 2, 4, 2, 64, 64, 4},
    {192, 64, 64, 8, 4, 2, 2, 64, 32, 4},
    {256, 64, 64, 8, 4, 2, 2, 64, 32, 4},
};

constexpr const BwdTile* bwd_tile(int head_dim) {
  for (const BwdTile& t : kBwdTiles)
    if (t.head_dim == head_dim) return &t;
  return nullptr;
}

}  // namespace kp_attention
