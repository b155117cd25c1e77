// kp-fused-mlp's decode table: the weight-streaming kernel (decode_gemv.cu) that linear_act and
// gated_linear run at a few tokens, one row per token class, and the rule that splits K.
//
// Why a kernel of its own below the GEMM: at M <= 32 tokens a call does 2 M FLOPs per weight
// byte, far under the H200's ridge (~200 FLOP/B with mma.sync, 4.8 TB/s), so its time is the
// time to read the weights once. The GEMM's 64-row tile is mostly padding there and its TMA
// pipeline keeps ~4 stages of 64 x 128 tiles in flight per SM: 62-66% of copy at 16 tokens (H200,
// 2026-11-25). What the bandwidth needs instead (Little's law): 4.8 TB/s x ~0.8 us of loaded HBM
// latency = ~4 MB in flight over the GPU, ~30 KB per SM.
//
// Rows (the first whose max_m >= M wins; larger M, when forced, runs the last row over
// 32-token chunks of x):
//   m_tiles   8-token MMA columns a warp computes (x rows; the rest of the tile is zero): the
//             warp's accumulators are 2 x m_tiles x 4 fp32 registers.
//   stages    k-steps of weights (32 columns x 32 rows, 2 KB a warp, 16 B a thread and row) in
//             each warp's register ring: the bytes in flight are stages x 2 KB a warp. Ring
//             registers: 16 x stages. m8: 8 stages = 128 + 8 accumulators; m32: 4 = 64 + 32.
//             ptxas (sm_90a): 168-198 registers, no spills: 2 CTAs (8 warps) an SM, 128 / 96 /
//             64 KB issued per SM (m8 / m16 / m32), 2-4x the ~30 KB; one CTA alone: half.
//   fill      CTAs per SM the split rule aims for: a row block is 128 weight rows, so
//             N = 4096 gives 32 CTAs; 132 SMs want several K splits.
//   min_split_steps  k-steps a split keeps at least (its ring must fill: >= 2 x stages).
//   ws_pct    the fp32 partials of the splits (written and read: 8 S M N bytes) may cost at
//             most this % of the weight bytes (2 N K): S <= ws_pct K / (400 M). K = 4096: S <= 2
//             at 16 tokens (112 -> 224 CTAs for N = 14336: every SM busy), S = 1 at 32.
// Splits S = min(ceil(fill x SMs / CTAs), floor(resident CTAs / CTAs) (one wave: every CTA
// moves the same bytes, so a second partial wave would be a tail), K-steps / min_split_steps,
// the ws_pct bound, kMaxSplits), at least 1. `decode_splits` (Python) overrides S for sweeps.
// Not measured on a GPU yet: the values are the reasoning above, to be swept on the H200.
#pragma once
#include <cstdint>

namespace kp_fused_mlp {

struct DecodeRow {
  const char* name;
  int max_m;
  int m_tiles;
  int stages;
  int fill;
  int min_split_steps;
  int ws_pct;
};

struct DecodeTable {
  static constexpr DecodeRow rows[] = {
      // name          max_m  m_tiles  stages  fill  min_split_steps  ws_pct
      {"decode_m8",        8,       1,      8,    2,               16,     4},
      {"decode_m16",      16,       2,      6,    2,               12,     4},
      {"decode_m32",      32,       4,      4,    2,                8,     4},
  };
  static constexpr int size = sizeof(rows) / sizeof(rows[0]);
  static constexpr int max_m = rows[size - 1].max_m;  // the cut: linear_act's GEMM above it
  static constexpr int kMaxSplits = 32;
  static constexpr int kWarps = 4;  // a CTA: 4 warps x 32 weight rows (gated: 16 gate + 16 up rows)
};

template <int Row>
struct DecodeRowT {
  static constexpr int m_tiles = DecodeTable::rows[Row].m_tiles;
  static constexpr int stages = DecodeTable::rows[Row].stages;
};

// The row a call of M tokens gets.
inline int pick_decode_row(int64_t m) {
  for (int i = 0; i < DecodeTable::size; ++i)
    if (m <= DecodeTable::rows[i].max_m) return i;
  return DecodeTable::size - 1;
}

}  // namespace kp_fused_mlp
