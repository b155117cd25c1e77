// Forward RMSNorm / LayerNorm (+ fused residual add). One read of x (and res), one write of y (and
// res_out): the row stays on chip between the statistics and the output, so the kernels move the
// minimum bytes. Rows up to 16384 take the direct kernel (the row in registers, one row per team,
// specialized per op so its loops have no branches). Wider rows take the persistent ring kernel
// (the row staged in shared memory by cp.async), split over a thread-block cluster (sm90) whose
// CTAs push their partial statistics into each other's shared memory (kp::ClusterExchange).
// Unaligned rows take the direct kernel's scalar path; rows too wide for a cluster, or GPUs
// without clusters, a multi-pass kernel.
// The kernel definitions; included by the translation units that instantiate them.
#pragma once
#include <algorithm>
#include <string>
#include <type_traits>

#include "fwd_kernels.h"
#include "kp/error.cuh"
#include "kp/launch.cuh"

namespace kp_norm {


using kp::Ld;

// ---- pieces shared by the kernels ---------------------------------------------------------------

// Cache policies of the direct kernel's x loads and y stores, one int template parameter (the
// tuning build instantiates the compile-time-geometry twins for each; release builds kFwdPol only).
// x is read once, yet loading it with an L2 evict_last policy measured 0.5-1.5 points of copy
// faster than a plain load at every hidden size from 1K to 16K (H100, docs/journal/kp-norm.md, session 8), and
// evict-first (.cs, or an L2 evict_first policy) 1 point slower. Why is not established; the
// policy changes which lines L2 evicts first, the clean read-once x or the dirty y, and so when
// y's write-backs reach DRAM. Inductor's looped kernels load x evict_last in their first pass.
//   0: x plain, y plain            1: x L2 evict_last, y plain
//   2: x L2 evict_last, y .cs      3: x L2 evict_last, y L2 evict_first
template <int POL>
constexpr kp::Ld kFwdXLd = POL == 0 ? kp::Ld::Plain : kp::Ld::L2Last;
template <int POL>
constexpr kp::St kFwdYSt = POL == 2 ? kp::St::Stream : POL == 3 ? kp::St::L2First : kp::St::Plain;
// 4 (tuning builds): policy 1 with the LayerNorm twins' two reductions a row (see direct_body).
template <int POL>
constexpr bool kFwdLnOneReduction = POL != 4;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// LayerNorm over a cluster: each CTA pushes (sum, M2 about its own mean, n[, its mean]) of its
// slice (see ClusterExchange); M2 = sum_r M2_r + n_r (mean_r - mean)^2 (Chan et al.), in rank
// order. The ring kernel runs this every row in every thread, so it sends mean_r (SENT_MEAN: an
// IEEE division per rank here cost the 8-CTA LayerNorm more instructions than a quarter of its
// output pass); the direct kernel divides here (one row a CTA, and the extra live register of the
// sent mean made its 64-register LayerNorm spill: 97 -> 77% of copy at 1K-16K).
template <bool SENT_MEAN>
__device__ __forceinline__ void chan_merge(const float4* r, int csize, float inv_cols, float& mean, float& m2) {
  float s = 0.f;
  for (int i = 0; i < csize; ++i) s += r[i].x;
  mean = s * inv_cols;
  m2 = 0.f;
  for (int i = 0; i < csize; ++i) {
    const float4 v = r[i];
    // n_r = 0 (a slice past the row) has sum 0 and mean_r 0: its term is 0.
    const float dm = SENT_MEAN ? v.w - mean : v.z > 0.f ? v.x / v.z - mean : 0.f;
    m2 += fmaf(v.z * dm, dm, v.y);
  }
}
#endif

// The output loops come in one copy per (weight?, bias?, offset != 0?) so their bodies have no
// branches: the point of these kernels is to issue few instructions per element (DESIGN.md).
// `loop(hw, hb, ho)` receives std::true_type / std::false_type for the three; picked once per row.
template <bool RMS, typename Loop>
__device__ __forceinline__ void with_affine_variant(const FwdParams& p, Loop&& loop) {
  using Y = std::true_type;
  using N = std::false_type;
  const bool off = p.w_off != 0.f;
  if (p.has_w) {
    if (!RMS && p.has_b) {
      if (off) loop(Y{}, Y{}, Y{});
      else loop(Y{}, Y{}, N{});
    } else {
      if (off) loop(Y{}, N{}, Y{});
      else loop(Y{}, N{}, N{});
    }
  } else {
    if (!RMS && p.has_b) loop(N{}, Y{}, N{});
    else loop(N{}, N{}, N{});
  }
}

// One output element: (h - mean) * rstd * (w + offset) + b, with the absent terms compiled out.
// LayerNorm normalizes as fma(h, rstd, nmr), nmr = -mean * rstd: one instruction an element less
// than (h - mean) * rstd. Rounding mean * rstd costs 2^-24 |mean| rstd, the size of the error the
// fp32 mean already carries into h - mean, so the error at most doubles where it is not negligible.
template <bool RMS, bool HW, bool HB, bool HO>
__device__ __forceinline__ float affine_out(float h, float nmr, float rstd, float w, float b, float w_off) {
  float n = RMS ? h * rstd : fmaf(h, rstd, nmr);
  if constexpr (HW) n *= HO ? w + w_off : w;
  return HB ? n + b : n;
}

// ---- ring kernel: persistent; each row staged in smem by cp.async and read from there ----------
// Grid: as many CTAs (clusters) as are resident at once, at most one team per row. Each team strides
// over rows; while it works on row k, rows k+1 .. k+stages are being copied into its ring (a slot
// is refilled as soon as the output pass has read it). The row is read from the ring once per pass
// (RMS: statistics, output; LayerNorm: mean, M2, output; +1 with a residual, which writes h back
// into the ring), so registers don't grow with the row.
// A thread holds nv <= kRingNV 16-byte chunks of a row (a run-time value; loops run to the
// compile-time bound with the chunks past nv predicated off, so they unroll into straight code).
// A thread reads only the packets it copied itself: cp.async.wait_group is the only
// synchronization the ring needs. The team is the CTA (x csize: a cluster); narrower rows take
// the direct kernel. Dynamic smem: x ring [stages][nv][blockDim] packets, then the res ring
// [stages][nv][rppc][blockDim], then (WS) the weight and bias slices [nv][wpp][blockDim].

// Where the output pass finds the weight (and bias) slice of a thread (see plan_fwd for when):
// kWL2: read from global memory (L2) every row; kWSmem: staged in smem once; kWReg: held in
// registers as raw packets from the start (one CTA an SM, so 128 registers and all the smem to
// spend on the ring). kWL2/kWSmem RMSNorm without a residual: three 512-thread CTAs an SM, <= 40
// registers a thread; LayerNorm and residual kernels two (at 40 registers LayerNorm spilled and
// ran 8 points slower).
// FT > 0 (kWReg only): the row is exactly csize CTAs x FT threads x kRingNV chunks (16-bit hidden
// 32K-256K with 512 threads, 16K with 256, 8K with 128), so the geometry is compile-time: a
// chunk's smem and global offsets become immediates and no chunk needs a bounds check. With the
// run-time geometry, addressing and predication were ~35 of the ~85 SASS instructions per
// 8-element chunk of the output pass.

// A thread's share of the ring kernel: its columns, its slots in the smem rings, and the passes
// over a staged row. Built once a kernel; a thread's columns are the same every row.
template <typename T, typename W, bool RES, bool RMS, int WM, int FT>
struct FwdRing {
  static constexpr bool WS = WM == kWSmem, WR = WM == kWReg, FULL = FT > 0;
  static constexpr int VEC = 16 / sizeof(T), NVM = kRingNV;
  static constexpr int WPP = VEC * static_cast<int>(sizeof(W)) / 16, WPN = kp::Packet<W>::N;  // weight packets a chunk, values a packet
  // kWReg: 16-bit weights and bias of 8 chunks are 2 x 32 registers; zeros past the row.
  static constexpr int NWREG = WR ? NVM * WPP : 1, NBREG = WR && !RMS ? NVM * WPP : 1;

