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
// Three kernels (kind):
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
//        `m_tiles` 8-token MMA columns of x, x from CTA-shared chunks.
//   tma  sm90 only (decode_tma.cu): the weights through shared memory, loaded by TMA as whole
//        16-row tiles x 64 columns into a ring of `stages` stages of `stage_k` columns, one
//        producer warp, 4 mma.sync warps; persistent (ctas x SMs CTAs), each CTA taking an equal
//        run of the tiles with all of K (rows only: no K split, no fix-up, no workspace). H200
//        microbenchmark (2026-11-29, tools/decode_stream.cu rows, clean flush, % of a same-bytes
//        copy, 16 tokens): gated 4096 / 14336 90%, 8192 -> 28672 96%, gated 8192 / 28672 97%,
//        4096 -> 14336 84% (3.4 tiles a CTA); the register ring (mma rows, session 28's run)
//        83-86%, 88-90%, 88-90%, 79-82%. With fewer tiles than CTAs (down projections: 256 at N
//        = 4096) 40-55%: too few bytes in flight a CTA; those keep the mma rows' K splits.
// Rows (the first whose max_m >= M and min_sm <= the device's wins, a tma row only where its plan
// gives each CTA min_cta_tiles tiles without a K split; a forced row past its max_m runs x in chunks
// of its tokens, grid z; forced tma rows split K over a cluster instead of the split rule below):
//   tokens    fma: the tokens a warp accumulates (registers: rows x tokens accumulators, 8 x
//             tokens fp32 x values a step); mma: 8-token MMA tiles (`m_tiles`): the warp's
//             accumulators are 2 x m_tiles x 4 fp32 registers.
//   stages    fma: 256-column steps of `rows` rows (512 B a row) in each warp's register ring
//             (4 x stages x rows registers: 64 for 4 x 4, 8 KB a warp); mma: k-steps of weights
//             (32 rows x 32 packets columns) in the warp's register ring: 16 x packets x stages
//             registers (96 for 2 x 3).
//   packets   mma: 16-byte packets a thread loads of each of its rows a step, back to back: a row
//             is read in runs of 64 x packets bytes. H200 microbenchmark (2026-11-26,
//             tools/decode_variants.cu, clean read flush, % of a copy of the same bytes, 16
//             tokens): 1 packet (64-byte runs a step apart) 71-79%; 2 packets 79-91% with x shared
//             (below); 4 packets no better than 2 and 255 registers (2 CTAs an SM).
//   x_chunk   mma: columns of each of the two CTA-shared x chunks (2 x 8 m_tiles x (x_chunk + 32)
//             elements of shared memory, <= 48 KB: m8 17 KB, m16 35 KB, m32 37 KB). Before, each
//             warp copied all of x into a ring of its own: x was 8 m_tiles / 32 of the weight
//             traffic into the SM (50% at 16 tokens); shared, the 4 warps copy it once. Same
//             microbenchmark, 16 tokens, 1 packet: +3-8% alone, +6-15% with 2 packets.
//             m8 / m16 at 2 packets x 3 stages: 166-168 registers, 3 CTAs an SM, no spills.
//             m32 keeps 1 packet; the GEMM takes 32 tokens by default (the cut below).
//   rows      fma: weight rows a warp (gated: rows / 2 gate rows and their up rows); mma: 32; tma:
//             32 a pass (two 16-row tiles).
//   ctas      the kernel's __launch_bounds__ CTAs an SM: the registers a thread may take (168 at 3,
//             255 at 2). m32's 4 token tiles take 188 unbounded: 2 CTAs, no spill.
//   min_wave_pct  the share of the resident CTA slots that keeps HBM saturated, for the split
//             rule below: 45 for the mma rows (H200: 14336 -> 4096 at 16 tokens is as fast at 6
//             splits, 0.48 of a wave, as at 8 or 12); 100 for the fma rows.
//   min_split_steps  steps a split keeps at least (its ring must fill: >= 2 x stages; an x chunk).
//   stage_k   tma: columns a ring stage (boxes of 64); stages x (stage_k / 64) x (16 + tokens) KB of
//             shared memory a CTA (m8 / m16 at 128 x 3: 102 / 108 KB, 2 CTAs an SM; m32 at 128 x 2:
//             81 KB, 2 stages so that 2 CTAs still fit an SM). The m32 row serves 17-32 tokens only
//             where the tma rows fit (the fused GatedMLP kernel; gated_linear alone keeps its GEMM
//             past 16 tokens). H200, 2026-11-29, Llama-3-8B's MLP at 24 / 32 tokens: 101 / 104 us, 81 /
//             80% of copy (two kernels with the mma rows 72 / 68%, torch.compile 80 / 79%).
//   min_cta_tiles  tma: the 16-row tiles a CTA must get for the row to be the default: a ring of 3
//             stages holds 12 KB a tile, and an SM needs ~30-40 KB in flight (Little's law above)
//             from its 2 CTAs: 14336 -> 4096 at one tile a CTA streams at 40-55%, 4096 -> 14336 at
//             3.4 at 84%, the gated projection at 6.8 at 90%. Below it the mma rows run.
//   min_sm    the oldest arch a row runs on (tma: 90).
//   ws_pct    the fp32 partials of the splits (written and read: 8 S M N bytes) may cost at
//             most this % of the weight bytes (2 N K): S <= ws_pct K / (400 M). K = 4096: S <= 2
//             at 16 tokens, K = 8192: S <= 5.
// Splits (decode_gemv.cu's pick_splits): of S = 1 .. min(steps / min_split_steps, the ws_pct bound,
// kMaxSplits), the fewest with the best wave fill, W = CTAs x S / resident CTAs waves keeping
// W / ceil(W) of the slots busy past one wave (1.13 waves: 57%) and W / min_wave below one. The
// old rule (at most one wave) gave the gated 8192 / 28672 shape 1 split, 1.13 waves: 268 us at
// 16 tokens against 233 us at 4-6 splits (microbenchmark above). `decode_splits` (Python)
// overrides S for sweeps, `decode_row` the row.
#pragma once
#include <cstdint>
#include <type_traits>

