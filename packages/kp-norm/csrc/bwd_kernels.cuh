// Backward RMSNorm / LayerNorm. dx needs two row sums (sum g*xhat, sum g with g = dy * w_eff), then
// a second pass over the row. dw/db are column sums over rows: a persistent grid of teams strides
// over the rows, each thread keeps the dw/db accumulators of its columns in registers across all
// its rows, and each team (CTA or cluster; the warp teams of a CTA are merged at the end) writes one
// fp32 partial row; col_sum.cu adds them. The rows of a partial are fixed by (rows, cols, dtypes,
// whether db is wanted, device), so the result is deterministic. The main kernel stages dy, x (and dres, mean, rstd) of
// the next rows in a per-thread cp.async ring, and re-reads the row from it for the second pass, so
// its registers hold little besides the accumulators. Rows of 1K-4K take the tile kernel instead:
// M rows a tile straight into registers, one reduction a tile (plan_bwd).
// The kernel definitions; included by the translation units that instantiate them.
#pragma once
#include <algorithm>
#include <string>
#include <type_traits>

#include "kp/error.cuh"
#include "kp/launch.cuh"
#include "bwd_kernels.h"
#include "norm.cuh"

namespace kp_norm {


using kp::Ld;

// The two row sums over the team (+ the cluster, through a double-buffered slot and a cluster
// barrier per row: this is the scalar fallback; the ring kernel pushes partials instead).
__device__ __forceinline__ void bwd_row_sums(float (&s)[2], const BwdParams& p, float* red, float* slot) {
  team_sum(s, p.tpr, red);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (p.csize > 1) {
    if (threadIdx.x == 0) slot[0] = s[0], slot[1] = s[1];
    kp::cluster_sync();
    kp::cluster_gather_sum(slot, p.csize, s);
  }
#else
  (void)slot;
#endif
}

// Write the accumulators as partial row `part`. CTA/cluster teams write their columns directly;
// warp teams stage their rows in smem (`stage`, 2 * teams * cols floats) and add them in team order.
// ab holds the db accumulators when EB == E (db wanted); otherwise p.db is null.
template <bool WT, typename L, int E, int EB>
__device__ __forceinline__ void write_partials(const float (&aw)[E], const float (&ab)[EB], const L& lay,
                                               const BwdParams& p, const Geo& g, int64_t part, float* stage) {
  constexpr int VEC = L::VEC, NV = L::NV;
  constexpr bool DB = EB == E;
  if (!WT) {
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      if (p.dw) lay.template store<float>(p.dw + part * p.cols, i, aw + i * VEC, true);
      if constexpr (DB)
        if (p.db) lay.template store<float>(p.db + part * p.cols, i, ab + i * VEC, true);
    }
  } else if (p.dw || p.db) {
    float* st_w = stage;
    float* st_b = stage + g.tpc * p.cols;
#pragma unroll
    for (int i = 0; i < NV; ++i)
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const int c = lay.col(i, k);
        if (c < p.cols) {
          st_w[g.team * p.cols + c] = aw[i * VEC + k];
          if constexpr (DB) st_b[g.team * p.cols + c] = ab[i * VEC + k];
        }
      }
    __syncthreads();
    for (int c = threadIdx.x; c < p.cols; c += blockDim.x) {
      float sw = 0.f, sb = 0.f;
      for (int t = 0; t < g.tpc; ++t) {
        sw += st_w[t * p.cols + c];
        if constexpr (DB) sb += st_b[t * p.cols + c];
      }
      if (p.dw) p.dw[part * p.cols + c] = sw;
      if constexpr (DB)
        if (p.db) p.db[part * p.cols + c] = sb;
    }
  }
}

// ---- ring kernel: persistent; dy, x, dres, mean, rstd of the next rows staged by cp.async -------
// Grid: (number of partials) * csize CTAs. Registers hold the dw/db accumulators of the thread's E
// columns (E a template value so they can be registers); pass 1 (row sums + accumulators) and
// pass 2 (dx) both read the row from the ring, and w_eff = w + offset from a per-thread fp32 copy
// in smem made once (FT twins: the accumulators take the row in pass 2 instead, see ACC2). Per-row
// address math is hoisted: a thread's columns are the same every row.
// A thread reads only smem it wrote or copied itself (no barrier besides the reductions).
// Dynamic smem: rings for dy, x, dres (when given) [stages][chunk][packet][blockDim], the
// per-thread (mean, rstd) ring [stages][2][blockDim], then w_eff [E/4][blockDim] float4 (not
// WRP). After the loop the front is reused for the warp-team merge.
// DB: db is wanted (LayerNorm with a bias), so a second set of E accumulators lives in registers;
// without it those registers go to occupancy (and the partial count follows, see plan_bwd).
// WRP > 0 (CTA/cluster teams, W as wide as T; with db only E = 32; plan_bwd says when): w is kept
// as raw packets and w_eff made at use, so its fp32 smem goes to a deeper ring. The row loop is
// pipelined: pass 1 of row k + 1 and the push of its sums come before the wait for row k's
// cluster sums and row k's pass 2, so the exchange latency overlaps a pass of work.
// WRP = 1 holds the packets in registers. WRP = 2 keeps them in smem ([NV * WPP][bd] uint4, half
// the fp32 copy) and stages (mean, rstd) once a warp instead of once a thread (lane 0 copies, a
// shuffle hands them out): with db the 16 registers of w pushed 12 accumulators to local memory,
// reloaded every row; and 3 stages + w still fit a 512-thread CTA (256K: 224.4 of 227 KB).
// FT > 0 (CTA/cluster teams, E = 32): the CTA has FT threads and the row is exactly csize x FT x E
// columns (16-bit hidden 4K-256K), so the geometry is compile-time: chunk offsets become
// immediates and no chunk needs a bounds check (as the forward ring's FT).