  const FwdParams& p;
  const int tid, S, bd, tpr, nv, crank;
  const int64_t my_team, nteams;  // this team takes rows my_team, my_team + nteams, ...
  const int base;
  int rppc;  // residual packets a chunk (fp32 res of a 16-bit act: 2)
  uint4* xring;
  uint4* rring;
  // Weights (and bias) of this CTA's slice, staged once: the slice is the same every row, and with
  // the smem carve-out at its maximum L1 cannot keep them (ncu at 65536: 4-8% L1 hits, so every
  // row re-read its weights from L2: as many bytes again as x for RMSNorm, twice for LayerNorm).
  uint4* wring;
  uint4* bring;
  // This thread's chunk i starts at column col(i) (the same every row); in(i): it is in the row.
  // Recomputed where used: an IMAD is cheaper than the registers that 3 CTAs an SM cannot spare.
  int c0, cstep;
  int esz;

  // Also starts the cluster exchange (its mbarriers), between the geometry and the slots: moving
  // it changes how ptxas schedules the kernel's start.
  template <typename CX>
  __device__ __forceinline__ FwdRing(const FwdParams& prm, uint4* smem, CX& cx)
      : p(prm), tid(threadIdx.x), S(prm.stages), bd(FULL ? FT : blockDim.x), tpr(FULL ? FT : prm.tpr),
        nv(FULL ? NVM : prm.nv), crank(static_cast<int>(blockIdx.x % prm.csize)), my_team(blockIdx.x / prm.csize),
        nteams(gridDim.x / prm.csize), base(crank * tpr * nv * VEC) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (p.csize > 1) cx.init(p.csize);
#endif
    rppc = RES && p.res_f32 ? VEC / 4 : 1;
    xring = smem + tid;
    rring = smem + S * nv * bd + tid;
    wring = smem + S * nv * bd * (RES ? 1 + rppc : 1) + tid;
    bring = wring + nv * WPP * bd;
    c0 = base + tid * VEC, cstep = tpr * VEC;
    esz = RES && p.res_f32 ? 4 : static_cast<int>(sizeof(T));
  }

  __device__ __forceinline__ int col(int i) const { return c0 + i * cstep; }
  __device__ __forceinline__ bool in(int i) const { return FULL ? i < NVM : i < nv && col(i) < p.cols; }
  __device__ __forceinline__ const char* res_row(int64_t r) const {
    return static_cast<const char*>(p.res) + r * p.res_stride * esz;
  }

  // Chunk i of row r into stage s (zeros where ok is false: chunks past the row read as 0).
  __device__ __forceinline__ void issue_chunk(int s, int i, const T* xrow, const char* rrow, bool ok) const {
    kp::cp_async16(xring + (s * nv + i) * bd, ok ? static_cast<const void*>(xrow + col(i)) : p.x, ok);
    if constexpr (RES) {
      for (int j = 0; j < rppc; ++j)
        kp::cp_async16(rring + ((s * nv + i) * rppc + j) * bd,
                       ok ? static_cast<const void*>(rrow + (col(i) * esz + 16 * j)) : p.res, ok);
    }
  }
  __device__ __forceinline__ void issue(int s, int64_t r) const {
    const bool act = r < p.rows;
    const T* xrow = row_ptr<T>(p.x, act ? r : 0, p.x_stride);
    const char* rrow = RES ? res_row(act ? r : 0) : nullptr;
#pragma unroll
    for (int i = 0; i < NVM; ++i)
      if (i < nv) issue_chunk(s, i, xrow, rrow, act && in(i));
    kp::cp_async_commit();  // one group per row, empty or not, so the wait counts stay uniform
  }
  // Chunk i of h (x, or x + res rounded to res_dtype once pass 0 has written it to the res ring).
  __device__ __forceinline__ void read_h(int s, int i, float* h) const {
    if constexpr (RES) {
      if (p.res_f32) {
        for (int j = 0; j < rppc; ++j) kp::unpack<float>(rring[((s * nv + i) * rppc + j) * bd], h + 4 * j);
      } else {
        kp::unpack<T>(rring[(s * nv + i) * bd], h);
      }
    } else {
      kp::unpack<T>(xring[(s * nv + i) * bd], h);
    }
  }

  // kWSmem: copy this thread's weight (and bias) packets into its smem slots, once. Issued before
  // the first row's copies, so the first row's wait covers them.
  __device__ __forceinline__ void stage_weights() const {
    const bool hb = !RMS && p.has_b;
#pragma unroll
    for (int i = 0; i < NVM; ++i) {
      if (!in(i)) continue;
      for (int j = 0; j < WPP; ++j) {
        if (p.has_w) kp::cp_async16(wring + (i * WPP + j) * bd, static_cast<const W*>(p.w) + col(i) + j * WPN, true);
        if (hb) kp::cp_async16(bring + (i * WPP + j) * bd, static_cast<const W*>(p.b) + col(i) + j * WPN, true);
      }
    }
  }

