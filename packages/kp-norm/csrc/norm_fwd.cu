// Forward plan and launch: which kernel, geometry and grid a call gets (the kernels are declared in
// fwd_kernels.h and instantiated in fwd_direct.cu, fwd_ring.cu and fwd_multipass.cu).
#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kp/error.cuh"
#include "kp/host.cuh"
#include "kp/launch.cuh"
#include "kp/plan_cache.h"
#include "plan_table.h"
#ifdef KP_NORM_TUNING  // tuning builds reach kernels beyond the release lists: instantiate here
#include "fwd_kernels.cuh"
#else
#include "fwd_kernels.h"
#endif

namespace kp_norm {
namespace {


template <typename T, typename W, int WM>
FwdKernel ring_for_wm(bool res, bool rms) {
  // fp32 weights of a 16-bit x come from L2 (plan_table.h, kernel sets): plan_ring stages no such
  // weights in smem, so nullptr is never launched (launch_fwd checks).
  if constexpr (WM == kWSmem && sizeof(W) != sizeof(T)) {
    return nullptr;
  } else {
    if (res) return rms ? fwd_ring_ptr<T, W, true, true, WM>() : fwd_ring_ptr<T, W, true, false, WM>();
#ifndef KP_NORM_TUNING
    // Without a residual, weights as wide as x always fit registers (two 64 KB stages, plan_ring),
    // so a release plan never stages them in smem. A tuning build reaches these with fwd_wreg=0.
    if constexpr (WM == kWSmem) return nullptr;
    else
#endif
      return rms ? fwd_ring_ptr<T, W, false, true, WM>() : fwd_ring_ptr<T, W, false, false, WM>();
  }
}
// kWReg only without a residual (the residual ring kernels spill at 128 registers; not measured)
// and where weights are as wide as x (fp32 weights of a 16-bit x would take 128 registers).
// `ft`: the compile-time-geometry twin's thread count (0: run-time geometry).
template <typename T, typename W, int FT>
FwdKernel ring_wreg(bool rms) {
  return rms ? fwd_ring_ptr<T, W, false, true, kWReg, FT>() : fwd_ring_ptr<T, W, false, false, kWReg, FT>();
}
// The compile-time-geometry twins (`ft`) in the full kernel set only (plan_table.h).
template <typename T, typename W>
FwdKernel ring_for_w(int wm, bool res, bool rms, int ft) {
  if constexpr (sizeof(W) == sizeof(T)) {
    if (wm == kWReg && !res) {
      if constexpr (kFullKernelSet<T>) {
        switch (ft) {
          case kMaxThreads: return ring_wreg<T, W, kMaxThreads>(rms);
          case kMaxThreads / 2: return ring_wreg<T, W, kMaxThreads / 2>(rms);
#ifdef KP_NORM_TUNING  // no release plan fills 128-thread CTAs (rows of 8K: the direct kernel)
          case kMaxThreads / 4: return ring_wreg<T, W, kMaxThreads / 4>(rms);
#endif
          default: break;
        }
      }
      return ring_wreg<T, W, 0>(rms);
    }
  }
  return wm == kWSmem ? ring_for_wm<T, W, kWSmem>(res, rms) : ring_for_wm<T, W, kWL2>(res, rms);
}
template <typename T>
FwdKernel ring_for(bool w_f32, int wm, bool res, bool rms, int ft) {
  if constexpr (std::is_same_v<T, float>) return ring_for_w<T, float>(wm, res, rms, ft);
  else return w_f32 ? ring_for_w<T, float>(wm, res, rms, ft) : ring_for_w<T, T>(wm, res, rms, ft);
}
// E = 16 only in the full kernel set without a residual (plan_table.h): plan_direct asks for no
// other (nullptr: a tuning override that does is refused at launch).
template <typename T, typename W, bool RES, bool RMS>
FwdKernel direct_for_w(int e, bool vector) {
  if (!vector) return fwd_scalar_ptr<T>();
  if (e == 8) return fwd_direct_ptr<T, W, 8, true, RES, RMS>();
  if (e == 32) return fwd_direct_ptr<T, W, 32, true, RES, RMS>();
  if constexpr (kFullKernelSet<T> && kFullKernelSet<W> && !RES) return e == 16 ? fwd_direct_ptr<T, W, 16, true, RES, RMS>() : nullptr;
  else return nullptr;
}
template <typename T, bool RES, bool RMS>
FwdKernel direct_for_r(int e, bool vector, bool w_f32) {
  if constexpr (std::is_same_v<T, float>) return direct_for_w<T, float, RES, RMS>(e, vector);
  else return w_f32 ? direct_for_w<T, float, RES, RMS>(e, vector) : direct_for_w<T, T, RES, RMS>(e, vector);
}
template <typename T>
FwdKernel direct_for(int e, bool vector, bool w_f32, bool res, bool rms) {
  if (res) return rms ? direct_for_r<T, true, true>(e, vector, w_f32) : direct_for_r<T, true, false>(e, vector, w_f32);
  return rms ? direct_for_r<T, false, true>(e, vector, w_f32) : direct_for_r<T, false, false>(e, vector, w_f32);
}
// The direct kernel's compile-time-geometry twins (no residual, 16-bit x and weights): E = 32 for
// hidden 1K (a warp a row), 2K, 4K, 8K and 16K (a CTA of hidden / 32 threads); E = 16 for 1K-16K
// (a CTA of hidden / 16 threads, up to 1024; plan_direct says where).
// Register caps of the E = 16 twins (0: the default bound, 64 registers at 2 x 512 threads). Fewer
// registers fit more CTAs an SM, so more rows are in flight. H100, % of copy against the E = 32
// twin (docs/journal/kp-norm.md, session 11): RMSNorm 8K 98.6 -> 99.0 (40: 3 CTAs of 512), 16K 98.8 -> 99.1
// (32: 2 of 1024); LayerNorm 4K 98.2 -> 99.2 (48: 5 of 256), 8K 98.2 -> 98.9 (40). LayerNorm at
// 32 registers spills (16K: 92), so its 16K stays E = 32.
[[maybe_unused]] constexpr int kTwinCap(int e, int ft, bool rms) {  // (used only in template defaults)
  if (e != 16) return 0;
  switch (ft) {
    case 1024: return 32;
    case 512: return 40;
    case 256: return rms ? 0 : 48;
    default: return 0;
  }
}
// LayerNorm has no 1024-thread twin (nullptr: plan_direct then takes the multi-pass kernel; its
// plan never asks for one).
template <typename T, int E, int FT, int POL, int CAPR = kTwinCap(E, FT, true), int CAPL = kTwinCap(E, FT, false)>
FwdKernel direct_ft_t(bool rms) {
  if constexpr (FT > kMaxThreads) return rms ? fwd_direct_ptr<T, T, E, true, false, true, FT, POL, CAPR>() : nullptr;
  else
    return rms ? fwd_direct_ptr<T, T, E, true, false, true, FT, POL, CAPR>()
               : fwd_direct_ptr<T, T, E, true, false, false, FT, POL, CAPL>();
}
// Tuning builds: the fwd_cap override (0, 48, 40, 32) replaces kTwinCap for the bf16 E = 16 twins.
template <typename T, int FT, int POL>
FwdKernel direct_e16(bool rms) {
#ifdef KP_NORM_TUNING
  if constexpr (std::is_same_v<T, __nv_bfloat16> && POL == kFwdPol) {
    switch (knob(Knob::FwdCap, -1)) {
      case 0: if constexpr (FT <= kMaxThreads) return direct_ft_t<T, 16, FT, POL, 0, 0>(rms); else break;
      case 48: return direct_ft_t<T, 16, FT, POL, 48, 48>(rms);
      case 40: return direct_ft_t<T, 16, FT, POL, 40, 40>(rms);
      case 32: return direct_ft_t<T, 16, FT, POL, 32, 32>(rms);
      default: break;
    }
  }
#endif
  return direct_ft_t<T, 16, FT, POL>(rms);
}
template <typename T, int POL>
FwdKernel direct_ft_p(int tpr, int e, bool rms) {
  if (e == 16) {
    switch (tpr) {
      case 64: return direct_e16<T, 64, POL>(rms);
      case 128: return direct_e16<T, 128, POL>(rms);
      case 256: return direct_e16<T, 256, POL>(rms);
      case 512: return direct_e16<T, 512, POL>(rms);
      case 1024: return direct_e16<T, 1024, POL>(rms);
      default: return nullptr;
    }
  }
  switch (tpr) {
    case 32:  // a release plan gives 16-bit 1K rows E = 16 (64 threads), never a warp of E = 32
#ifdef KP_NORM_TUNING
      return direct_ft_t<T, 32, 32, POL>(rms);
#else
      return nullptr;
#endif
    case 64: return direct_ft_t<T, 32, 64, POL>(rms);
    case 128: return direct_ft_t<T, 32, 128, POL>(rms);
    case 256: return direct_ft_t<T, 32, 256, POL>(rms);
    default: return direct_ft_t<T, 32, 512, POL>(rms);
  }
}
// nullptr: no twin for this shape.
template <typename T>
FwdKernel direct_ft(int tpr, int e, bool rms) {
#ifdef KP_NORM_TUNING
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {  // the other policies, for sweeps (bf16 only)
    switch (knob(Knob::FwdPol, kFwdPol)) {
      case 0: return direct_ft_p<T, 0>(tpr, e, rms);
      case 2: return direct_ft_p<T, 2>(tpr, e, rms);
      case 3: return direct_ft_p<T, 3>(tpr, e, rms);
      case 4: return direct_ft_p<T, 4>(tpr, e, rms);
      default: break;
    }
  }
#endif
  return direct_ft_p<T, kFwdPol>(tpr, e, rms);
}

struct FwdPlan {
  Team t;
  FwdKernel kernel = nullptr;
  size_t smem = 0;
  int64_t resident = 0;  // persistent grids (ring): teams resident at once; 0: one team a row
  const char* row = "";  // the table row that chose this plan (plan() reports it)
  int64_t grid(int64_t rows) const {
    if (resident > 0) return std::min(resident, rows) * t.csize;
    return t.tpr <= 32 && t.csize == 1 ? cdiv(rows, static_cast<int64_t>(t.tpc())) : rows * t.csize;
  }
};

// Ring geometry: CTA size and rows in flight. ring.wreg.rows (kFwd.ring_rows_min, plan_table.h)
// takes 256-thread CTAs with three (RMSNorm) or two ring stages for rows whose weights sit in
// registers (16-bit x and weights, no residual), up to 16 such CTAs; every other ring row
// 512-thread CTAs, 4 stages.
struct RingRow {
  int max_threads, max_stages;
  bool rows;  // the ring.wreg.rows geometry
};
RingRow ring_row(int64_t cols, bool weights_in_registers, bool rms, bool fast) {
  const int min_cols = kFwd.ring_rows_min.at(fast);
  if (weights_in_registers && min_cols > 0 && cols >= min_cols &&
      cols <= int64_t{kMaxCluster} * kFwd.ring_rows_threads * kRingNV * 8 /* 16-bit values a chunk */)
    return {kFwd.ring_rows_threads, rms ? kFwd.ring_rows_stages_rms : kFwd.ring_rows_stages_ln, true};
  return {kFwd.ring_threads, kFwd.ring_stages, false};
}

// Ring kernel plan (vector path): E = nv * VEC values a thread, read from smem: up to 512 threads
// x kRingNV chunks a CTA, then a cluster of such CTAs. t.multipass when it cannot run here.
// ft_only: only an FT plan is wanted (the caller falls back to the direct kernel otherwise), so
// stop before the occupancy queries when there is none.
template <typename T>
FwdPlan plan_ring(int64_t cols, bool res, bool res_f32, bool w_f32, int n_affine, bool rms, int device,
                  bool ft_only = false) {
  FwdPlan pl;
  Team& t = pl.t;
  const auto& dev = kp::device_info(device);
  constexpr int VEC = 16 / sizeof(T);
  const int64_t chunks = cols / VEC;
  // ring.wreg.rows is for rows whose weights sit in registers (kWReg, below).
  const RingRow row = ring_row(cols, sizeof(T) == 2 && !res && !w_f32 && n_affine > 0, rms, fast_dram(dev.mem_gbps, dev.sms));
  const int maxcpt = std::min(kRingNV, knob(Knob::FwdMaxcpt, kRingNV));  // 64 values (bf16) a thread
  const int maxthr = std::min(kMaxThreads, knob(Knob::FwdRthreads, row.max_threads));
  t.csize = static_cast<int>(cdiv(chunks, static_cast<int64_t>(maxthr) * maxcpt));
  // No clusters (sm80-89): one CTA. Rows it cannot hold (or a 16-CTA cluster on sm90) take the
  // multi-pass kernel.
  t.csize = dev.major >= 9 ? std::min(t.csize, kMaxCluster) : 1;
  t.tpr = std::min(maxthr, round_up(cdiv(chunks, static_cast<int64_t>(t.csize) * maxcpt), 32));
  t.threads = t.tpr;
  t.nv = static_cast<int>(cdiv(chunks, static_cast<int64_t>(t.csize) * t.tpr));
  t.e = t.nv * VEC;
  t.multipass = t.nv > kRingNV;  // wider than 16 CTAs x 512 threads x kRingNV chunks (or one CTA, pre-sm90)
  if (t.multipass) return pl;
  const int per_stage = t.threads * t.e * (static_cast<int>(sizeof(T)) + (res ? (res_f32 ? 4 : sizeof(T)) : 0));
  // Where the weights live (WMode). kWReg: in registers, one CTA an SM with the whole smem
  // for the ring (16-bit or fp32-with-fp32 weights only). kWSmem: staged once in smem next to
  // a ring of two or more rows, one CTA an SM, when that fits the budget. kWL2: read from L2
  // each row, one row a CTA and several CTAs an SM overlapping each other.
  const int wbytes = n_affine * t.threads * t.e * (w_f32 ? 4 : static_cast<int>(sizeof(T)));
  // kWReg kernels pipeline the statistics of the next row, so they need two stages.
  const bool wr = wbytes > 0 && !res && (!w_f32 || sizeof(T) == 4) && knob(Knob::FwdWreg, 1) &&
                  2 * per_stage <= dev.smem_optin - kStaticSmemSlack;
  const int budget_ws = knob(Knob::FwdRingws, kFwd.ring_budget_wsmem);
  const bool ws = !wr && wbytes > 0 && (!w_f32 || sizeof(T) == 4) && knob(Knob::FwdWsmem, 1) &&
                  wbytes + 2 * per_stage <= budget_ws;  // (fp32 weights of a 16-bit x: kernel sets)
  const int wm = wr ? kWReg : ws ? kWSmem : kWL2;
  const int room = dev.smem_optin - kStaticSmemSlack - (ws ? wbytes : 0);
  if (per_stage > room) {
    t.multipass = true;
    return pl;
  }
  // kWReg rows that fill the whole geometry get a compile-time-geometry twin (FT).
  const bool fills = int64_t{t.csize} * t.tpr * kRingNV * VEC == cols && t.nv == kRingNV &&
                     (t.tpr == kMaxThreads || t.tpr == kMaxThreads / 2 || t.tpr == kMaxThreads / 4);
  const bool ft = wm == kWReg && fills && knob(Knob::FwdFull, 1);
  if (ft_only && !ft) {
    t.multipass = true;
    return pl;
  }
  pl.kernel = ring_for<T>(w_f32, wm, res, rms, ft ? t.tpr : 0);
  pl.row = wm == kWReg ? (row.rows ? "ring.wreg.rows" : "ring.wreg") : wm == kWSmem ? "ring.wsmem" : "ring.wl2";
  const void* k = reinterpret_cast<const void*>(pl.kernel);
  // Ring depth: stages (up to 4) within the budget; each stage is refilled with the row
  // `stages` ahead as soon as the output pass has read it, so 1 already overlaps the next
  // row's copy with this row's output.
  const int budget = wr   ? knob(Knob::FwdRingwr, kFwd.ring_budget_wreg)
                     : ws ? budget_ws - wbytes
                          : knob(Knob::FwdRing, kFwd.ring_budget_wl2);
  t.stages = std::max(wr ? 2 : 1, std::min({knob(Knob::FwdStages, row.max_stages), budget / per_stage, room / per_stage}));
  pl.smem = static_cast<size_t>(t.stages) * per_stage + (ws ? wbytes : 0);
  pl.resident = t.csize > 1 ? kp::max_active_clusters(k, device, t.threads, pl.smem, t.csize)
                            : int64_t{dev.sms} * kp::blocks_per_sm(k, device, t.threads, pl.smem);
  if (pl.resident < 1) t.multipass = true;  // e.g. the cluster cannot be resident here
  else if (knob(Knob::FwdNp, 0)) pl.resident = 0;  // one row a team (sweeps)
  return pl;
}

// Direct kernel plan: the row in registers, E values a thread.
template <typename T>
FwdPlan plan_direct(int64_t cols, bool vector, bool res, bool w_f32, bool rms, int device,
                    int64_t max_cta_cols = int64_t{1} << 30) {
  FwdPlan pl;
  Team& t = pl.t;
  const auto& dev = kp::device_info(device);
  // 16 or 32 values a thread (plan_table.h: kFwd's e16 rows, per GPU class).
  const bool twin_shape = sizeof(T) == 2 && vector && !res && !w_f32 && cols >= 4096 && cols % 16 == 0 &&
                          cols / 16 <= kMaxTwinThreads && ((cols / 16) & (cols / 16 - 1)) == 0;
  const bool fast = fast_dram(dev.mem_gbps, dev.sms);
  const int e16_max = rms ? knob(Knob::FwdRmse16max, kFwd.rms_e16_max.at(fast))
                          : knob(Knob::FwdLne16max, kFwd.ln_e16_max.at(fast));
  const int e16_twin_max = rms ? knob(Knob::FwdRmse16twinmax, kFwd.rms_e16_twin_max.at(fast))
                               : knob(Knob::FwdLne16twinmax, kFwd.ln_e16_twin_max.at(fast));
  const bool e16_twin = twin_shape && cols <= e16_twin_max && knob(Knob::FwdDft, 1);
  const bool e16 = sizeof(T) == 2 && !w_f32 && !res;  // the E = 16 kernels (plan_table.h, kernel sets)
  // LayerNorm, fp32 weights of a 16-bit x past kFwd.ln_w32_split_above: CTAs of kFwd.w32_cta_cols
  // (plan_table.h). The override applies to RMSNorm too (sweeps).
  const int w32_split = knob(Knob::FwdW32split, rms ? 0 : kFwd.ln_w32_split_above.at(fast));
  if (sizeof(T) == 2 && w_f32 && vector && dev.major >= 9 && w32_split > 0 && cols > w32_split)
    max_cta_cols = std::min<int64_t>(max_cta_cols, kFwd.w32_cta_cols);
  const int e_row = e16 && cols > 512 && (cols <= e16_max || e16_twin) ? 16 : 32;
  const int emax = vector ? std::min(e_row, knob(Knob::FwdEmax, 32)) : 8;
  if (cols <= 32 * emax) {  // warp / sub-warp teams, several rows per CTA
    t.e = !vector || cols <= 256 ? 8 : cols <= 512 && e16 ? std::min(16, emax) : emax;
    t.tpr = next_pow2(static_cast<int>(cdiv(cols, t.e)));
    t.threads = kWarpTeamCTA;
  } else {
    t.e = emax;
    const int maxthr = e16_twin && t.e == 16 ? kMaxTwinThreads : kMaxThreads;
    t.csize = static_cast<int>(cdiv(cols, std::min<int64_t>({int64_t{maxthr} * t.e, max_cta_cols, knob(Knob::FwdDcpc, 1 << 30)})));
    if (t.csize > 1 && (dev.major < 9 || t.csize > kMaxCluster)) t.multipass = true;
    t.tpr = round_up(cdiv(cols, static_cast<int64_t>(t.csize) * t.e), 32);
    t.threads = t.tpr;
  }
  if (!t.multipass) {
    pl.kernel = direct_for<T>(t.e, vector, w_f32, res, rms);
    pl.row = !vector ? "direct.scalar" : t.tpr <= 32 ? "direct.rows" : t.csize > 1 ? "direct.cluster" : "direct";
    // Rows that fill the geometry exactly take the compile-time twin (same launch shape; it
    // drops the divisions, offsets and bounds checks, so it needs no more registers).
    if constexpr (sizeof(T) == 2)
      if (vector && !res && !w_f32 && (t.e == 32 || t.e == 16) && t.csize == 1 && int64_t{t.tpr} * t.e == cols &&
          (t.tpr & (t.tpr - 1)) == 0 && t.tpr >= 32 && t.tpr <= (t.e == 16 ? kMaxTwinThreads : kMaxThreads) &&
          knob(Knob::FwdDft, 1))
        if (FwdKernel ft = direct_ft<T>(t.tpr, t.e, rms)) pl.kernel = ft;
    // Only a twin launches more than kMaxThreads (e16_twin implies every condition above).
    if (t.threads > kMaxThreads && pl.kernel == direct_for<T>(t.e, vector, w_f32, res, rms)) t.multipass = true;
    if (t.csize > 1 && kp::max_active_clusters(reinterpret_cast<const void*>(pl.kernel), device, t.threads, 0, t.csize) < 1)
      t.multipass = true;
  }
  return pl;
}

// direct.wide (plan_table.h): one row a cluster of CTAs that each hold kFwd.wide_direct_cta_cols
// columns in registers (256 threads x 32 values). Short-lived CTAs, four an SM, whose cluster
// barrier overlaps their loads (ClusterExchange::init_arrive), keep more rows in flight than the
// persistent ring. RMSNorm with 16-bit x and weights (or none), no residual, sm90.
template <typename T>
bool wide_direct(int64_t cols, bool res, bool w_f32, bool rms, int device) {
  const auto& dev = kp::device_info(device);
  return sizeof(T) == 2 && rms && !res && !w_f32 && dev.major >= 9 &&
         cols <= kFwd.wide_direct_max.at(fast_dram(dev.mem_gbps, dev.sms)) && knob(Knob::FwdWide, 1);
}

// direct.wide.staged (plan_table.h, tuning builds): rows past direct.wide, one row a cluster of
// kWideCtaCols-column CTAs (fwd_wide_staged_kernel). Same signature as direct.wide. Multipass (the
// caller takes the ring) where the row does not apply or cannot run here; a release build plans
// it with no kernel, so an override that asks for it gets launch_fwd's error.
template <typename T>
FwdPlan plan_wide_staged(int64_t cols, bool res, bool w_f32, bool rms, int n_affine, int device) {
  FwdPlan pl;
  const auto& dev = kp::device_info(device);
  const int max_cols = knob(Knob::FwdWidestaged, kFwd.wide_staged_max.at(fast_dram(dev.mem_gbps, dev.sms)));
  pl.t.multipass = true;
  if constexpr (sizeof(T) == 2) {
    if (!rms || res || w_f32 || dev.major < 9 || cols > max_cols || cols > int64_t{kMaxCluster} * kWideCtaCols ||
        cols <= kWideCtaCols)
      return pl;
    constexpr int nr = kFwd.wide_staged_reg_chunks, chunks = kWideCtaCols / (kWideThreads * 16 / int{sizeof(T)});
    Team& t = pl.t;
    t.e = kWideCtaCols / kWideThreads;
    t.tpr = t.threads = kWideThreads;
    t.csize = static_cast<int>(cdiv(cols, int64_t{kWideCtaCols}));
    t.multipass = false;
    pl.smem = static_cast<size_t>(chunks - nr + (n_affine > 0 ? chunks : 0)) * kWideThreads * 16;
    pl.row = "direct.wide.staged";
#ifdef KP_NORM_TUNING
    pl.kernel = fwd_wide_staged_ptr<T, nr>();
    t.multipass = kp::max_active_clusters(reinterpret_cast<const void*>(pl.kernel), device, t.threads, pl.smem, t.csize) < 1;
#endif
  }
  return pl;
}

// The forward rows of plan_table.h, in order: direct up to kFwd.direct_max (narrow rows as
// several a CTA), direct.wide or the ring beyond; the scalar path takes the direct kernel with E = 8
// and no ring; multi-pass when nothing else can hold the row here.
template <typename T>
FwdPlan plan_fwd(int64_t cols, bool vector, bool res, bool res_f32, bool w_f32, int n_affine, bool rms,
                 int device) {
  FwdPlan pl;
  const int directmax = knob(Knob::FwdDirectmax, kFwd.direct_max);
  const int ln_directmax = knob(Knob::FwdLndirectmax, kFwd.direct_max);  // (sweeps: LayerNorm's split alone)
  if (vector && cols > directmax) {
    if (wide_direct<T>(cols, res, w_f32, rms, device)) {
      pl = plan_direct<T>(cols, vector, res, w_f32, rms, device, kFwd.wide_direct_cta_cols);
      pl.row = "direct.wide";
    }
    if (!pl.kernel || pl.t.multipass) pl = plan_wide_staged<T>(cols, res, w_f32, rms, n_affine, device);
    if (pl.t.multipass) pl = plan_ring<T>(cols, res, res_f32, w_f32, n_affine, rms, device);
  } else if (vector && !rms && !res && cols > ln_directmax) {
    pl = plan_ring<T>(cols, res, res_f32, w_f32, n_affine, rms, device, /*ft_only=*/true);
    if (pl.t.multipass) pl = plan_direct<T>(cols, vector, res, w_f32, rms, device);
  } else {
    pl = plan_direct<T>(cols, vector, res, w_f32, rms, device);
  }
  if (pl.t.multipass) {
    pl = FwdPlan{};
    pl.t.multipass = true;
    pl.t.threads = pl.t.tpr = kMultiThreads;
    pl.kernel = vector ? fwd_multipass_ptr<T, true>() : fwd_multipass_ptr<T, false>();
    pl.row = "multipass";
  }
  return pl;
}

// The plan of a signature, computed once (the key is everything plan_fwd reads).
template <typename T>
const FwdPlan& cached_plan(const FwdSig& s, int device) {
  static kp::PlanCache<FwdPlan, 9> cache;
  const bool w_f32 = s.weight_dtype == kp::kF32, res_f32 = s.res && s.res_dtype == kp::kF32;
  return cache.get({device, s.cols, s.vector, s.res, res_f32, w_f32, s.n_affine, s.rms, override_generation()},
                   [&] { return plan_fwd<T>(s.cols, s.vector, s.res, res_f32, w_f32, s.n_affine, s.rms, device); });
}

FwdSig signature(const FwdArgs& a) {
  FwdSig s;
  const int vec = 16 / kp::dtype_size(a.act_dtype);
  const int ts = kp::dtype_size(a.act_dtype), ws = kp::dtype_size(a.weight_dtype), rs = kp::dtype_size(a.res_dtype);
  s.cols = a.cols;
  s.act_dtype = a.act_dtype;
  s.weight_dtype = a.weight_dtype;
  s.res_dtype = a.res_dtype;
  s.vector = a.cols % vec == 0 && kp::rows_aligned16(a.x, a.x_stride, ts) && kp::rows_aligned16(a.y, a.y_stride, ts) &&
             kp::rows_aligned16(a.res, a.res_stride, rs) && kp::rows_aligned16(a.res_out, a.res_out_stride, rs) &&
             kp::rows_aligned16(a.w, 0, ws) && kp::rows_aligned16(a.b, 0, ws);
  s.res = a.res != nullptr;
  s.rms = a.is_rms;
  s.n_affine = (a.w != nullptr) + (!a.is_rms && a.b != nullptr);
  return s;
}

template <typename T>
void launch_fwd(const FwdArgs& a, int device, cudaStream_t stream) {
  const FwdPlan& pl = cached_plan<T>(signature(a), device);
  FwdParams p;
  p.x = a.x; p.res = a.res; p.w = a.w; p.b = a.b;
  p.y = a.y; p.res_out = a.res_out; p.mean = a.mean; p.rstd = a.rstd;
  p.x_stride = a.x_stride; p.res_stride = a.res_stride; p.y_stride = a.y_stride; p.res_out_stride = a.res_out_stride;
  p.rows = a.rows; p.cols = static_cast<int>(a.cols);
  p.tpr = pl.t.tpr; p.csize = pl.t.csize; p.stages = pl.t.stages; p.nv = pl.t.nv;
  p.eps = a.eps; p.w_off = a.weight_offset;
  p.inv_cols = 1.f / static_cast<float>(a.cols);
  p.is_rms = a.is_rms;
  p.w_f32 = a.weight_dtype == kp::kF32;
  p.res_f32 = a.res_dtype == kp::kF32;
  p.has_w = a.w != nullptr; p.has_b = a.b != nullptr;
  p.has_res = a.res != nullptr; p.has_res_out = a.res_out != nullptr;
  const int64_t grid = pl.grid(a.rows);
  KP_CHECK_ARG(grid <= INT32_MAX, "too many rows for one launch");
  if (!pl.kernel)
    throw std::invalid_argument("kp_norm: the forward plan (row " + std::string(pl.row) +
                                ") names a kernel this build does not hold (overrides reach every kernel only in a "
                                "KP_NORM_TUNING build)");
  kp::launch(pl.kernel, device, dim3(static_cast<unsigned>(grid)), dim3(pl.t.threads), pl.smem, stream,
             pl.t.multipass ? 1 : pl.t.csize, p);
}

void check_fwd_dtypes(int act, int weight, int res) {
  KP_CHECK_ARG(kp::valid_dtype(act), "act_dtype: unsupported dtype code " + std::to_string(act));
  KP_CHECK_ARG(weight == act || weight == kp::kF32,
               "weight_dtype must be act_dtype or float32 (code " + std::to_string(weight) + ")");
  KP_CHECK_ARG(res == act || res == kp::kF32, "res_dtype must be act_dtype or float32 (code " + std::to_string(res) + ")");
}

}  // namespace

void norm_fwd(const FwdArgs& a, int device, cudaStream_t stream) {
  check_fwd_dtypes(a.act_dtype, a.weight_dtype, a.res_dtype);
  KP_CHECK_ARG(a.rows >= 0, "rows must be >= 0");
  KP_CHECK_ARG(a.cols >= 1 && a.cols <= (int64_t{1} << 30), "cols must be in [1, 2^30]");
  kp::check_rows("x", a.x, a.x_stride, a.rows, a.cols);
  kp::check_rows("y", a.y, a.y_stride, a.rows, a.cols);
  if (a.res) kp::check_rows("res", a.res, a.res_stride, a.rows, a.cols);
  if (a.res_out) kp::check_rows("res_out", a.res_out, a.res_out_stride, a.rows, a.cols);
  KP_CHECK_ARG(a.res || !a.res_out, "res_out is only written with a residual (res)");
  if (a.rows == 0) return;
  kp::DeviceGuard guard(device);
  KP_DISPATCH_DTYPE(a.act_dtype, T, launch_fwd<T>(a, device, stream));
}

PlanInfo norm_fwd_plan(const FwdSig& s, int64_t rows, int device) {
  check_fwd_dtypes(s.act_dtype, s.weight_dtype, s.res_dtype);
  KP_CHECK_ARG(rows >= 1, "rows must be >= 1 (a call with no rows launches nothing)");
  KP_CHECK_ARG(s.cols >= 1 && s.cols <= (int64_t{1} << 30), "cols must be in [1, 2^30]");
  KP_CHECK_ARG(s.n_affine >= 0 && s.n_affine <= (s.rms ? 1 : 2), "n_affine: 0, 1 (weight) or 2 (LayerNorm weight and bias)");
  kp::DeviceGuard guard(device);
  PlanInfo info;
  KP_DISPATCH_DTYPE(s.act_dtype, T, {
    const FwdPlan& pl = cached_plan<T>(s, device);
    info.row = pl.row;
    info.kernel = kp::kernel_name(reinterpret_cast<const void*>(pl.kernel));
    info.e = pl.t.e; info.tpr = pl.t.tpr; info.csize = pl.t.multipass ? 1 : pl.t.csize; info.threads = pl.t.threads;
    info.stages = pl.t.stages; info.nv = pl.t.nv; info.multipass = pl.t.multipass;
    info.smem = static_cast<int64_t>(pl.smem); info.grid = pl.grid(rows);
  });
  return info;
}

void set_plan_override(const std::vector<std::pair<std::string, int>>& values) {
  constexpr int n = static_cast<int>(Knob::kCount);
  int value[n] = {};
  bool set[n] = {};
  for (const auto& [name, v] : values) {
    int k = 0;
    while (k < n && name != kKnobNames[k]) ++k;
    if (k == n) {
      std::string known;
      for (const char* kn : kKnobNames) known += std::string(known.empty() ? "" : ", ") + kn;
      throw std::invalid_argument("kp_norm plan override: unknown name '" + name + "' (known: " + known + ")");
    }
    value[k] = v;
    set[k] = true;
  }
  Override& o = plan_override();
  o.any.store(false, std::memory_order_release);
  for (int k = 0; k < n; ++k) {
    o.value[k] = value[k];
    o.set[k] = set[k];
  }
  // `any` before the new generation: a plan keyed by the new generation must see the new values
  // (one made in between under the old generation is never looked up again: generations only grow).
  o.any.store(!values.empty(), std::memory_order_release);
  o.generation.fetch_add(1, std::memory_order_acq_rel);
}

const void* probe_kernel() { return reinterpret_cast<const void*>(fwd_scalar_ptr<float>()); }

}  // namespace kp_norm