// The CTA's width (bd) and a team's (tpr): compile-time constants for the FT twins, so that they
// fold into the address math where it is first built (as the kernel's constant locals did).
template <int FT>
struct BwdWidths {
  static constexpr int bd = FT, tpr = FT;
};
template <>
struct BwdWidths<0> {
  int bd, tpr;
};

// A thread's share of the ring kernel: its team and columns, its slots in the smem rings, the copies
// into them, the reads out of them and the row loops over them. Built once a kernel; a thread's
// columns are the same every row.
template <typename T, typename X, typename W, int E, bool WT, bool DB, int WRP, int FT>
struct BwdRing : BwdWidths<FT> {
  using BwdWidths<FT>::bd;
  using BwdWidths<FT>::tpr;
  static constexpr int VEC = 16 / sizeof(T), NV = E / VEC;
  static constexpr int XPP = VEC * sizeof(X) / 16, WPP = VEC * sizeof(W) / 16;  // packets a chunk
  static constexpr int EB = DB ? E : 1;  // db accumulators
  static constexpr int NWREG = WRP == 1 ? NV * WPP : 1;
  static constexpr bool CST = WRP == 2;  // (mean, rstd) staged once a warp
  // ACC2 (FT twins): the dw/db accumulators take each row in pass 2, from the same dy and xhat
  // (same fmaf, same row order: bit-identical; FT rows are always active, no chunk skipped). In
  // pass 1 ptxas sank those updates past the unrolled block_sum, kept dy and xhat live across its
  // loads and spilled 8-32 B of accumulators at 128 registers, reloaded every row (ncu, H100,
  // LayerNorm 64K with db: the largest stall). Without the spills the db twins went from slower
  // than the run-time geometry to faster (H100 kernel alone, 16K/256K: 86.0/76.1 spilling,
  // 88.1/76.8 run-time, 89.5/80.1 ACC2). FT = 0 (rolled block_sum, no sinking) keeps them in
  // pass 1: there the move cost registers (bf16 db: 16 B of spills); so does FT = 128 without
  // db, which did not spill (ACC2 there: +12 instructions a row).
  static constexpr bool ACC2 = FT > 128 || (FT > 0 && DB);
  static_assert(E % VEC == 0 && VEC % 4 == 0, "E must be whole chunks");
  static_assert(!WRP || (!WT && sizeof(W) == sizeof(T)), "WRP: CTA/cluster teams, W as wide as T");
  static_assert(FT == 0 || !WT, "FT: CTA/cluster teams");
  struct RowPtrs { const T* dy; const X* x; const X* dres; };

  const BwdParams& p;
  int tid, S;
  int lane, team, tpc, crank;
  int64_t my_team, nteams, lead0;  // lead0: the warp's first team (warp-uniform loop control)
  int64_t part;  // the partial row this CTA writes
  int base;      // the first column of this CTA's slice
  bool has_dres;
  uint4 *rdy, *rx, *rdr, *ring_end;  // dy, x, dres rings, then the stats and w (bwd_ring_kernel)
  int stat_stride;
  float* rst;
  float4* wsm;
  uint4* wraw;
  // This thread's columns: chunk i starts at cols_[i] (the same every row); okc[i]: inside the row.
  // The kernel's arrays: as members they kept the whole struct in memory until the loops were
  // unrolled, and the kernel compiled to different SASS.
  int (&cols_)[NV];
  bool (&okc)[NV];

  // The team geometry; also starts the cluster exchange (its mbarriers) where the kernel had it, as
  // the order of the set-up code decides how ptxas schedules the kernel's start. The kernel lays
  // out the ring and fills in the pointers below (see there).
  template <typename CX>
  __device__ __forceinline__ BwdRing(const BwdParams& prm, CX& cx, int (&cols)[NV], bool (&ok)[NV])
      : p(prm), cols_(cols), okc(ok) {
    tid = threadIdx.x;
    if constexpr (!FT) this->bd = blockDim.x, this->tpr = p.tpr;
    S = p.stages;
    team = 0, tpc = 1, crank = 0;
    part = blockIdx.x / p.csize;
    if constexpr (WT) {
      tpc = bd / tpr;
      lane = tid & (tpr - 1);
      team = tid / tpr;
      my_team = part * tpc + team;
      nteams = static_cast<int64_t>(gridDim.x) * tpc;
      lead0 = part * tpc + (tid & ~31) / tpr;
    } else {
      lane = tid;
      crank = static_cast<int>(blockIdx.x % p.csize);
      my_team = lead0 = part;
      nteams = gridDim.x / p.csize;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if (p.csize > 1) cx.init(p.csize);
#endif
    }
    base = crank * tpr * E;
    has_dres = p.dres != nullptr;
  }