  // This CTA's statistics of the row in stage st (after pass 0, which with a residual writes
  // h = x + res, rounded to res_dtype, into the res ring and res_out). RMS: (sum of squares, -, -, -).
  // LayerNorm, exact two-pass over the slice: (sum, M2 about the slice mean, valid columns, slice
  // mean); FT twins merge per-thread (mean, M2) pairs instead (one reduction). Chunks past the row
  // read 0. nred: which of the two reduction buffers is next.
  __device__ __forceinline__ float4 local_stats(int st, int64_t row, float (*red)[32], int& nred) const {
    if constexpr (RES) {
      char* orow = p.has_res_out ? static_cast<char*>(p.res_out) + row * p.res_out_stride * esz : nullptr;
#pragma unroll
      for (int i = 0; i < NVM; ++i) {
        if (i >= nv) continue;
        float h[VEC], r[VEC];
        kp::unpack<T>(xring[(st * nv + i) * bd], h);
        if (p.res_f32) {
          for (int j = 0; j < rppc; ++j) kp::unpack<float>(rring[((st * nv + i) * rppc + j) * bd], r + 4 * j);
#pragma unroll
          for (int q = 0; q < VEC; ++q) h[q] += r[q];
          for (int j = 0; j < rppc; ++j) {
            const uint4 pk = kp::pack<float>(h + 4 * j);
            rring[((st * nv + i) * rppc + j) * bd] = pk;
            if (orow && in(i)) kp::st16(orow + col(i) * 4 + 16 * j, pk);
          }
        } else {
          kp::unpack<T>(rring[(st * nv + i) * bd], r);
#pragma unroll
          for (int q = 0; q < VEC; ++q) h[q] += r[q];
          const uint4 pk = kp::pack<T>(h);  // the rounding to res_dtype
          rring[(st * nv + i) * bd] = pk;
          if (orow && in(i)) kp::st16(orow + col(i) * sizeof(T), pk);
        }
      }
    }
    // kWReg: four independent sums a thread: one CTA an SM leaves 4 warps a scheduler, too few to
    // hide a 64-long chain of dependent FADDs (ncu: "wait" stalls were the largest share). The
    // 2-3 CTA kernels have the warps but not the registers.
    constexpr int NA = WR ? 4 : 1;
    float c4[4] = {0.f, 0.f, 0.f, 0.f};
    float a[1];
#pragma unroll
    for (int i = 0; i < NVM; ++i) {
      if (i >= nv) continue;
      float h[VEC];
      read_h(st, i, h);
#pragma unroll
      for (int q = 0; q < VEC; ++q) c4[q % NA] = RMS ? fmaf(h[q], h[q], c4[q % NA]) : c4[q % NA] + h[q];
    }
    a[0] = NA == 1 ? c4[0] : (c4[0] + c4[1]) + (c4[2] + c4[3]);
    if constexpr (!RMS && FULL) {
      // One reduction a row, as the direct twins: this thread's mean and M2 about it, merged over
      // the CTA (team_mean_m2), instead of a CTA sum for the slice mean and another for M2
      // (H100 LayerNorm 32K-256K: +0.1-0.2 points of copy in two interleaved rounds).
      constexpr float kE = NVM * VEC, kSlice = FT * kE;
      float mean = a[0] * (1.f / kE);
      // Read the ring again rather than keep the first pass's 64 values live across it: with no
      // barrier between the passes ptxas reused the loads (128 registers, spilled). A warp
      // barrier orders shared memory, so the loads stay.
      __syncwarp();
      c4[0] = c4[1] = c4[2] = c4[3] = 0.f;
#pragma unroll
      for (int i = 0; i < NVM; ++i) {
        float h[VEC];
        read_h(st, i, h);
#pragma unroll
        for (int q = 0; q < VEC; ++q) c4[q % NA] = fmaf(h[q] - mean, h[q] - mean, c4[q % NA]);
      }
      float m2 = NA == 1 ? c4[0] : (c4[0] + c4[1]) + (c4[2] + c4[3]);
      team_mean_m2<FT>(mean, m2, kE, reinterpret_cast<float2*>(red[nred++ & 1]));
      return make_float4(mean * kSlice, m2, kSlice, mean);
    }
    team_sum<FT>(a, tpr, red[nred++ & 1]);
    if constexpr (RMS) return make_float4(a[0], 0.f, 0.f, 0.f);
    const float s_here = a[0];
    const int n_here = FULL ? tpr * nv * VEC : max(0, min(tpr * nv * VEC, p.cols - base));  // valid columns of this CTA's slice
    const float mean = n_here > 0 ? __fdividef(s_here, static_cast<float>(n_here)) : 0.f;
    c4[0] = c4[1] = c4[2] = c4[3] = 0.f;
#pragma unroll
    for (int i = 0; i < NVM; ++i) {
      if (!in(i)) continue;
      float h[VEC];
      read_h(st, i, h);
#pragma unroll
      for (int q = 0; q < VEC; ++q) c4[q % NA] = fmaf(h[q] - mean, h[q] - mean, c4[q % NA]);
    }
    a[0] = NA == 1 ? c4[0] : (c4[0] + c4[1]) + (c4[2] + c4[3]);
    team_sum<FT>(a, tpr, red[nred++ & 1]);
    return make_float4(s_here, a[0], static_cast<float>(n_here), mean);
  }
  // Push row k's partial to every CTA of the cluster (the sum and the merge wait for the others').
  template <typename CX>
  __device__ __forceinline__ void send_stats(CX& cx, int k, const float4& v) const {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (p.csize > 1) cx.send(k, v, p.csize);
#endif
  }
  // Row statistics from this CTA's partial v (and, in a cluster, everyone's for row k): mean, m2.
  // LayerNorm merges the CTA partials (sum, M2, n) with Chan's formula.
  template <typename CX>
  __device__ __forceinline__ void row_stats(CX& cx, int k, const float4& v, float& mean, float& m2) const {
    mean = RMS ? 0.f : v.w;
    m2 = RMS ? v.x : v.y;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (p.csize > 1) {
      const float4* r = cx.wait(k, p.csize);
      if constexpr (RMS) {
        m2 = 0.f;
        for (int i = 0; i < p.csize; ++i) m2 += r[i].x;
      } else {
        chan_merge<true>(r, p.csize, p.inv_cols, mean, m2);
      }
    }
#endif
  }

