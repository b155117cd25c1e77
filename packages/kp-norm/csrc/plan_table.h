// kp-norm's plan table: the widths and sizes the plans (norm_fwd.cu, norm_bwd.cu) choose kernels
// by, one column per GPU class, and the rows a call can land on. The plans derive the rest per
// signature (threads = columns / E rounded to warps, cluster size, ring stages from the smem
// budget, the resident grid) and cache it; `kp_norm.cuda_plan(...)` reports the row a call gets
// and `kp_norm.plan_override(name=value)` replaces one value for a sweep (norm.cuh, Knob).
//
// GPU classes, by DRAM bandwidth an SM: `slow` under 30 GB/s (H100 SXM: 25), `fast` 30 or more
// (H200: 36). An SM of the fast class needs more bytes in flight, and several choices tuned on
// one class lost on the other; each such column says what was measured. 0 turns a row off.
// Widths are in columns of a 16-bit x; fp32 x uses the same numbers (half the bytes in flight).
//
// Forward rows (the first that applies wins; `row` in cuda_plan):
//   direct.rows      up to 32 x E columns: several rows a CTA, warp or sub-warp teams, shuffles only
//   direct           up to direct_max: the row in registers, one CTA of columns / E threads
//   direct.wide      RMSNorm, 16-bit x and weights, no residual, sm90, up to wide_direct_max: one row
//                    a cluster of CTAs of wide_direct_cta_cols columns (256 threads x 32)
//   direct.wide.staged  (tuning builds) the same signature, wider rows up to wide_staged_max: one row
//                    a cluster of 16384-column CTAs, wide_staged_reg_chunks of a thread's 8 chunks
//                    of x in registers, the rest and the weights staged in smem
//   ring.wreg.rows   16-bit x and weights, no residual, from ring_rows_min: ring of 256-thread CTAs,
//                    two (LayerNorm) or three (RMSNorm) rows in flight each
//   ring.wreg        ring kernel (the row in smem), weights in registers: no residual, 2+ stages fit
//   ring.wsmem       ring kernel, weights staged once in smem (weights + 2 stages within 200 KB)
//   ring.wl2         ring kernel, weights from L2 every row
//   direct.cluster   the direct kernel over a cluster: LayerNorm with fp32 weights at 8K-16K on the
//                    fast class; else only through overrides (fwd_dcpc, fwd_directmax past 16384)
//   direct.scalar    rows that are not 16-byte aligned or whose width is not a multiple of 8 (4)
//   multipass        wider than any row above holds here (or no clusters): the row streamed twice
// Backward rows:
//   tile             16-byte rows of bwd_tile_min+1 .. bwd_tile_max columns: the tile kernel
//   ring.warp_teams  up to 1024 columns: warp teams (E = 8 / 16 / 32), merged per CTA
//   ring.cta         up to bwd_cta_cols columns: one CTA a row, E = 32
//   ring.cluster     wider, sm90: a cluster of bwd_cta_cols-column CTAs (512-thread CTAs past
//                    bwd_cluster_split_max)
//   ring.wrp         the cluster ring with w in registers and the next row pipelined (no db; with db
//                    for rows wider than wrp_db_min_cols)
//   ring.wrp_smem    ... with w as raw 16-bit in smem (db, where as many teams stay resident)
//   direct.scalar, multipass   as in the forward
//
// Kernel sets (what is instantiated, fwd_*.cu / bwd_*.cu): every shape above exists for the common
// signature, 16-bit x with 16-bit weights (and, in the backward, 16-bit h). The rarer signatures
// share fewer, more general kernels, so that the build holds 202 kernels an arch, not 283:
//   fp32 weights of a 16-bit x (autocast training) or fp32 x: no E = 16 direct kernels (E = 8 up to
//     256 columns, then E = 32); the ring reads fp32 weights from L2 (no ring.wsmem), and fp32 x
//     has no compile-time-geometry ring twins;
//   a residual: no E = 16 direct kernels (warp teams of 257-512 columns take E = 32);
//   fp32 h in the backward (fp32 x, or an fp32 residual stream): no tile or ring.wrp, warp teams
//     of E = 32 only; compile-time-geometry twins for fp32 x at 256 threads only (they earn 8-14%);
//   direct.scalar: one kernel an x dtype, branching once a CTA on the weight dtype, the residual
//     and RMS/LayerNorm (a fallback: rows that are not 16-byte aligned).
// kp-norm 0.3.4 made these cuts; what they cost is in docs/benchmarks/h200/ (kernel-sets-*).
#pragma once
#include <cstdint>