  // Row r's dy, x and dres (row 0's when !act: an idle team's copies are masked off).
  __device__ __forceinline__ RowPtrs row_ptrs(int64_t r, bool act) const {
    const int64_t rr = act ? r : 0;
    return RowPtrs{row_ptr<T>(p.dy, rr, p.dy_stride), row_ptr<X>(p.x, rr, p.x_stride),
                   has_dres ? row_ptr<X>(p.dres, rr, p.dres_stride) : nullptr};
  }
  // Chunk i (dy, x, dres) of the row at these row pointers into stage s; zeros where ok is false
  // (idle teams, chunks past the row). HD: dres is given (a compile-time copy of has_dres inside
  // pass 2, see with_dres).
  template <typename HD>
  __device__ __forceinline__ void issue_chunk(int s, int i, const RowPtrs& rp, bool ok, HD hd_t) const {
    kp::cp_async16(rdy + (s * NV + i) * bd, rp.dy + cols_[i], ok);
#pragma unroll
    for (int j = 0; j < XPP; ++j) kp::cp_async16(rx + ((s * NV + i) * XPP + j) * bd, rp.x + cols_[i] + j * kp::Packet<X>::N, ok);
    if (decltype(hd_t)::value) {
#pragma unroll
      for (int j = 0; j < XPP; ++j)
        kp::cp_async16(rdr + ((s * NV + i) * XPP + j) * bd, rp.dres + cols_[i] + j * kp::Packet<X>::N, ok);
    }
  }
  __device__ __forceinline__ void issue_stats(int s, int64_t r) const {
    const bool act = r < p.rows;
    if (!CST || (tid & 31) == 0) {
      kp::cp_async4(rst + (2 * s) * stat_stride, p.is_rms ? p.rstd : p.mean + (act ? r : 0), act && !p.is_rms);
      kp::cp_async4(rst + (2 * s + 1) * stat_stride, p.rstd + (act ? r : 0), act);
    }
  }
  // (rstd, -mean * rstd) of the row in stage s (CST: lane 0's copy; call with the warp converged).
  __device__ __forceinline__ void read_stats(int s, float& rs, float& nmr) const {
    float m = 0.f, r = 0.f;
    if (!CST || (tid & 31) == 0) m = rst[(2 * s) * stat_stride], r = rst[(2 * s + 1) * stat_stride];
    if constexpr (CST) m = __shfl_sync(0xffffffffu, m, 0), r = __shfl_sync(0xffffffffu, r, 0);
    rs = r, nmr = -m * r;
  }
  __device__ __forceinline__ uint4 w_packet(const uint4 (&wreg)[NWREG], int i, int j) const {
    if constexpr (WRP == 1) return wreg[i * WPP + j];
    else return wraw[(i * WPP + j) * bd];
  }
  __device__ __forceinline__ void read_x(int s, int i, float* v) const {
#pragma unroll
    for (int j = 0; j < XPP; ++j) kp::unpack<X>(rx[((s * NV + i) * XPP + j) * bd], v + j * kp::Packet<X>::N);
  }
  template <typename HD>
  __device__ __forceinline__ void read_dres(int s, int i, float* r, HD hd_t) const {  // zeros without dres
    if constexpr (decltype(hd_t)::value) {
#pragma unroll
      for (int j = 0; j < XPP; ++j) kp::unpack<X>(rdr[((s * NV + i) * XPP + j) * bd], r + j * kp::Packet<X>::N);
    } else {
#pragma unroll
      for (int q = 0; q < VEC; ++q) r[q] = 0.f;
    }
  }
  __device__ __forceinline__ void read_w(int i, float* w) const {
#pragma unroll
    for (int j = 0; j < VEC / 4; ++j) {
      const float4 f = wsm[(i * (VEC / 4) + j) * bd];
      w[4 * j] = f.x, w[4 * j + 1] = f.y, w[4 * j + 2] = f.z, w[4 * j + 3] = f.w;
    }
  }
  // WRP: chunk i's raw w packets, into wreg (WRP = 1) or its smem slots (WRP = 2; thread-private
  // slots: no barrier).
  __device__ __forceinline__ void load_w_chunk(uint4 (&wreg)[NWREG], int i) const {
    const W* wp = static_cast<const W*>(p.w);
#pragma unroll
    for (int j = 0; j < WPP; ++j) {
      const uint4 v = p.has_w && okc[i] ? kp::ld16<Ld::RO>(wp + cols_[i] + j * kp::Packet<W>::N) : make_uint4(0, 0, 0, 0);
      if constexpr (WRP == 1) wreg[i * WPP + j] = v;
      else wraw[(i * WPP + j) * bd] = v;
    }
  }
  // Pass 2 comes in two copies, with and without dres, so the one without has neither its reads
  // nor its zeros (a uniform branch a row instead of work a chunk).
  template <typename F>
  __device__ __forceinline__ void with_dres(F&& f) const {
    if (has_dres) f(std::true_type{});
    else f(std::false_type{});
  }
  // Pass 2 of chunk i, its dy, x, w and dres decoded: dx = rstd * (g - mean(g) - xhat *
  // mean(g * xhat)) [+ dres], rounded once to x_dtype and stored. With ACC_T the dw (and db)
  // accumulators take the row here too (the same fmaf as pass 1's, see ACC2); with WADD_T w is
  // raw and w_add makes it w_eff (WRP).
  template <typename ACC, typename WADD>
  __device__ __forceinline__ void dx_chunk(float (&aw)[E], float (&ab)[EB], int i, float* d, const float* xh, float* w,
                                           const float* r, float rs, float nmr, float a, float c, X* dxr, ACC acc_t,
                                           WADD wadd_t, float w_add) const {
#pragma unroll
    for (int q = 0; q < VEC; ++q) {
      if constexpr (decltype(wadd_t)::value) w[q] += w_add;
      const float xq = fmaf(xh[q], rs, nmr);
      if constexpr (decltype(acc_t)::value) {
        aw[i * VEC + q] = fmaf(d[q], xq, aw[i * VEC + q]);
        if constexpr (DB) ab[i * VEC + q] += d[q];
      }
      d[q] = fmaf(rs, fmaf(-xq, a, fmaf(d[q], w[q], -c)), r[q]);
    }
#pragma unroll
    for (int j = 0; j < XPP; ++j) kp::st16(dxr + cols_[i] + j * kp::Packet<X>::N, kp::pack<X>(d + j * kp::Packet<X>::N));
  }