  // Chunk i's weight and bias as floats, from wherever WM keeps them.
  template <bool HW, bool HB>
  __device__ __forceinline__ void read_affine(int i, float* w, float* b, const uint4 (&wreg)[NWREG],
                                              const uint4 (&breg)[NBREG]) const {
    if constexpr (WS) {
      for (int j = 0; j < WPP; ++j) {
        if constexpr (HW) kp::unpack<W>(wring[(i * WPP + j) * bd], w + j * WPN);
        if constexpr (HB) kp::unpack<W>(bring[(i * WPP + j) * bd], b + j * WPN);
      }
    } else if constexpr (WR) {
#pragma unroll
      for (int j = 0; j < WPP; ++j) {
        if constexpr (HW) kp::unpack<W>(wreg[i * WPP + j], w + j * WPN);
        if constexpr (HB) kp::unpack<W>(breg[(RMS ? 0 : i * WPP + j)], b + j * WPN);
      }
    } else {
      if constexpr (HW) kp::ld_chunk<W, VEC, Ld::RO>(static_cast<const W*>(p.w) + col(i), w);
      if constexpr (HB) kp::ld_chunk<W, VEC, Ld::RO>(static_cast<const W*>(p.b) + col(i), b);
    }
  }
  // kWReg, once a row: else the decoded fp32 weights get hoisted out of the row loop (2x the registers).
  static __device__ __forceinline__ void opaque_weights(uint4 (&wreg)[NWREG], uint4 (&breg)[NBREG]) {
#pragma unroll
    for (int j = 0; j < NVM * WPP; ++j) {
      kp::opaque(wreg[j]);
      if constexpr (!RMS) kp::opaque(breg[j]);
    }
  }
  // Chunk i of y for the row in stage st; then, when there is a row `stages` ahead (nx, nr), its
  // copy into the slot just read.
  template <bool HW, bool HB, bool HO>
  __device__ __forceinline__ void write_chunk(int st, int i, float nmr, float rstd, T* yr, const T* nx, const char* nr,
                                              bool more, const uint4 (&wreg)[NWREG], const uint4 (&breg)[NBREG]) const {
    if (!in(i)) return;
    float h[VEC], w[VEC], b[VEC], o[VEC];
    read_affine<HW, HB>(i, w, b, wreg, breg);
    read_h(st, i, h);
#pragma unroll
    for (int q = 0; q < VEC; ++q) o[q] = affine_out<RMS, HW, HB, HO>(h[q], nmr, rstd, w[q], b[q], p.w_off);
    kp::st_chunk<T, VEC>(yr + col(i), o);
    if (more) issue_chunk(st, i, nx, nr, true);
  }
};

template <typename T, typename W, bool RES, bool RMS, int WM, int FT>
__global__ void __launch_bounds__(kMaxThreads, WM == kWReg ? 1 : RMS && !RES ? 3 : 2) fwd_ring_kernel(const FwdParams p) {
  using R = FwdRing<T, W, RES, RMS, WM, FT>;
  constexpr bool PIPE = R::WR;
  extern __shared__ uint4 ring_smem[];
  __shared__ __align__(16) float red[2][32];  // float2 [16] each for team_mean_m2
  __shared__ kp::ClusterExchangeN<PIPE ? 4 : 2> cx;  // one partial per CTA per row, pushed (no cluster barrier)

  const R ring(p, ring_smem, cx);
  const int S = ring.S;
  const int64_t my_team = ring.my_team, nteams = ring.nteams;
  // kWReg: the weights (and bias) as raw packets. Loaded here, not in a FwdRing member: there the
  // loop compiled to different SASS (inlined helpers are optimized before their caller).
  uint4 wreg[R::NWREG], breg[R::NBREG];
  if constexpr (R::WR) {
    constexpr int NVM = R::NVM, WPP = R::WPP, WPN = R::WPN;
#pragma unroll
    for (int i = 0; i < NVM; ++i)
#pragma unroll
      for (int j = 0; j < WPP; ++j) {
        const bool ok = ring.in(i);
        wreg[i * WPP + j] = ok && p.has_w ? kp::ld16<Ld::RO>(static_cast<const W*>(p.w) + ring.col(i) + j * WPN) : make_uint4(0, 0, 0, 0);
        if constexpr (!RMS)
          breg[i * WPP + j] = ok && p.has_b ? kp::ld16<Ld::RO>(static_cast<const W*>(p.b) + ring.col(i) + j * WPN) : make_uint4(0, 0, 0, 0);
      }
  }
  if constexpr (R::WS) ring.stage_weights();  // joins the first row's cp.async group
  for (int s = 0; s < S; ++s) ring.issue(s, my_team + s * nteams);

  int nred = 0;  // which of the two reduction buffers is next
  // A lambda capturing nred, as the kernel had it: nred passed by reference at each call changed
  // the register allocation of the LayerNorm kWReg kernels.
  auto local_stats = [&](int st, int64_t row) { return ring.local_stats(st, row, red, nred); };
  // PIPE: the statistics of row k + 1 are computed (and sent) before row k's are merged, so the
  // cluster exchange of row k overlaps a whole pass of work (needs S >= 2: row k + 1 is in the ring).
  float4 cur = make_float4(0.f, 0.f, 0.f, 0.f);
  if (PIPE && my_team < p.rows) {
    kp::cp_async_wait(S - 1);
    cur = local_stats(0, my_team);
    ring.send_stats(cx, 0, cur);
  }
  int k = 0;
  for (int64_t row = my_team; row < p.rows; row += nteams, ++k) {  // the same trip count cluster-wide
    const int st = k % S;
    float4 nxt = cur;
    if constexpr (PIPE) {
      if (row + nteams < p.rows) {
        kp::cp_async_wait(S - 2);  // row k + 1's group has landed
        nxt = local_stats((k + 1) % S, row + nteams);
        ring.send_stats(cx, k + 1, nxt);
      }
    } else {
      kp::cp_async_wait(S - 1);  // this row's group has landed
      cur = local_stats(st, row);
      ring.send_stats(cx, k, cur);
    }
    float mean, m2;
    ring.row_stats(cx, k, cur, mean, m2);
    if constexpr (PIPE) cur = nxt;
    const float rstd = rsqrtf(m2 * p.inv_cols + p.eps), nmr = -mean * rstd;
    if (ring.tid == 0 && ring.crank == 0) {
      if (p.rstd) p.rstd[row] = rstd;
      if (!RMS && p.mean) p.mean[row] = mean;
    }

    // Output: y = (h - mean) * rstd * (w + offset) + b. Each chunk's slot is refilled with row
    // k + stages as soon as it has been read for the last time, so the next row's copy overlaps
    // this row's stores (the copy is issued after the store that consumed the slot's value).
    if constexpr (R::WR) R::opaque_weights(wreg, breg);
    T* yr = row_ptr<T>(p.y, row, p.y_stride);
    const int64_t nrow = row + S * nteams;
    const bool more = nrow < p.rows;
    const T* nx = row_ptr<T>(p.x, more ? nrow : 0, p.x_stride);
    const char* nr = RES ? ring.res_row(more ? nrow : 0) : nullptr;
    with_affine_variant<RMS>(p, [&](auto hw_t, auto hb_t, auto ho_t) {
      constexpr bool HW = decltype(hw_t)::value, HB = decltype(hb_t)::value && !RMS, HO = decltype(ho_t)::value;
      constexpr int NVM = R::NVM;
#pragma unroll
      for (int i = 0; i < NVM; ++i) ring.template write_chunk<HW, HB, HO>(st, i, nmr, rstd, yr, nx, nr, more, wreg, breg);
    });
    kp::cp_async_commit();
  }
  // No copy may land in smem after the CTA is gone. Nor may a partial: but every CTA of the cluster
  // has received all of them (it waited for each row's), so no barrier is needed to exit.
  kp::cp_async_wait(0);
}

