// The forward kernel's tiles, one row a head dim: the launch configuration as data (no CUTLASS
// here, so the launcher and the bindings read it without compiling CuTe).
//
// A CTA owns block_m query rows of one (sequence, query head) and streams key blocks of block_n
// rows through shared memory: q (block_m x d), one k tile and one v tile (block_n x d each), 16-bit.
// Its warps split the rows, 16 rows an m16n8k16 MMA, so a warp holds (block_m / warps) rows of the
// fp32 accumulators: out (rows x d) and the scores (rows x block_n), per thread
//     out: rows x d / 32,  scores: rows x block_n / 32   fp32 registers.
//
//   head_dim  block_m  block_n  warps  smem    out + scores regs  why
//   64        128       64      4      32 KB   64 + 64            32 rows a warp: each k / v fragment
//                                                                read from smem feeds 2 MMAs (at 16
//                                                                rows a warp, mma.sync would want all
//                                                                of the A100's smem bandwidth)
//   96        128       32      4      36 KB   96 + 32
//   128       128       32      4      48 KB  128 + 32           block_n 64 (FA2's sm80 shape) spilled
//                                                                80-272 B (ptxas, sm_90a); 32: none
//   192       128       64      8      96 KB   96 + 32           16 rows a warp: 32 would not fit 255
//                                                                registers; 96 KB fits the 99 KB a
//                                                                CTA gets on sm_86 / sm_89
//   256        64       64      4      96 KB  128 + 32           likewise (128 x 64 x 8 warps, 128 KB,
//                                                                would need sm_80's or sm_90's smem)
// Beside the accumulators ptxas keeps the next k-steps' ldmatrix fragments, smem addresses and the
// softmax state (~90 registers) and fills the 255 a thread may have: 128 x 128 at d64 and 128 x 64
// at d96 spilled too (sm_90a; the softcap variants most). With these rows no kernel spills on
// sm_80 or sm_90a (204-255 registers; CHANGELOG 0.1.0 has the numbers).
//
// smem = (block_m + 2 block_n) x d x 2 bytes (the output is staged nowhere: stored from registers).
// Shared-memory limits a CTA may opt into: sm_80 163 KB, sm_86 / sm_89 99 KB, sm_90 227 KB; the
// table fits the smallest, so one row serves every GPU (per-arch rows are a tuning step).
// block_n must be a multiple of 16 (two 8-key MMA tiles make one 16-wide k-step of P V) and block_m
// of 16 x warps; both of the rows one cp.async pass covers (threads / (atom columns / 8)); head_dim
// a multiple of 32 (the 64-byte swizzle atom of 32 columns). fwd_traits.cuh asserts them.
#pragma once

namespace kp_attention {

struct FwdTile {
  int head_dim, block_m, block_n, warps;
  constexpr int threads() const { return 32 * warps; }
  constexpr int smem_bytes() const { return (block_m + 2 * block_n) * head_dim * 2; }
};

inline constexpr FwdTile kFwdTiles[] = {
    {64, 128, 64, 4},
    {96, 128, 32, 4},
    {128, 128, 32, 4},
    {192, 128, 64, 8},
    {256, 64, 64, 4},
};

// The row of `head_dim`; a head dim not in the table has none (nullptr).
constexpr const FwdTile* fwd_tile(int head_dim) {
  for (const FwdTile& t : kFwdTiles)
    if (t.head_dim == head_dim) return &t;
  return nullptr;
}

}  // namespace kp_attention