  // WRP: chunk i's dy, x, raw w (as floats, not yet w_eff) and dres, for pass 2.
  template <typename HD>
  __device__ __forceinline__ void read_chunk_wrp(const uint4 (&wreg)[NWREG], int st, int i, float* d, float* xh,
                                                 float* w, float* r, HD hd_t) const {
    kp::unpack<T>(rdy[(st * NV + i) * bd], d);
    read_x(st, i, xh);
#pragma unroll
    for (int j = 0; j < WPP; ++j) kp::unpack<W>(w_packet(wreg, i, j), w + j * kp::Packet<W>::N);
    read_dres(st, i, r, hd_t);
  }
  // Pass 1 of chunk i of the row in stage st (without WRP): its share of the row sums and, unless
  // ACC2, of the dw (and db) accumulators.
  __device__ __forceinline__ void pass1_chunk(float (&aw)[E], float (&ab)[EB], int st, int i, float rs, float nmr,
                                              float (&s2)[2]) const {
    float d[VEC], xh[VEC], w[VEC];
    kp::unpack<T>(rdy[(st * NV + i) * bd], d);
    read_x(st, i, xh);
    read_w(i, w);
#pragma unroll
    for (int q = 0; q < VEC; ++q) {
      xh[q] = fmaf(xh[q], rs, nmr);
      if constexpr (!ACC2) {
        aw[i * VEC + q] = fmaf(d[q], xh[q], aw[i * VEC + q]);
        if constexpr (DB) ab[i * VEC + q] += d[q];
      }
      const float g = d[q] * w[q];
      s2[0] = fmaf(g, xh[q], s2[0]);
      s2[1] += g;
    }
  }
  // The WRP row loop, pipelined: pass 1 of row k + 1 and the push of its sums come before the wait
  // for row k's cluster sums and row k's pass 2. Groups: rows 0 .. S-1 first (the kernel), then one
  // a row, committed after its pass 2 (the chunks of row k + S, and its stats, issued into slot
  // k % S only after their last reads). At the top of iteration k, S + k groups are committed, so
  // row k + 1 has landed when at most S - 2 are pending: S >= 2 (launch_bwd; plan_bwd wants 3+ so
  // that a row is in flight during pass 1). A CTA team's loop runs over its rows (lead == row):
  // the same trip count cluster-wide. rs, nmr, s2: row k's, carried from its pass 1 to its pass 2.
  template <typename CX>
  __device__ __forceinline__ void rows_pipelined(float (&aw)[E], float (&ab)[EB], uint4 (&wreg)[NWREG], float& rs,
                                                 float& nmr, float (&s2)[2], float inv_n, float (*red)[64],
                                                 CX& cx) const {
    const float w_add = p.has_w ? p.w_off : 1.f, w_add0 = p.has_w ? 0.f : 1.f;
    if (my_team < p.rows) {
      kp::cp_async_wait(S - 1);  // row 0
      pass1_send(aw, wreg, red, cx, w_add, w_add0, 0, rs, nmr, s2);
    }
    int k = 0;
    for (int64_t row = my_team; row < p.rows; row += nteams, ++k) {
      const int st = k % S;
      const int64_t nrow = row + S * nteams;
      const bool nact = nrow < p.rows;
      issue_stats(st, nrow);  // row k's stats were read by its pass 1
      float nmr1 = 0.f, rs1 = 0.f, t[2] = {0.f, 0.f};  // row k + 1's (nmr1 first: as rs1, nmr1 ptxas
                                                       // assigned other registers)
      if (row + nteams < p.rows) {
        kp::cp_async_wait(S - 2);  // row k + 1
#pragma unroll
        for (int j = 0; j < (WRP == 1 ? NV * WPP : 0); ++j) kp::opaque(wreg[j]);  // else the decoded w is hoisted (2x the registers)
        pass1_send(aw, wreg, red, cx, w_add, w_add0, k + 1, rs1, nmr1, t);
      }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if (p.csize > 1) {  // the sum over ranks in rank order, as ClusterExchangeN::sum
        const float4* r = cx.wait(k, p.csize);
        s2[0] = s2[1] = 0.f;
        for (int i = 0; i < p.csize; ++i) s2[0] += r[i].x, s2[1] += r[i].y;
      }
#endif
      const float a = s2[0] * inv_n, c = p.is_rms ? 0.f : s2[1] * inv_n;

      // Pass 2 of row k, as in rows(); its slots take row k + S.
#pragma unroll
      for (int j = 0; j < (WRP == 1 ? NV * WPP : 0); ++j) kp::opaque(wreg[j]);  // decode again: no w kept from pass 1
      X* dxr = row_ptr<X>(p.dx, row, p.dx_stride);
      const RowPtrs np = row_ptrs(nrow, nact);
      with_dres([&](auto hd_t) {
#pragma unroll
        for (int i = 0; i < NV; ++i) {
          if (!okc[i]) continue;
          float d[VEC], xh[VEC], w[VEC], r[VEC];
          read_chunk_wrp(wreg, st, i, d, xh, w, r, hd_t);
          dx_chunk(aw, ab, i, d, xh, w, r, rs, nmr, a, c, dxr, std::bool_constant<DB>{}, std::true_type{}, w_add);  // db: as ACC2
          issue_chunk(st, i, np, nact, hd_t);
        }
      });
      kp::cp_async_commit();
      rs = rs1, nmr = nmr1, s2[0] = t[0], s2[1] = t[1];
    }
  }
  // The row loop without WRP: row k's pass 1, its sums over the team (and cluster), its pass 2.
  template <typename CX>
  __device__ __forceinline__ void rows(float (&aw)[E], float (&ab)[EB], float inv_n, float (*red)[64], CX& cx) const {
    int k = 0;
    for (int64_t lead = lead0; lead < p.rows; lead += nteams, ++k) {
      const int64_t row = my_team + (lead - lead0);
      const bool active = row < p.rows;
      const int st = k % S;
      kp::cp_async_wait(S - 1);  // this row's group has landed
      float rs, nmr;  // xhat = x * rs + nmr
      read_stats(st, rs, nmr);
      const int64_t nrow = row + S * nteams;
      const bool nact = nrow < p.rows;
      issue_stats(st, nrow);  // after the reads above (their values are in registers)

      // Pass 1: the row sums and the dw (and db) accumulators. Idle teams and chunks past the row
      // read zeros (dy = 0), so they add nothing.
      float s2[2] = {0.f, 0.f};
#pragma unroll
      for (int i = 0; i < NV; ++i) pass1_chunk(aw, ab, st, i, rs, nmr, s2);
      team_sum<FT>(s2, tpr, red[k & 1]);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if (!WT && p.csize > 1) {
        const float4 t = cx.sum(k, make_float4(s2[0], s2[1], 0.f, 0.f), p.csize);
        s2[0] = t.x, s2[1] = t.y;
      }
#endif
      const float a = s2[0] * inv_n, c = p.is_rms ? 0.f : s2[1] * inv_n;

      // Pass 2: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) [+ dres], rounded once to x_dtype.
      // Then the chunk's slots take row k + S (zeros for an idle team: its pass 1 must read dy = 0).
      int64_t dxo = active ? row : 0;
      // ACC2: the row offset made once and hidden from ptxas; else each chunk rebuilt dx's row pointer
      // (~12 instructions a chunk, rematerialized inside its `if (active)`).
      if constexpr (ACC2) {
        dxo *= p.dx_stride;
        asm volatile("" : "+l"(dxo));
      }
      X* dxr = ACC2 ? static_cast<X*>(p.dx) + dxo : row_ptr<X>(p.dx, dxo, p.dx_stride);
      const RowPtrs np = row_ptrs(nrow, nact);
      with_dres([&](auto hd_t) {
#pragma unroll
        for (int i = 0; i < NV; ++i) {
          if (!okc[i]) continue;
          if (active) {
            float d[VEC], xh[VEC], w[VEC], r[VEC];
            kp::unpack<T>(rdy[(st * NV + i) * bd], d);
            read_x(st, i, xh);
            read_w(i, w);
            read_dres(st, i, r, hd_t);
            dx_chunk(aw, ab, i, d, xh, w, r, rs, nmr, a, c, dxr, std::bool_constant<ACC2>{}, std::false_type{}, 0.f);
          }
          issue_chunk(st, i, np, nact, hd_t);
        }
      });
      kp::cp_async_commit();
    }
  }
  // WRP, pass 1 of row k1 (landed): its stats, the row sums and (without db) the dw accumulators,
  // then the team sum and the push of this CTA's sums to the cluster.
  template <typename CX>
  __device__ __forceinline__ void pass1_send(float (&aw)[E], uint4 (&wreg)[NWREG], float (*red)[64], CX& cx,
                                             float w_add, float w_add0, int k1, float& rs, float& nmr,
                                             float (&s2)[2]) const {
    const int st = k1 % S;
    read_stats(st, rs, nmr);
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      float d[VEC], xh[VEC], w[VEC];
      kp::unpack<T>(rdy[(st * NV + i) * bd], d);
      read_x(st, i, xh);
      // w_eff: the fp32 add of the smem copy; past the row 0, without a weight 1 (wreg is 0 there).
      const float add = okc[i] ? w_add : w_add0;
#pragma unroll
      for (int j = 0; j < WPP; ++j) kp::unpack<W>(w_packet(wreg, i, j), w + j * kp::Packet<W>::N);
#pragma unroll
      for (int q = 0; q < VEC; ++q) {
        w[q] += add;
        xh[q] = fmaf(xh[q], rs, nmr);
        if constexpr (!DB) aw[i * VEC + q] = fmaf(d[q], xh[q], aw[i * VEC + q]);
        const float g = d[q] * w[q];
        s2[0] = fmaf(g, xh[q], s2[0]);
        s2[1] += g;
      }
    }
    team_sum<FT>(s2, tpr, red[k1 & 1]);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (p.csize > 1) cx.send(k1, make_float4(s2[0], s2[1], 0.f, 0.f), p.csize);
#endif
  }
};