namespace kp_norm {

// The full kernel set (above): an activation dtype of 16 bits.
template <typename X>
constexpr bool kFullKernelSet = sizeof(X) == 2;

struct ByGpu {
  int slow, fast;
  int at(bool fast_dram) const { return fast_dram ? fast : slow; }
};

struct FwdTable {
  // Widest row the direct kernel takes alone; wider rows go to direct.wide or the ring. Until
  // 0.2.7 LayerNorm 16K took the ring on the fast class (H200: 90 vs 77, session 6); the direct
  // kernel has gained since and read 93.5 there against the ring's 88 (session 9).
  int direct_max;
  // 16 values a thread instead of 32 (twice the threads a row), 16-bit x without a residual, any
  // width up to this. H100: 0.1-0.9 points of copy faster at 1K-4K, 1.5-10 slower wider (session
  // 8). H200: LayerNorm 2K lost 4 points (93.5 vs 97.6), 1K tied, so LayerNorm's fast column is 1K.
  ByGpu rms_e16_max, ln_e16_max;
  // Beyond that, 16 values a thread only as a register-capped twin (power-of-two widths, kTwinCap
  // in norm_fwd.cu): H100 RMSNorm 8K 98.6 -> 99.0, 16K 98.8 -> 99.1; LayerNorm 4K 98.2 -> 99.2, 8K
  // 98.2 -> 98.9 (session 11). On the H200 they measured 0.3-6 points slower: off there.
  ByGpu rms_e16_twin_max, ln_e16_twin_max;
  // direct.wide: H100, % of copy at 32K / 64K / 128K, ring 94.5 / 94.9 / 92.5 -> 98.8 / 98.7 / 95.1
  // (session 15). Lost with LayerNorm (86.5 / 82.9 / 72.4), 512-thread CTAs, 64 values a thread.
  // Not measured on the fast class: off there until it is.
  ByGpu wide_direct_max;
  int wide_direct_cta_cols;
  // direct.wide.staged, off: H100 (2026-11-28), RMSNorm, % of copy, ring -> staged: 147456 93.4-96.6
  // -> 91.2-92.3, 262144 94.2-95.2 -> 89.7-90.5 (QuACK 98.2 in the same run), but 200000 (no
  // compile-time-geometry ring twin) 76.6-77.4 -> 91.0-91.5. 2 of the 8 chunks in registers: 84-88;
  // plain x loads instead of evict_last: 2-3 points slower. Its two kernels would take the build past
  // issue 16's 203, so it lives in tuning builds only (`plan_override(fwd_widestaged=262144)`).
  ByGpu wide_staged_max;
  int wide_staged_reg_chunks;  // of a thread's 8 chunks of x; 4 keeps the kernel at 56 registers
  // LayerNorm with fp32 weights of a 16-bit x, rows wider than ln_w32_split_above (and up to
  // direct_max): the direct kernel over a cluster of w32_cta_cols-column CTAs (row
  // `direct.cluster`). LayerNorm's one 512-thread CTA a row holds one CTA an SM (its fp32 weight and
  // bias take the registers of a second); 128-thread CTAs fit several. H200, % of copy, one CTA ->
  // cluster of 4096-column CTAs, two runs (2026-11-25): 12K 38.2 -> 47.3 / 47.1, 16K 44.4 -> 46.3 /
  // 46.2; at 8K it lost (55.6 -> 51.4), so only above it. Not RMSNorm: held to 64 registers it fits
  // 2 CTAs an SM (16K 58.3 -> 88.2) and the cluster lost there (88.4 -> 83.8). Not measured on the
  // slow class (H100): off there. `plan_override(fwd_w32split=N)` sets it (0: off). Needs clusters.
  ByGpu ln_w32_split_above;
  int w32_cta_cols;
  // ring.wreg.rows: H100 RMSNorm 128K / 256K 90.7 / 91.8 -> 92.5 / 93.5, LayerNorm 89.5 / 90.2 ->
  // 92.1 / 92.9 (session 14); at 32K / 64K it lost 0.3-2 points. Not measured on the fast class.
  ByGpu ring_rows_min;
  int ring_threads, ring_stages;            // ring CTAs: up to 512 threads x 8 chunks, up to 4 stages
  // ring.wreg.rows' CTAs: 256 threads; ring stages for RMSNorm and LayerNorm. H100 (2026-11-28, six
  // interleaved rounds, % of copy, 2 -> 3 stages, 96 KB a CTA, still two CTAs an SM): RMSNorm 128K
  // 95.5-96.0 -> 95.9-96.2, 256K 95.0-95.3 -> 95.6-96.2; LayerNorm (two rounds) 128K 93.8-94.0 ->
  // 92.4-92.8, 256K 94.7 -> 92.0-92.7: three for RMSNorm only.
  int ring_rows_threads, ring_rows_stages_rms, ring_rows_stages_ln;
  // Ring smem budgets a CTA (bytes): weights in registers take one CTA an SM and the whole smem;
  // weights in smem share 200 KB with two stages; weights from L2 keep two CTAs an SM.
  int ring_budget_wreg, ring_budget_wsmem, ring_budget_wl2;
};

constexpr FwdTable kFwd = {
    /*direct_max*/ 16384,
    /*rms_e16_max*/ {4096, 4096},
    /*ln_e16_max*/ {2048, 1024},
    /*rms_e16_twin_max*/ {16384, 0},
    /*ln_e16_twin_max*/ {8192, 0},
    /*wide_direct_max*/ {16 * 8192, 0},
    /*wide_direct_cta_cols*/ 8192,
    /*wide_staged_max, wide_staged_reg_chunks*/ {0, 0}, 4,
    /*ln_w32_split_above, w32_cta_cols*/ {0, 8192}, 4096,
    /*ring_rows_min*/ {131072, 0},
    /*ring_threads, ring_stages*/ 512, 4,
    /*ring_rows_threads, ring_rows_stages_rms, _ln*/ 256, 3, 2,
    /*ring budgets*/ 220 << 10, 200 << 10, 100 << 10,
};

struct BwdTable {
  // tile: rows of 1K-4K (H100 LayerNorm 2K/4K +8 points over the ring, session 10).
  int tile_min, tile_max;
  // Columns a CTA of a cluster, and the widest row that uses them: rows of 8K-64K go to clusters
  // of 256-thread CTAs (two resident an SM: one CTA's reduction and cluster exchange overlap the
  // other's passes); wider rows use 512-thread CTAs.
  int cta_cols, cluster_split_max;
  // Ring smem budget an SM: clusters without db take a deeper ring (H200 16K: 81 -> 85); with db
  // it would cost the second CTA an SM (H200 16K/64K: 68/60 at 225 KB, 80/72 at 160 KB).
  int ring_budget_deep, ring_budget;
  // WRP with db (w in registers or smem, the next row pipelined) for rows wider than this. H100:
  // ahead from 4 CTAs of 8192 columns (64K/256K, sessions 7-9); at 16K (2 CTAs) the plain loop won
  // in 2 of 3 runs. H200 (2026-11-25, LayerNorm backward, % of copy, plain -> WRP): 32K 79.2 ->
  // 65.2, 64K 78.3 -> 63.0, but 128K 66.6 -> 74.9 and 256K 60.9 -> 68.8: there only past 64K.
  ByGpu wrp_db_min_cols;
};

constexpr BwdTable kBwd = {
    /*tile_min, tile_max*/ 1024, 4096,
    /*cta_cols, cluster_split_max*/ 8192, 65536,
    /*ring_budget_deep, ring_budget*/ 225 << 10, 160 << 10,
    /*wrp_db_min_cols (rows wider than)*/ {3 * 8192, 65536},
};

}  // namespace kp_norm