// ---- direct kernel: one row per team, the row in registers -------------------------------------
// Grid: tpr <= 32: ceil(rows / teams-per-CTA) CTAs; else rows * csize CTAs (clusters of csize).
// The row is held as raw packets of H (16-bit dtypes: half the registers of floats, so more CTAs
// fit an SM) and decoded again in each pass; H is the dtype of h: T, or fp32 for an fp32 residual.
// Everything that changes the instruction stream (RMS or LayerNorm, weight dtype W, residual) is a
// template parameter: the only run-time branches left are uniform and outside the element loops.
// 512 threads x 64 registers is what lets two 16384-wide rows share an SM (one CTA's reduction
// barrier overlaps the other's loads), so the weights are fetched whole only when their raw
// packets fit next to the row's (kWholeAffine); otherwise chunk by chunk as the output is written.
// Weights (and LayerNorm's bias) of a thread's chunks as raw 16-byte packets, fetched kAhead chunks
// before they are used so their latencies overlap each other and the reduction barrier. All of them
// at once when they fit next to the row's packets in the 64 registers that two 512-thread CTAs an
// SM allow (RMSNorm, 16-bit weights); otherwise one chunk ahead. Vector path only. HW / HB: the
// weight / bias exist (compile-time, so the output loop has no branches).
// LIMIT: packets (row + affine) that may be live at once; a register-capped twin passes fewer.
template <typename T, typename W, int NV, int RAWH, bool RMS, int LIMIT = 8>
struct AffinePrefetch {
  static constexpr int VEC = 16 / sizeof(T);
  static constexpr int WPP = VEC * static_cast<int>(sizeof(W)) / 16;  // packets a chunk
  static constexpr int PN = kp::Packet<W>::N;
  static constexpr int kAhead = (RAWH + NV * WPP * (RMS ? 1 : 2)) <= LIMIT ? NV : 1;
  uint4 w[NV * WPP], b[RMS ? 1 : NV * WPP];

  template <bool HW, bool HB, typename L>
  __device__ __forceinline__ void fetch(int i, const L& lay, const FwdParams& p, bool active) {
    if (i >= NV) return;
    const int c = lay.col(i, 0);
    const bool ok = active && lay.ok(i, 0);
#pragma unroll
    for (int j = 0; j < WPP; ++j) {
      if constexpr (HW) w[i * WPP + j] = ok ? kp::ld16<kp::Ld::RO>(static_cast<const W*>(p.w) + c + j * PN) : make_uint4(0, 0, 0, 0);
      if constexpr (HB && !RMS) b[i * WPP + j] = ok ? kp::ld16<kp::Ld::RO>(static_cast<const W*>(p.b) + c + j * PN) : make_uint4(0, 0, 0, 0);
    }
  }
  template <typename L>
  __device__ __forceinline__ void fetch_first(const L& lay, const FwdParams& p, bool active) {
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      if (p.has_w) fetch<true, false>(i, lay, p, active);
      if (!RMS && p.has_b) fetch<false, true>(i, lay, p, active);
    }
  }
  __device__ __forceinline__ void weight(int i, float* v) const {
#pragma unroll
    for (int j = 0; j < WPP; ++j) kp::unpack<W>(w[i * WPP + j], v + j * PN);
  }
  __device__ __forceinline__ void bias(int i, float* v) const {
#pragma unroll
    for (int j = 0; j < WPP; ++j) kp::unpack<W>(b[RMS ? 0 : i * WPP + j], v + j * PN);
  }
};

// y = (h - mean) * rstd * (w + offset) + b over a thread's chunks, the vector path.
template <bool RMS, kp::St SH, typename Raw, typename Aff, typename L, typename T>
__device__ __forceinline__ void write_rows_vec(const Raw& h, Aff& aff, const L& lay, const FwdParams& p, T* yr,
                                               bool active, float nmr, float rstd) {
  constexpr int VEC = L::VEC, NV = L::NV;
  with_affine_variant<RMS>(p, [&](auto hw_t, auto hb_t, auto ho_t) {
    constexpr bool HW = decltype(hw_t)::value, HB = decltype(hb_t)::value && !RMS, HO = decltype(ho_t)::value;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      float v[VEC], w[VEC], b[VEC], o[VEC];
      h.decode_chunk(i, v);
      if constexpr (HW) aff.weight(i, w);
      if constexpr (HB) aff.bias(i, b);
      aff.template fetch<HW, HB>(i + Aff::kAhead, lay, p, active);
#pragma unroll
      for (int q = 0; q < VEC; ++q) o[q] = affine_out<RMS, HW, HB, HO>(v[q], nmr, rstd, w[q], b[q], p.w_off);
      lay.template store<T, SH>(yr, i, o, active);
    }
  });
}