template <typename T, typename X, typename W, int E, bool WT, bool DB, int WRP, int FT>
__global__ void __launch_bounds__(kMaxThreads, E <= 8 ? 2 : 1) bwd_ring_kernel(const BwdParams p) {
  using R = BwdRing<T, X, W, E, WT, DB, WRP, FT>;
  constexpr int VEC = R::VEC, NV = R::NV, XPP = R::XPP, WPP = R::WPP;
  extern __shared__ uint4 ring_smem[];
  __shared__ float red[2][64];
  // The row sums of each CTA, pushed (no cluster barrier). WRP pushes row k + 1 before it waits
  // for row k: four buffers (kp::ClusterExchangeN).
  __shared__ kp::ClusterExchangeN<WRP ? 4 : 2> cx;

  kp::allow_dependents();  // col_sum may be scheduled once every CTA of this one-wave grid runs
  int cols_[NV];
  bool okc[NV];
  R ring(p, cx, cols_, okc);
  const int tid = ring.tid, bd = FT ? FT : ring.bd, tpr = FT ? FT : ring.tpr, S = ring.S;
  const int64_t my_team = ring.my_team, nteams = ring.nteams;
  const bool has_dres = ring.has_dres;
  // The ring's layout. Computed here rather than in BwdRing's constructor: built there, the
  // address math of the FT = 256 kernels compiled to different SASS.
  uint4* const rdy = ring_smem + tid;         // [S][NV][bd]
  uint4* const rx = rdy + S * NV * bd;        // [S][NV][XPP][bd]
  uint4* const rdr = rx + S * NV * XPP * bd;  // [S][NV][XPP][bd] when has_dres
  uint4* const ring_end = ring_smem + S * NV * (1 + (has_dres ? 2 : 1) * XPP) * bd;
  // WRP < 2: (mean, rstd) [S][2][bd] a thread, then w_eff [NV * VEC/4][bd] float4 (WRP = 0).
  // WRP = 2: raw w [NV * WPP][bd] uint4, then (mean, rstd) [S][2][bd / 32] a warp.
  const int stat_stride = R::CST ? bd >> 5 : bd;
  float* const rst = R::CST ? reinterpret_cast<float*>(ring_end + NV * WPP * bd) + (tid >> 5) : reinterpret_cast<float*>(ring_end) + tid;
  float4* const wsm = reinterpret_cast<float4*>(reinterpret_cast<float*>(ring_end) + 2 * S * bd) + tid;
  uint4* const wraw = ring_end + tid;
  // This thread's columns: chunk i starts at cols_[i] (the same every row); okc[i]: inside the row.
#pragma unroll
  for (int i = 0; i < NV; ++i) cols_[i] = ring.base + (i * tpr + ring.lane) * VEC, okc[i] = FT || cols_[i] < p.cols;
  ring.rdy = rdy, ring.rx = rx, ring.rdr = rdr, ring.ring_end = ring_end;
  ring.stat_stride = stat_stride, ring.rst = rst, ring.wsm = wsm, ring.wraw = wraw;

  uint4 wreg[R::NWREG];  // WRP: raw w, zeros past the row or without a weight
  if constexpr (WRP) {
#pragma unroll
    for (int i = 0; i < NV; ++i) ring.load_w_chunk(wreg, i);
  } else {  // w_eff once: fp32, thread-private slots (no barrier needed); as a member: other SASS
    // The weight dtype is a run-time branch here (read once a kernel, like the tile kernel's), so
    // fp32 weights of a 16-bit T run the kernel of T-wide weights: no W = float instantiations.
    auto stage_w_eff = [&](auto wtype) {
      using WL = decltype(wtype);
      constexpr int WPPL = VEC * static_cast<int>(sizeof(WL)) / 16;
      const WL* wp = static_cast<const WL*>(p.w);
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        float w[VEC];
        if (p.has_w && okc[i]) {
#pragma unroll
          for (int j = 0; j < WPPL; ++j)
            kp::unpack<WL>(kp::ld16<Ld::RO>(wp + cols_[i] + j * kp::Packet<WL>::N), w + j * kp::Packet<WL>::N);
#pragma unroll
          for (int q = 0; q < VEC; ++q) w[q] += p.w_off;
        } else {
#pragma unroll
          for (int q = 0; q < VEC; ++q) w[q] = p.has_w ? 0.f : 1.f;
        }
#pragma unroll
        for (int j = 0; j < VEC / 4; ++j) wsm[(i * (VEC / 4) + j) * bd] = make_float4(w[4 * j], w[4 * j + 1], w[4 * j + 2], w[4 * j + 3]);
      }
    };
    // FT twins never run with fp32 weights of a 16-bit T (plan_for_call): no branch there, so the
    // twins most benchmark widths run keep their code (with it, LayerNorm 16K read x0.989, H200).
    if constexpr (FT == 0) {
      if (sizeof(W) < sizeof(float) && p.w_f32) stage_w_eff(float{});
      else stage_w_eff(W{});
    } else {
      stage_w_eff(W{});
    }
  }

  // Rows 0 .. S-1 of this team, one cp.async group each; row k + S refills stage k % S during
  // row k's pass 2 (each slot right after its last read), so S rows are in flight at once.
  for (int s = 0; s < S; ++s) {
    const int64_t r = my_team + s * nteams;
    const typename R::RowPtrs rp = ring.row_ptrs(r, r < p.rows);
    ring.with_dres([&](auto hd_t) {
#pragma unroll
      for (int i = 0; i < NV; ++i) ring.issue_chunk(s, i, rp, r < p.rows && okc[i], hd_t);
    });
    ring.issue_stats(s, r);
    kp::cp_async_commit();
  }

  float aw[E], ab[R::EB];