namespace kp_fused_mlp {

enum class DecodeKind { kFma, kMma, kTma };

struct DecodeRow {
  const char* name;
  DecodeKind kind;
  int max_m;
  int tokens;  // fma: tokens a warp; mma: 8-token MMA tiles (m_tiles)
  int stages;
  int rows;    // weight rows a warp
  int packets; // mma: 16-byte packets a thread and row a step (fma: unused, 1)
  int x_chunk; // mma: columns of a shared x chunk (fma: unused, 0)
  int ctas;    // CTAs an SM the registers must allow (__launch_bounds__: 65536 / (128 x ctas) registers)
  int min_wave_pct;
  int min_split_steps;
  int ws_pct;
  int stage_k;  // tma: columns a stage (others: 0)
  int min_cta_tiles;  // tma: 16-row tiles a CTA at least, to be the default (others: 0)
  int min_sm;
};

struct DecodeTable {
  using K = DecodeKind;
  static constexpr DecodeRow rows[] = {
      // name             kind     max_m  tokens  stages  rows  packets  x_chunk  ctas  min_wave_pct  min_split_steps  ws_pct  stage_k  min_cta_tiles  min_sm
      {"decode_fma_m1",   K::kFma,     1,      1,      4,    4,       1,       0,    4,          100,               8,     4,       0,             0,     80},
      {"decode_fma_m2",   K::kFma,     2,      2,      4,    4,       1,       0,    4,          100,               8,     4,       0,             0,     80},
      {"decode_tma_m8",   K::kTma,     8,      1,      3,   32,       0,       0,    2,            0,               0,     0,     128,             4,     90},
      {"decode_tma_m16",  K::kTma,    16,      2,      3,   32,       0,       0,    2,            0,               0,     0,     128,             4,     90},
      {"decode_tma_m32",  K::kTma,    32,      4,      2,   32,       0,       0,    2,            0,               0,     0,     128,             4,     90},
      {"decode_m8",       K::kMma,     8,      1,      3,   32,       2,     512,    3,           45,               8,     4,       0,             0,     80},
      {"decode_m16",      K::kMma,    16,      2,      3,   32,       2,     512,    3,           45,               8,     4,       0,             0,     80},
      {"decode_m32",      K::kMma,    32,      4,      3,   32,       1,     256,    2,           45,              10,     4,       0,             0,     80},
  };
  static constexpr int size = sizeof(rows) / sizeof(rows[0]);
  // The most tokens a row serves by default: gated_linear's cuda level takes calls up to it (no
  // CUDA gated GEMM on this branch); linear_act's decode/GEMM cut is DecodeCut's, by shape.
  static constexpr int max_m = rows[size - 1].max_m;
  static constexpr int kMaxSplits = 32;
  static constexpr int kWarps = 4;  // a CTA: 4 warps (mma: x 32 weight rows; fma: x `rows`)
};

// Where linear_act (and gated_linear, against its [2I, H] weight) leaves the decode kernels for
// the GEMM, by shape: the first row whose max_n_per_k_pct >= 100 N / K gives the most tokens the
// decode kernels take; more run the GEMM. Why by shape: the GEMM (gemm_table.h) has no split-K, so
// N / 128 output tiles are its CTAs; with N <= K (down projections) that is few CTAs with long K
// loops (N = 4096: 32 CTAs on 132 SMs), and the decode kernel's split-K wins by far.
// H200 2026-11-26, session 21 (bench_decode, us, decode | kp's GEMM forced):
//                          8 tokens       16 tokens
//   4096 -> 14336         38.3 | 38.5    40.1 | 38.2
//   14336 -> 4096         38.4 | 49.7    39.9 | 48.5
//   8192 -> 28672          125 | 126      130 | 126
//   28672 -> 8192          127 | 152      129 | 143
//   GatedMLP 4096 / 14336  101 (8 tok) and 106 (16 tok) with the gated decode rows; 126 at 16 with
//   the gated GEMM (session 20); 8192 / 28672: 382 against 459.
// So linear_act: N <= K decode up to 16 tokens, N > K up to 8 (9-16 tokens: the GEMM is 3-4%
// faster there). gated_linear's own cut (gated_max_m): 16 tokens on every shape, where its gated
// GEMM is 20% slower than the gated decode rows.
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
  static constexpr int gated_max_m = 16;  // gated_linear: the decode kernels up to this many tokens
};