// The row's mean (LayerNorm) and sum of squares about it (RMS: about 0), over the team and, with
// csize > 1, the cluster. RMS one pass; LayerNorm exact two-pass (slice mean, then squared
// deviations), merged over a cluster with Chan's formula; the compile-time twins take the thread's
// own mean and M2 and merge those in one reduction (team_mean_m2). Each pass decodes the packets
// again. fetch_first() fetches the first weight chunks, called just before the last barrier so
// they land while it waits.
template <bool RMS, int FT, int POL, int E, typename RawH, typename L, typename Fetch>
__device__ __forceinline__ void direct_stats(RawH& h, const L& lay, const FwdParams& p, int tpr, int csize,
                                             Fetch&& fetch_first, float (*red)[32], kp::ClusterExchange& cx,
                                             float& mean, float& m2) {
  constexpr int VEC = L::VEC, NV = L::NV;
  int nred = 0;
  float a[1] = {0.f};
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    float v[VEC];
    h.decode_chunk(i, v);
#pragma unroll
    for (int q = 0; q < VEC; ++q) a[0] = RMS ? fmaf(v[q], v[q], a[0]) : a[0] + v[q];
  }
  if constexpr (RMS) fetch_first();
  if constexpr (!RMS && FT > 0 && kFwdLnOneReduction<POL>) {
    // One reduction a row: this thread's mean and M2 about it, merged over the team (Chan).
    mean = a[0] * (1.f / E);
    h.opaque();
    m2 = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      float v[VEC];
      h.decode_chunk(i, v);
#pragma unroll
      for (int q = 0; q < VEC; ++q) m2 = fmaf(v[q] - mean, v[q] - mean, m2);
    }
    fetch_first();
    team_mean_m2<FT>(mean, m2, static_cast<float>(E), reinterpret_cast<float2*>(red[0]));
  } else if constexpr (RMS) {
    team_sum<FT>(a, tpr, red[nred++ & 1]);
    m2 = a[0];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (csize > 1) {
      cx.init_wait();
      m2 = cx.sum(0, make_float4(a[0], 0.f, 0.f, 0.f), csize).x;
    }
#endif
  } else {
    team_sum<FT>(a, tpr, red[nred++ & 1]);
    const int n_here = FT ? FT * E : max(0, min(tpr * E, p.cols - lay.base));
    const float s_here = a[0];
    mean = n_here > 0 ? __fdividef(s_here, static_cast<float>(n_here)) : 0.f;  // n_here <= 2^30
    h.opaque();
    a[0] = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      float v[VEC];
      h.decode_chunk(i, v);
#pragma unroll
      for (int q = 0; q < VEC; ++q) {
        const float d = v[q] - mean;
        if (lay.ok(i, q)) a[0] = fmaf(d, d, a[0]);
      }
    }
    fetch_first();
    team_sum<FT>(a, tpr, red[nred++ & 1]);
    m2 = a[0];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (csize > 1) {
      cx.init_wait();
      cx.send(0, make_float4(s_here, m2, static_cast<float>(n_here), 0.f), csize);
      chan_merge<false>(cx.wait(0, csize), csize, p.inv_cols, mean, m2);
    }
#endif
  }
}

// FT > 0: the compile-time-geometry twin for rows of exactly FT threads x E columns, one CTA (no
// cluster): FT <= 32 is a warp team of a kWarpTeamCTA-thread CTA, else the CTA. Row and lane come
// from shifts instead of run-time divisions (which each CTA, living for one row, paid before
// its first load), chunk offsets are immediates, no chunk has a bounds check, and the block
// reduction's loop over warps unrolls.
template <typename T, typename W, typename H, int E, bool VECTOR, bool RES, bool RMS, int FT, int POL, int CAP>
__device__ __forceinline__ void direct_body(const FwdParams& p, float (*red)[32], kp::ClusterExchange& cx) {
  using L = Lay<T, E, VECTOR, FT>;
  constexpr int VEC = L::VEC, NV = L::NV;
  const int tid = threadIdx.x, tpr = FT ? FT : p.tpr, csize = FT ? 1 : p.csize;
  int lane, crank = 0;
  int64_t row;
  if (tpr <= 32) {
    lane = tid & (tpr - 1);
    row = static_cast<int64_t>(blockIdx.x) * (FT ? kWarpTeamCTA / FT : blockDim.x / tpr) + tid / tpr;
  } else {
    lane = tid;
    crank = static_cast<int>(blockIdx.x % csize);
    row = blockIdx.x / csize;
  }
  // Idle teams stay: their warp's shuffles need all lanes. A CTA team's grid is one CTA a row.
  const bool active = FT > 32 || row < p.rows;
  const L lay{crank * tpr * E, lane, tpr, p.cols};

  // The row's h (x, or x + res). This and the scalar output below stay inline: as helpers of their
  // own they compiled to different SASS (an inlined helper is optimized before its caller).
  Raw<T, H, E, VECTOR> h;
  if constexpr (RES) {
    // x and res with the policy of the plain path's x (evict_last, kFwdPol): they had been
    // loaded evict-first (.cs), which session 8 measured a point slower than plain there.
    Raw<T, T, E, VECTOR> rx;
    rx.template load<kFwdXLd<POL>>(lay, row_ptr<T>(p.x, row, p.x_stride), active);
    h.template load<kFwdXLd<POL>>(lay, row_ptr<H>(p.res, row, p.res_stride), active);
    H* ro = p.has_res_out ? row_ptr<H>(p.res_out, row, p.res_out_stride) : nullptr;
#pragma unroll
    for (int i = 0; i < NV; ++i) {  // h = x + res, rounded to res_dtype (what torch normalizes)
      float a[VEC], r[VEC];
      rx.decode_chunk(i, a);
      h.decode_chunk(i, r);
#pragma unroll
      for (int q = 0; q < VEC; ++q) a[q] += r[q];
      h.encode_chunk(i, a);
      if (ro) {
        h.decode_chunk(i, a);
        lay.template store<H>(ro, i, a, active);
      }
    }
  } else {
    h.template load<kFwdXLd<POL>>(lay, row_ptr<T>(p.x, row, p.x_stride), active);
  }

  // The weights' prefetch (the scalar path loads them chunk by chunk as it writes: no prefetch state).
  using Aff = std::conditional_t<VECTOR, AffinePrefetch<T, W, NV, NV * (VEC * static_cast<int>(sizeof(H)) / 16), RMS, CAP && CAP <= 40 ? 4 : 8>,
                                 std::nullptr_t>;
  Aff aff;
  auto fetch_first = [&] {
    if constexpr (VECTOR) aff.fetch_first(lay, p, active);
  };
  float mean = 0.f, m2;
  direct_stats<RMS, FT, POL, E>(h, lay, p, tpr, csize, fetch_first, red, cx, mean, m2);
  const float rstd = rsqrtf(m2 * p.inv_cols + p.eps);
  if (active && lane == 0 && crank == 0) {
    if (p.rstd) p.rstd[row] = rstd;
    if (!RMS && p.mean) p.mean[row] = mean;
  }

  // y = (h - mean) * rstd * w_eff + b, chunk by chunk; the x packets are made opaque so the values
  // decoded for the statistics are not kept alive across this point.
  h.opaque();
  T* yr = row_ptr<T>(p.y, row, p.y_stride);
  if constexpr (VECTOR) {
    write_rows_vec<RMS, kFwdYSt<POL>>(h, aff, lay, p, yr, active, -mean * rstd, rstd);
  } else {
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      float v[VEC], w[VEC], b[VEC], o[VEC];
      h.decode_chunk(i, v);
      load_w(lay, p, i, w, active);
      if constexpr (!RMS) load_b(lay, p, i, b, active);
#pragma unroll
      for (int q = 0; q < VEC; ++q) o[q] = RMS ? v[q] * rstd * w[q] : fmaf((v[q] - mean) * rstd, w[q], b[q]);
      lay.template store<T>(yr, i, o, active);
    }
  }
}