#pragma unroll
  for (int j = 0; j < E; ++j) aw[j] = 0.f;
#pragma unroll
  for (int j = 0; j < R::EB; ++j) ab[j] = 0.f;
  const float inv_n = 1.f / static_cast<float>(p.cols);
  if constexpr (WRP) {
    // Row k's (rstd, -mean * rstd) and sums, from its pass 1 to its pass 2. Declared here, after
    // the accumulators: inside rows_pipelined they changed ptxas's register assignment.
    float rs = 0.f, nmr = 0.f, s2[2] = {0.f, 0.f};
    ring.rows_pipelined(aw, ab, wreg, rs, nmr, s2, inv_n, red, cx);
  } else {
    ring.rows(aw, ab, inv_n, red, cx);
  }
  kp::cp_async_wait(0);
  const Lay<T, E, true> lay{ring.base, ring.lane, tpr, p.cols};
  Geo g(tpr, p.csize);
  g.team = ring.team, g.tpc = ring.tpc;
  if constexpr (WT) __syncthreads();  // the ring becomes the merge buffer
  write_partials<WT>(aw, ab, lay, p, g, ring.part, reinterpret_cast<float*>(ring_smem));
}

// ---- direct kernel: scalar loads (unaligned rows / odd widths), next row prefetched in registers -
// Grid and dynamic smem as bwd_ring_kernel (warp teams: merge buffer only).
template <typename T, typename X>
__global__ void __launch_bounds__(kMaxThreads) bwd_direct_kernel(const BwdParams p) {
  constexpr int E = 8;
  using L = Lay<T, E, false>;
  constexpr int VEC = L::VEC, NV = L::NV;
  extern __shared__ float merge_smem[];
  __shared__ float red[2][64];
  __shared__ float slot[2][2];
  kp::allow_dependents();  // as bwd_ring_kernel
  const Geo g(p.tpr, p.csize);
  const L lay{g.crank * p.tpr * E, g.lane, p.tpr, p.cols};
  float aw[E], ab[E];
#pragma unroll
  for (int j = 0; j < E; ++j) aw[j] = ab[j] = 0.f;
  Raw<T, T, E, false> rdy;
  Raw<T, X, E, false> rx;
  float nmu = 0.f, nrs = 0.f;
  auto fetch = [&](int64_t r) {
    const bool act = r < p.rows;
    rdy.load(lay, row_ptr<T>(p.dy, r, p.dy_stride), act);
    rx.load(lay, row_ptr<X>(p.x, r, p.x_stride), act);
    nmu = act && !p.is_rms ? p.mean[r] : 0.f;
    nrs = act ? p.rstd[r] : 0.f;
  };
  fetch(g.my_team);
  const float inv_n = 1.f / static_cast<float>(p.cols);
  int k = 0;
  for (int64_t lead = g.lead0; lead < p.rows; lead += g.nteams, ++k) {
    const int64_t row = g.my_team + (lead - g.lead0);
    const bool active = row < p.rows;
    float d[E], xh[E];
    rdy.decode(d);
    rx.decode(xh);
    const float mu = nmu, rs = nrs;
    fetch(row + g.nteams);  // the next row's loads overlap this row's work
    float s[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      float w[VEC];
      load_w(lay, p, i, w, active);
#pragma unroll
      for (int q = 0; q < VEC; ++q) {
        const int j = i * VEC + q;
        xh[j] = (xh[j] - mu) * rs;
        aw[j] = fmaf(d[j], xh[j], aw[j]);
        ab[j] += d[j];
        d[j] *= w[q];  // g
        s[0] = fmaf(d[j], xh[j], s[0]);
        s[1] += d[j];
      }
    }
    bwd_row_sums(s, p, red[k & 1], slot[k & 1]);
    const float a = s[0] * inv_n, c = p.is_rms ? 0.f : s[1] * inv_n;
    X* dxr = row_ptr<X>(p.dx, row, p.dx_stride);
    const X* drr = p.dres ? row_ptr<X>(p.dres, row, p.dres_stride) : nullptr;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      float o[VEC], r[VEC];
      load_dres<X>(lay, drr, i, r, active);
#pragma unroll
      for (int q = 0; q < VEC; ++q) o[q] = fmaf(rs, d[i * VEC + q] - c - xh[i * VEC + q] * a, r[q]);
      lay.template store<X>(dxr, i, o, active);
    }
  }
  if (p.tpr <= 32) write_partials<true>(aw, ab, lay, p, g, blockIdx.x / p.csize, merge_smem);
  else write_partials<false>(aw, ab, lay, p, g, blockIdx.x / p.csize, merge_smem);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (p.csize > 1) kp::cluster_sync();