// The tma rows (decode_tma.cu and decode_mlp.cu instantiate a kernel for each): f(row) with the
// row as a compile-time constant, for a runtime row that must be one of them.
constexpr int kTmaRows[] = {2, 3, 4};
template <typename F>
decltype(auto) with_tma_row(int row, F&& f) {
  static_assert(DecodeTable::rows[kTmaRows[0]].kind == DecodeKind::kTma &&
                    DecodeTable::rows[kTmaRows[1]].kind == DecodeKind::kTma &&
                    DecodeTable::rows[kTmaRows[2]].kind == DecodeKind::kTma,
                "decode_table.h's tma rows moved: update kTmaRows");
  if (row == kTmaRows[0]) return f(std::integral_constant<int, kTmaRows[0]>{});
  if (row == kTmaRows[1]) return f(std::integral_constant<int, kTmaRows[1]>{});
  return f(std::integral_constant<int, kTmaRows[2]>{});
}
inline bool is_tma_row(int row) { return row == kTmaRows[0] || row == kTmaRows[1] || row == kTmaRows[2]; }

template <int Row>
struct DecodeRowT {
  static constexpr DecodeKind kind = DecodeTable::rows[Row].kind;
  static constexpr int tokens = DecodeTable::rows[Row].tokens;
  static constexpr int stages = DecodeTable::rows[Row].stages;
  static constexpr int rows = DecodeTable::rows[Row].rows;
  static constexpr int packets = DecodeTable::rows[Row].packets;
  static constexpr int x_chunk = DecodeTable::rows[Row].x_chunk;
  static constexpr int ctas = DecodeTable::rows[Row].ctas;
  static constexpr int stage_k = DecodeTable::rows[Row].stage_k;
};

// The row a call of M tokens gets on an sm_`sm` device; a tma row only where `tma_fits` (its plan
// gives every CTA at least min_cta_tiles tiles with no K split: decode_gemv.cu's make_plan).
inline int pick_decode_row(int64_t m, int sm, bool tma_fits) {
  for (int i = 0; i < DecodeTable::size; ++i) {
    const DecodeRow& r = DecodeTable::rows[i];
    if (m > r.max_m || sm < r.min_sm || (r.kind == DecodeKind::kTma && !tma_fits)) continue;
    return i;
  }
  return DecodeTable::size - 1;
}

// Whether linear_act's plan runs a call of M tokens, N outputs and K inputs on the decode kernels.
inline bool decode_serves(int64_t m, int64_t n, int64_t k) {
  for (const DecodeCut& c : DecodeCutTable::rows)
    if (n * 100 <= static_cast<int64_t>(c.max_n_per_k_pct) * k) return m <= c.max_m;
  return false;
}

}  // namespace kp_fused_mlp
