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
// Two kernels (kind):
//   fma  CUDA cores (decode_gemv.cu's decode_fma_kernel): a warp owns `rows` weight rows; lane l
//        reads columns 8 l + 256 s of step s (512 contiguous bytes a row an instruction) into a
//        register ring of `stages` steps, fp32 FMAs, a warp-shuffle sum at the end. At M tokens it
//        issues (1 + M) lane-ops per weight element (a conversion, M FMAs): 58.7 M elements of
//        4096 x 14336 cost (1 + M) x 1.75 us at the H200's 33.5 T lane-ops/s, against ~29 us to
//        read them (clean flush, 4078 GB/s): 12% of the read at M = 1, 30% at 4 (hidden by 16 warps
//        an SM), 55% at 8 plus the x conversions (no longer hidden: the mma rows take over).
//        H200 microbenchmark (2026-11-26, .dev/decode_variants.cu "fma U=4 R=4", clean flush,
//        M = 1, 4096 -> 14336): 31.9 us, 90% of the read ceiling, vs 37.1 us for the mma kernel.
//        128 registers (__launch_bounds__(128, 4)): 4 CTAs, 16 warps an SM, 128 KB issued per SM.
//        ptxas (sm_90a): 127 (m1) / 128 (m2) registers, no spills. A 4-token row did not fit the
//        128-register cap (the 8 x 4 fp32 x values a step): 128 B spilled at 4 stages, 28 B at
//        3; so the fma rows stop at 2 tokens and M = 3-8 runs the m8 mma row.
//   mma  mma.sync m16n8k16 (decode_gemv_kernel): 32 weight rows a warp as the MMA's M side,
//        `m_tiles` 8-token MMA columns of x.
// Rows (the first whose max_m >= M wins; a forced row past its max_m runs x in chunks of its
// tokens, grid z):
//   tokens    fma: the tokens a warp accumulates (registers: rows x tokens accumulators, 8 x
//             tokens fp32 x values a step); mma: 8-token MMA tiles (`m_tiles`): the warp's
//             accumulators are 2 x m_tiles x 4 fp32 registers.
//   stages    fma: 256-column steps of `rows` rows (512 B a row) in each warp's register ring
//             (4 x stages x rows registers: 64 for 4 x 4, 8 KB a warp); mma: k-steps of weights (32
//             columns x 32 rows, 2 KB a warp, 16 B a thread and row): ring registers 16 x stages.
//             m8: 6 stages = 96 + 8 accumulators; m16: 5 = 80 + 16; m32: 3 = 48 + 32.
//             With x in its shared-memory ring (a step: m_tiles x 512 B a warp) the register ring
//             no longer sets the speed (H200, 2026-11-26: m16 at 4, 5 or 7 stages within ~3%),
//             but ptxas hoists the ring's x reads and the registers grew: 7 / 5 stages took 255
//             registers with 8 / 176 B spilled (m16 / m32). So the stages are the most that fit
//             without a spill and leave room for more CTAs: m8 6 (164 registers, 160 gated, 3
//             CTAs an SM), m16 5 (168 / 164, 3 CTAs), m32 3 (200 / 172, 2-3 CTAs). ptxas, sm_90a.
//   rows      fma: weight rows a warp (gated: rows / 2 gate rows and their up rows); mma: 32.
//   fill      CTAs per SM the split rule aims for: an mma row block is 128 weight rows, so
//             N = 4096 gives 32 CTAs; 132 SMs want several K splits. An fma CTA is 16 rows.
//   min_split_steps  steps a split keeps at least (its ring must fill: >= 2 x stages).
//   ws_pct    the fp32 partials of the splits (written and read: 8 S M N bytes) may cost at
//             most this % of the weight bytes (2 N K): S <= ws_pct K / (400 M). K = 4096: S <= 2
//             at 16 tokens (112 -> 224 CTAs for N = 14336: every SM busy), S = 1 at 32.
// Splits S = min(ceil(fill x SMs / CTAs), floor(resident CTAs / CTAs) (one wave: every CTA
// moves the same bytes, so a second partial wave would be a tail), steps / min_split_steps,
// the ws_pct bound, kMaxSplits), at least 1. `decode_splits` (Python) overrides S for sweeps,
// `decode_row` the row.
// H200 sweeps of the mma rows (2026-11-26, notes sweep_linear.txt): within ~5% of the best split
// at 1 and 16 tokens on the Llama shapes; at 32 tokens the ws_pct bound keeps S = 1-4 where 8
// was up to 1.35x faster (14336 -> 4096), but the GEMM wins there anyway (the cut below).
#pragma once
#include <cstdint>