#endif
}

// ---- tile kernel: rows of 1K-4K, M rows a tile loaded straight into registers -------------------
// One CTA is the team (tpr = blockDim threads, E columns each) and one partial. Persistent: CTA c
// takes the tiles of M consecutive rows c, c + grid, ... For each tile it issues every load of the
// M rows (dy, x, dres, the stats) before the first use, so M rows a CTA are in flight, then one
// block reduction sums the 2M row sums together (the ring kernel pays a reduction and its barrier
// a row: at 2K that fixed cost is a large share of a 4 KB row). Pass 2 decodes the packets again
// (the registers hold raw 16-byte packets, half the bytes of floats for 16-bit dtypes). Loads are
// in registers, not a cp.async ring: occupancy (several CTAs an SM) keeps DRAM busy while one CTA
// reduces. w_eff lives in registers as fp32 for the whole kernel.
// HD: dres is given (compile-time, so the no-dres kernel spends no registers on it).
template <typename T, typename X, int E, int M, bool DB, bool HD>
__global__ void __launch_bounds__(kTileMaxThreads, 2) bwd_tile_kernel(const BwdParams p) {
  using L = Lay<T, E, true>;
  constexpr int VEC = L::VEC, NV = L::NV;
  __shared__ float red[2][32 * 2 * M];
  kp::allow_dependents();  // as bwd_ring_kernel
  const int tid = threadIdx.x, tpr = blockDim.x;
  const L lay{0, tid, tpr, p.cols};
  float w[E];  // w_eff once (a run-time branch on the weight dtype, not a template: read once)
#pragma unroll
  for (int i = 0; i < NV; ++i) load_w(lay, p, i, w + i * VEC, true);
  float aw[E], ab[DB ? E : 1];
#pragma unroll
  for (int j = 0; j < E; ++j) aw[j] = 0.f;
#pragma unroll
  for (int j = 0; j < (DB ? E : 1); ++j) ab[j] = 0.f;
  const float inv_n = 1.f / static_cast<float>(p.cols);
  const int64_t step = static_cast<int64_t>(gridDim.x) * M;
  int k = 0;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.x) * M; r0 < p.rows; r0 += step, ++k) {
    Raw<T, T, E, true> rdy[M];
    Raw<T, X, E, true> rx[M];
    Raw<T, X, E, true> rdr[HD ? M : 1];
    float rs[M], nmr[M];
#pragma unroll
    for (int m = 0; m < M; ++m) {  // every load of the tile first: M rows in flight
      const int64_t row = r0 + m;
      const bool act = row < p.rows;
      const int64_t rr = act ? row : 0;
      rdy[m].load(lay, row_ptr<T>(p.dy, rr, p.dy_stride), act);
      rx[m].load(lay, row_ptr<X>(p.x, rr, p.x_stride), act);
      if constexpr (HD) rdr[m].load(lay, row_ptr<X>(p.dres, rr, p.dres_stride), act);
      const float r = act ? __ldg(p.rstd + row) : 0.f;
      const float mu = act && !p.is_rms ? __ldg(p.mean + row) : 0.f;
      rs[m] = r, nmr[m] = -mu * r;
    }
    // Pass 1: the row sums and the dw (and db) accumulators; inactive rows read dy = 0.
    float s[2 * M];
#pragma unroll
    for (int j = 0; j < 2 * M; ++j) s[j] = 0.f;
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        float d[VEC], xh[VEC];
        rdy[m].decode_chunk(i, d);
        rx[m].decode_chunk(i, xh);
#pragma unroll
        for (int q = 0; q < VEC; ++q) {
          const int j = i * VEC + q;
          const float xq = fmaf(xh[q], rs[m], nmr[m]);
          aw[j] = fmaf(d[q], xq, aw[j]);
          if constexpr (DB) ab[j] += d[q];
          const float g = d[q] * w[j];
          s[2 * m] = fmaf(g, xq, s[2 * m]);
          s[2 * m + 1] += g;
        }
      }
    kp::block_sum<2 * M>(s, red[k & 1]);