template <typename T, typename W, int E, bool VECTOR, bool RES, bool RMS, int FT, int POL, int CAP>
__global__ void __launch_bounds__((kDirectBoundThreads<FT, CAP>), (kDirectBoundBlocks<FT, CAP, T, W, RES, RMS>))
    fwd_direct_kernel(const FwdParams p) {
  __shared__ __align__(16) float red[2][32];  // float2 views in team_mean_m2
  __shared__ kp::ClusterExchange cx;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Arrive before the loads, wait before the first send (direct_body): the barrier's latency
  // overlaps the row's loads, which a CTA living for one row would otherwise wait behind.
  if (!FT && p.csize > 1) cx.init_arrive(p.csize);
#endif
  if constexpr (RES) {
    if (p.res_f32) direct_body<T, W, float, E, VECTOR, true, RMS, FT, POL, CAP>(p, red, cx);
    else direct_body<T, W, T, E, VECTOR, true, RMS, FT, POL, CAP>(p, red, cx);
  } else {
    direct_body<T, W, T, E, VECTOR, false, RMS, FT, POL, CAP>(p, red, cx);
  }
}

// ---- direct.wide.staged: RMSNorm rows wider than 16 CTAs x 8192 columns ------------------------
// One row a cluster of kWideThreads-thread CTAs of kWideCtaCols columns (64 values a thread; a
// cluster holds at most 16 CTAs, so 8192-column CTAs, direct.wide's, stop at 128K). With all 64
// values in registers (session 15) the kernel took 80 registers (three CTAs an SM) and fetched its
// weights one chunk ahead, an L2 round trip a chunk in the output loop: 91.1% of copy at 256K on
// the H100. Here a thread keeps NR of its 8 chunks of x in registers and stages the others, and its
// weight chunks, in shared memory by cp.async (each thread reads back only the packets it copied,
// so cp.async.wait_group is the only synchronization). That holds the kernel to 64 registers: four
// CTAs an SM, each with a 32 KB slice of a row in flight. The weights' copy overlaps the statistics
// and the cluster exchange. RMSNorm, 16-bit x and weights (or none), no residual, vector path, sm90.
// smem: [8 - NR][kWideThreads] x packets, then [8][kWideThreads] weight packets.
template <typename T, int NR>
__global__ void __launch_bounds__(kWideThreads, 4) fwd_wide_staged_kernel(const FwdParams p) {
  static_assert(sizeof(T) == 2, "16-bit x (the smem budget is sized for it)");
  constexpr int VEC = 16 / sizeof(T), NC = kWideCtaCols / (kWideThreads * VEC), NS = NC - NR;
  static_assert(NR >= 0 && NR <= NC, "register chunks: 0 .. 8");
  extern __shared__ __align__(16) uint4 staged[];
  __shared__ __align__(16) float red[2][32];
  __shared__ kp::ClusterExchange cx;
  const int tid = threadIdx.x, csize = p.csize;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (csize > 1) cx.init_arrive(csize);  // overlaps the loads (as the direct kernel's)
#endif
  const int crank = static_cast<int>(blockIdx.x % csize);
  const int64_t row = blockIdx.x / csize;
  const int base = crank * kWideCtaCols;
  auto col = [&](int i) { return base + (i * kWideThreads + tid) * VEC; };
  const T* xr = row_ptr<T>(p.x, row, p.x_stride);
  const T* wr = static_cast<const T*>(p.w);
  uint4* xs = staged;
  uint4* ws = staged + NS * kWideThreads;

  uint4 xreg[NR > 0 ? NR : 1];
#pragma unroll
  for (int i = 0; i < NR; ++i)
    xreg[i] = col(i) < p.cols ? kp::ld16<kFwdXLd<kFwdPol>>(xr + col(i)) : make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int i = 0; i < NS; ++i) {
    const bool ok = col(NR + i) < p.cols;  // cp.async zero-fills a packet past the row
    kp::cp_async16(xs + i * kWideThreads + tid, ok ? xr + col(NR + i) : xr, ok);
  }
  kp::cp_async_commit();
  if (p.has_w) {
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      const bool ok = col(i) < p.cols;
      kp::cp_async16(ws + i * kWideThreads + tid, ok ? wr + col(i) : wr, ok);
    }
  }
  kp::cp_async_commit();

  auto chunk = [&](int i, float* v) {  // chunk i of x as VEC floats, from registers or smem
    kp::unpack<T>(i < NR ? xreg[i < NR ? i : 0] : xs[(i - NR) * kWideThreads + tid], v);
  };
  float a[1] = {0.f};
#pragma unroll
  for (int i = 0; i < NC; ++i) {
    if (i == NR) kp::cp_async_wait(1);  // x's staged chunks (the weights may still be in flight)
    float v[VEC];
    chunk(i, v);
#pragma unroll
    for (int q = 0; q < VEC; ++q) a[0] = fmaf(v[q], v[q], a[0]);
  }
  team_sum<kWideThreads>(a, kWideThreads, red[0]);
  float m2 = a[0];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (csize > 1) {
    cx.init_wait();
    m2 = cx.sum(0, make_float4(a[0], 0.f, 0.f, 0.f), csize).x;
  }
#endif
  const float rstd = rsqrtf(m2 * p.inv_cols + p.eps);
  if (tid == 0 && crank == 0 && p.rstd) p.rstd[row] = rstd;
  kp::cp_async_wait(0);

  T* yr = row_ptr<T>(p.y, row, p.y_stride);
  with_affine_variant<true>(p, [&](auto hw_t, auto, auto ho_t) {
    constexpr bool HW = decltype(hw_t)::value, HO = decltype(ho_t)::value;
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      float v[VEC], w[VEC], o[VEC];
      chunk(i, v);
      if constexpr (HW) kp::unpack<T>(ws[i * kWideThreads + tid], w);
#pragma unroll
      for (int q = 0; q < VEC; ++q) o[q] = affine_out<true, HW, false, HO>(v[q], 0.f, rstd, w[q], 0.f, p.w_off);
      if (col(i) < p.cols) kp::st_chunk<T, VEC, kFwdYSt<kFwdPol>>(yr + col(i), o);
    }
  });
}

// direct.scalar (rows that are not 16-byte aligned, or widths not a multiple of a packet): one
// kernel an x dtype that branches once, uniformly, to its residual / RMS variant. The weight dtype
// is read at run time (load_w), so it has no variant. A fallback: one kernel instead of the twenty
// compile-time variants it replaced (plan_table.h, kernel sets).
template <typename T>
__global__ void __launch_bounds__(kMaxThreads, 1) fwd_scalar_kernel(const FwdParams p) {
  __shared__ __align__(16) float red[2][32];
  __shared__ kp::ClusterExchange cx;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (p.csize > 1) cx.init_arrive(p.csize);
#endif
  auto run = [&](auto rms_t) {
    constexpr bool RMS = decltype(rms_t)::value;
    if (!p.has_res) direct_body<T, T, T, 8, false, false, RMS, 0, kFwdPol, 0>(p, red, cx);
    else if (p.res_f32) direct_body<T, T, float, 8, false, true, RMS, 0, kFwdPol, 0>(p, red, cx);
    else direct_body<T, T, T, 8, false, true, RMS, 0, kFwdPol, 0>(p, red, cx);
  };
  if (p.is_rms) run(std::true_type{});
  else run(std::false_type{});
}