namespace kp_fused_mlp {

enum class DecodeKind { kFma, kMma };

struct DecodeRow {
  const char* name;
  DecodeKind kind;
  int max_m;
  int tokens;  // fma: tokens a warp; mma: 8-token MMA tiles (m_tiles)
  int stages;
  int rows;    // weight rows a warp
  int fill;
  int min_split_steps;
  int ws_pct;
};

struct DecodeTable {
  using K = DecodeKind;
  static constexpr DecodeRow rows[] = {
      // name             kind     max_m  tokens  stages  rows  fill  min_split_steps  ws_pct
      {"decode_fma_m1",   K::kFma,     1,      1,      4,    4,    4,               8,     4},
      {"decode_fma_m2",   K::kFma,     2,      2,      4,    4,    4,               8,     4},
      {"decode_m8",       K::kMma,     8,      1,      6,   32,    2,              16,     4},
      {"decode_m16",      K::kMma,    16,      2,      5,   32,    2,              14,     4},
      {"decode_m32",      K::kMma,    32,      4,      3,   32,    2,              10,     4},
  };
  static constexpr int size = sizeof(rows) / sizeof(rows[0]);
  // The most tokens a row serves by default: gated_linear's cuda level takes calls up to it (no
  // CUDA gated GEMM on this branch); linear_act's decode/GEMM cut is DecodeCut's, by shape.
  static constexpr int max_m = rows[size - 1].max_m;
  static constexpr int kMaxSplits = 32;
  static constexpr int kWarps = 4;  // a CTA: 4 warps (mma: x 32 weight rows; fma: x `rows`)
};

// Where linear_act leaves the decode kernels for the GEMM, by shape: the first row whose
// max_n_per_k_pct >= 100 N / K gives the most tokens the decode kernels take; more run the GEMM.
// Why the shape matters: the GEMM (gemm_table.h) has no split-K, so N / 128 output tiles are its
// CTAs; with N <= K (down projections) that is few CTAs with long K loops (N = 4096: 32 CTAs on
// 132 SMs), and the decode kernel's split-K wins up to 16 tokens. With N > K the GEMM fills the
// SMs and its 64-token tile costs the same at 9-64 tokens, while the mma rows slow down with M.
// H200 2026-11-26 (notes bench_decode_h200_run1.txt, dirty 256 MB flush, us, decode | GEMM):
//                     1 token        16 tokens      32 tokens
//   4096 -> 14336     38.6 | 43.6    44.3 | 42.8    78.9 | 41.8
//   14336 -> 4096     39.4 | 57.7    43.2 | 53.7    71.9 | 52.8
//   8192 -> 28672    128.4 | 138.8  152.3 | 131.3  192.3 | 125.4
//   28672 -> 8192    128.9 | 163.1  143.8 | 148.5  183.6 | 139.5
// so: N <= K decode up to 16 tokens; N > K up to 8 (the m8 row's time is flat in M, and M = 1
// won on every shape; 9-16 tokens lost on both N > K shapes). The fma rows change only M <= 4.
struct DecodeCut {
  int max_n_per_k_pct;  // 100 N / K at most
  int max_m;
};
struct DecodeCutTable {
  static constexpr DecodeCut rows[] = {
      // max_n_per_k_pct  max_m
      {100, 16},
      {INT32_MAX, 8},
  };
};

template <int Row>
struct DecodeRowT {
  static constexpr DecodeKind kind = DecodeTable::rows[Row].kind;
  static constexpr int tokens = DecodeTable::rows[Row].tokens;
  static constexpr int stages = DecodeTable::rows[Row].stages;
  static constexpr int rows = DecodeTable::rows[Row].rows;
};

// The row a call of M tokens gets.
inline int pick_decode_row(int64_t m) {
  for (int i = 0; i < DecodeTable::size; ++i)
    if (m <= DecodeTable::rows[i].max_m) return i;
  return DecodeTable::size - 1;
}

// Whether linear_act's plan runs a call of M tokens, N outputs and K inputs on the decode kernels.
inline bool decode_serves(int64_t m, int64_t n, int64_t k) {
  for (const DecodeCut& c : DecodeCutTable::rows)
    if (n * 100 <= static_cast<int64_t>(c.max_n_per_k_pct) * k) return m <= c.max_m;
  return false;
}

}  // namespace kp_fused_mlp