#pragma unroll
    for (int m = 0; m < M; ++m) {  // decode again in pass 2: pass 1's floats would take 2x the registers
      rdy[m].opaque();
      rx[m].opaque();
    }
    // Pass 2: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) [+ dres], rounded once to X.
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const int64_t row = r0 + m;
      if (row >= p.rows) continue;
      const float a = s[2 * m] * inv_n, c = p.is_rms ? 0.f : s[2 * m + 1] * inv_n;
      X* dxr = row_ptr<X>(p.dx, row, p.dx_stride);
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        if (!lay.ok(i, 0)) continue;
        float d[VEC], xh[VEC], o[VEC];
        rdy[m].decode_chunk(i, d);
        rx[m].decode_chunk(i, xh);
        if constexpr (HD) rdr[m].decode_chunk(i, o);
#pragma unroll
        for (int q = 0; q < VEC; ++q) {
          const float xq = fmaf(xh[q], rs[m], nmr[m]);
          o[q] = fmaf(rs[m], fmaf(-xq, a, fmaf(d[q], w[i * VEC + q], -c)), HD ? o[q] : 0.f);
        }
        lay.template store<X>(dxr, i, o, true);
      }
    }
  }
  Geo g(tpr, 1);
  write_partials<false>(aw, ab, lay, p, g, blockIdx.x, nullptr);
}

// ---- multi-pass fallback: one CTA per partial, rows streamed in tiles ---------------------------
// Pass 1: the two row sums (lines kept in L2); pass 2: re-read, dx, and read-modify-write of this
// CTA's own fp32 partial row (no other CTA touches it). For rows too wide for registers + clusters.
template <typename T, typename X, bool VECTOR>
__global__ void __launch_bounds__(kMultiThreads) bwd_multipass_kernel(const BwdParams p) {
  constexpr int E = 8;
  using L = Lay<T, E, VECTOR>;
  constexpr int VEC = L::VEC, NV = L::NV;
  __shared__ float red[2][64];
  kp::allow_dependents();  // as bwd_ring_kernel
  const int tid = threadIdx.x, tpr = blockDim.x, tile = tpr * E;
  const int64_t part = blockIdx.x, nparts = gridDim.x;
  float* dwr = p.dw ? p.dw + part * p.cols : nullptr;
  float* dbr = p.db ? p.db + part * p.cols : nullptr;
  const float inv_n = 1.f / static_cast<float>(p.cols);
  const float zero[VEC] = {};
  for (int base = 0; base < p.cols; base += tile) {
    const L lay{base, tid, tpr, p.cols};
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      if (dwr) lay.template store<float>(dwr, i, zero, true);
      if (dbr) lay.template store<float>(dbr, i, zero, true);
    }
  }
  int it = 0;
  for (int64_t row = part; row < p.rows; row += nparts, ++it) {
    const float mu = p.is_rms ? 0.f : p.mean[row], rs = p.rstd[row];
    const T* dyr = row_ptr<T>(p.dy, row, p.dy_stride);
    const X* xr = row_ptr<X>(p.x, row, p.x_stride);
    float s[2] = {0.f, 0.f};
    for (int base = 0; base < p.cols; base += tile) {
      const L lay{base, tid, tpr, p.cols};
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        float d[VEC], x[VEC], w[VEC];
        lay.template load<T, Ld::L2>(dyr, i, d, true);
        lay.template load<X, Ld::L2>(xr, i, x, true);
        load_w(lay, p, i, w, true);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float g = d[k] * w[k];
          s[0] = fmaf(g, (x[k] - mu) * rs, s[0]);
          s[1] += g;
        }
      }
    }
    kp::block_sum(s, red[it & 1]);
    const float a = s[0] * inv_n, c = p.is_rms ? 0.f : s[1] * inv_n;
    X* dxr = row_ptr<X>(p.dx, row, p.dx_stride);
    const X* drr = p.dres ? row_ptr<X>(p.dres, row, p.dres_stride) : nullptr;
    for (int base = 0; base < p.cols; base += tile) {
      const L lay{base, tid, tpr, p.cols};
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        float d[VEC], x[VEC], w[VEC], r[VEC], o[VEC];
        lay.template load<T, Ld::Stream>(dyr, i, d, true);
        lay.template load<X, Ld::Stream>(xr, i, x, true);
        load_w(lay, p, i, w, true);
        load_dres<X>(lay, drr, i, r, true);
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          x[k] = (x[k] - mu) * rs;  // xhat
          o[k] = fmaf(rs, d[k] * w[k] - c - x[k] * a, r[k]);
        }
        lay.template store<X>(dxr, i, o, true);
        if (dwr) {
          float acc[VEC];
          lay.template load<float, Ld::L2>(dwr, i, acc, true);
#pragma unroll
          for (int k = 0; k < VEC; ++k) acc[k] = fmaf(d[k], x[k], acc[k]);
          lay.template store<float>(dwr, i, acc, true);
        }
        if (dbr) {
          float acc[VEC];
          lay.template load<float, Ld::L2>(dbr, i, acc, true);
#pragma unroll
          for (int k = 0; k < VEC; ++k) acc[k] += d[k];
          lay.template store<float>(dbr, i, acc, true);
        }
      }
    }
  }
}

template <typename T, typename X, typename W, int E, bool WT, bool DB, int WRP, int FT>
BwdKernel bwd_ring_ptr() {
  return bwd_ring_kernel<T, X, W, E, WT, DB, WRP, FT>;
}
template <typename T, typename X>
BwdKernel bwd_direct_ptr() {
  return bwd_direct_kernel<T, X>;
}
template <typename T, typename X, int E, int M, bool DB, bool HD>
BwdKernel bwd_tile_ptr() {
  return bwd_tile_kernel<T, X, E, M, DB, HD>;
}
template <typename T, typename X, bool VECTOR>
BwdKernel bwd_multipass_ptr() {
  return bwd_multipass_kernel<T, X, VECTOR>;
}

}  // namespace kp_norm