// ---- multi-pass fallback: one CTA per row, the row streamed in tiles ----------------------------
// Pass 1 computes the statistics (and writes res_out), pass 2 re-reads (res_out, or x + res) and
// writes y. Pass-1 loads keep their lines in L2 for pass 2. Used for rows beyond a 16-CTA cluster
// and on GPUs without clusters.
template <typename T, bool VECTOR>
__global__ void __launch_bounds__(kMultiThreads) fwd_multipass_kernel(const FwdParams p) {
  constexpr int E = 16;
  using L = Lay<T, E, VECTOR>;
  constexpr int VEC = L::VEC, NV = L::NV;
  __shared__ float red[2][32];
  const int tid = threadIdx.x, tpr = blockDim.x, tile = tpr * E;
  const int64_t row = blockIdx.x;
  const T* xr = row_ptr<T>(p.x, row, p.x_stride);
  const void* rr = p.res_f32 ? static_cast<const void*>(row_ptr<float>(p.res, row, p.res_stride))
                             : static_cast<const void*>(row_ptr<T>(p.res, row, p.res_stride));
  void* ro = p.res_f32 ? static_cast<void*>(row_ptr<float>(p.res_out, row, p.res_out_stride))
                       : static_cast<void*>(row_ptr<T>(p.res_out, row, p.res_out_stride));

  // h for chunk i of the tile at `base`: x (+ res, rounded to res_dtype).
  auto load_h = [&](const L& lay, int i, float* h, bool keep_in_l2) {
    if (keep_in_l2) lay.template load<T, Ld::L2>(xr, i, h, true);
    else lay.template load<T, Ld::Stream>(xr, i, h, true);
    if (p.has_res) {
      float r[VEC];
      if (keep_in_l2) lay.template load_tf<Ld::L2>(rr, p.res_f32, i, r, true);
      else lay.template load_tf<Ld::Stream>(rr, p.res_f32, i, r, true);
#pragma unroll
      for (int k = 0; k < VEC; ++k) h[k] = p.res_f32 ? h[k] + r[k] : kp::round_to<T>(h[k] + r[k]);
    }
  };

  // Pass 1. Per thread: RMS sum of squares, or LayerNorm (n, mean, M2) merged tile by tile (Chan).
  float ss = 0.f, tn = 0.f, tmean = 0.f, tm2 = 0.f;
  for (int base = 0; base < p.cols; base += tile) {
    const L lay{base, tid, tpr, p.cols};
    float v[E];
#pragma unroll
    for (int i = 0; i < NV; ++i) load_h(lay, i, v + i * VEC, true);
    if (p.has_res_out) {
#pragma unroll
      for (int i = 0; i < NV; ++i) lay.store_tf(ro, p.res_f32, i, v + i * VEC, true);
    }
    if (p.is_rms) {
#pragma unroll
      for (int j = 0; j < E; ++j) ss = fmaf(v[j], v[j], ss);
    } else {
      float cnt = 0.f, s = 0.f;
#pragma unroll
      for (int i = 0; i < NV; ++i)
#pragma unroll
        for (int k = 0; k < VEC; ++k)
          if (lay.ok(i, k)) cnt += 1.f, s += v[i * VEC + k];
      if (cnt > 0.f) {
        const float m = s / cnt;
        float q = 0.f;
#pragma unroll
        for (int i = 0; i < NV; ++i)
#pragma unroll
          for (int k = 0; k < VEC; ++k) {
            const float d = v[i * VEC + k] - m;
            if (lay.ok(i, k)) q = fmaf(d, d, q);
          }
        const float n = tn + cnt, delta = m - tmean;
        tmean += delta * (cnt / n);
        tm2 += q + delta * delta * (tn * cnt / n);
        tn = n;
      }
    }
  }
  float mean = 0.f, m2;
  if (p.is_rms) {
    float a[1] = {ss};
    kp::block_sum(a, red[0]);
    m2 = a[0];
  } else {
    float a[1] = {tn * tmean};
    kp::block_sum(a, red[0]);
    mean = a[0] / static_cast<float>(p.cols);
    const float d = tmean - mean;
    float q[1] = {fmaf(tn * d, d, tm2)};
    kp::block_sum(q, red[1]);
    m2 = q[0];
  }
  const float rstd = rsqrtf(m2 / static_cast<float>(p.cols) + p.eps);
  if (tid == 0) {
    if (p.rstd) p.rstd[row] = rstd;
    if (p.mean && !p.is_rms) p.mean[row] = mean;
  }

  // Pass 2. Each thread re-reads only elements it wrote or read itself, in the same order.
  T* yr = row_ptr<T>(p.y, row, p.y_stride);
  for (int base = 0; base < p.cols; base += tile) {
    const L lay{base, tid, tpr, p.cols};
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      float h[VEC], w[VEC], b[VEC], o[VEC];
      if (p.has_res_out) lay.template load_tf<Ld::Stream>(ro, p.res_f32, i, h, true);
      else load_h(lay, i, h, false);
      load_w(lay, p, i, w, true);
      load_b(lay, p, i, b, true);
#pragma unroll
      for (int k = 0; k < VEC; ++k) o[k] = fmaf((h[k] - mean) * rstd, w[k], b[k]);
      lay.template store<T>(yr, i, o, true);
    }
  }
}

template <typename T, typename W, bool RES, bool RMS, int WM, int FT>
FwdKernel fwd_ring_ptr() {
  return fwd_ring_kernel<T, W, RES, RMS, WM, FT>;
}
template <typename T, typename W, int E, bool VECTOR, bool RES, bool RMS, int FT, int POL, int CAP>
FwdKernel fwd_direct_ptr() {
  return fwd_direct_kernel<T, W, E, VECTOR, RES, RMS, FT, POL, CAP>;
}
template <typename T, bool VECTOR>
FwdKernel fwd_multipass_ptr() {
  return fwd_multipass_kernel<T, VECTOR>;
}
template <typename T>
FwdKernel fwd_scalar_ptr() {
  return fwd_scalar_kernel<T>;
}
template <typename T, int NR>
FwdKernel fwd_wide_staged_ptr() {
  return fwd_wide_staged_kernel<T, NR>;
}

}  // namespace kp_norm
