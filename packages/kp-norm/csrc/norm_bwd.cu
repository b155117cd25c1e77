// Backward plan and launch: which kernel, geometry, grid and partial count a call gets (the kernels
// are declared in bwd_kernels.h and instantiated in bwd_ring.cu, bwd_direct.cu, bwd_tile.cu and
// bwd_multipass.cu); the dw/db column sums go through col_sum.cu.
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
#include "bwd_kernels.cuh"
#else
#include "bwd_kernels.h"
#endif
#include "norm.cuh"

namespace kp_norm {
namespace {


struct Plan {
  Team t;
  BwdKernel kernel = nullptr;
  size_t smem = 0;        // dynamic smem of the launch
  size_t merge = 0;       // warp teams: the end-of-kernel merge buffer (part of smem)
  int per_stage = 0;      // ring bytes per stage without dres, and with dres
  int per_stage_dres = 0;
  size_t fixed = 0;       // smem besides the ring (w_eff / raw w)
  int wrp = 0;            // the plan's kernel is a WRP one, of this kind (launch_bwd may fall back, see plan_bwd)
  int tile_m = 0;         // > 0: bwd_tile_kernel, this many rows a tile (without dres: the partial count's)
  const char* row = "";   // the table row that chose this plan (plan() reports it)
};

// Ring kernel smem: bytes a stage (without / with dres) and besides the ring, by WRP kind (see
// bwd_ring_kernel's layout).
struct RingSmem {
  int stage, stage_dres;
  size_t fixed;
};
RingSmem ring_smem_for(int threads, int e, int ts, int xs, int ws, int wrp) {
  RingSmem r;
  r.stage = threads * e * (ts + xs) + 8 * (wrp == 2 ? threads / 32 : threads);  // + (mean, rstd)
  r.stage_dres = r.stage + threads * e * xs;
  r.fixed = static_cast<size_t>(threads) * e * (wrp == 0 ? sizeof(float) : wrp == 1 ? 0 : ws);
  return r;
}

// CTA/cluster teams of E values a thread: 32 in every release plan (plan_bwd); a tuning build
// also reaches 8 and 16 (the bwd_e override), so only it instantiates those.
template <typename T, typename X, typename W, bool DB, int WRP>
BwdKernel ring_cta(int e) {
#ifdef KP_NORM_TUNING
  if (e == 8) return bwd_ring_ptr<T, X, W, 8, false, DB, WRP>();
  if (e == 16) return bwd_ring_ptr<T, X, W, 16, false, DB, WRP>();
#else
  (void)e;
#endif
  return bwd_ring_ptr<T, X, W, 32, false, DB, WRP>();
}
// Warp teams (E = 8, 16 or 32; fp32 h: 32 only, kFullKernelSet) and CTA/cluster teams (plan_bwd).
template <typename T, typename X, typename W, bool DB>
BwdKernel ring_for_wd(int e, bool wt) {
  if (wt) {
    if constexpr (kFullKernelSet<X>) {
      if (e == 8) return bwd_ring_ptr<T, X, W, 8, true, DB, false>();
      if (e == 16) return bwd_ring_ptr<T, X, W, 16, true, DB, false>();
    }
    return e == 32 ? bwd_ring_ptr<T, X, W, 32, true, DB, false>() : nullptr;
  }
  return ring_cta<T, X, W, DB, 0>(e);
}
// WRP twins: CTA/cluster teams, W as wide as T (w takes E / 2 registers for 16-bit T; fp32 w of a
// 16-bit T would take E). With db only E = 32, and WRP = 2 only with db (plan_bwd picks no other).
template <typename T, typename X, typename W>
BwdKernel ring_for_w(int e, bool wt, bool db, int wrp) {
  if constexpr (sizeof(W) == sizeof(T) && kFullKernelSet<X>)
    if (wrp && !wt) {
      if (db) return wrp == 2 ? bwd_ring_ptr<T, X, W, 32, false, true, 2>() : bwd_ring_ptr<T, X, W, 32, false, true, 1>();
      return ring_cta<T, X, W, false, 1>(e);
    }
  return db ? ring_for_wd<T, X, W, true>(e, wt) : ring_for_wd<T, X, W, false>(e, wt);
}
// Every ring kernel takes weights as wide as T: the non-WRP ones read fp32 weights of a 16-bit T
// at run time (w_eff is staged once), and the WRP ones are never given them (plan_for_call falls
// back). So `w_f32` picks nothing; it stays in the signature as the plan's statement of the case.
template <typename T, typename X>
BwdKernel ring_for(int e, bool wt, bool w_f32, bool db, int wrp = 0) {
  (void)w_f32;
  return ring_for_w<T, X, T>(e, wt, db, wrp);
}

// FT twins of the E = 32 CTA/cluster kernels, for X and W as wide as T (the common case: one
// dtype for activations and weights); launch_bwd picks them when the row fills the geometry.
// fp32 h has no WRP kernels (kernel sets), so fp32 x has the non-WRP twins only.
template <typename T, int FT>
BwdKernel ring_ft_t(bool db, int wrp) {
  if constexpr (kFullKernelSet<T>)
    if (wrp)
      return !db ? bwd_ring_ptr<T, T, T, 32, false, false, 1, FT>()
                 : wrp == 2 ? bwd_ring_ptr<T, T, T, 32, false, true, 2, FT>() : bwd_ring_ptr<T, T, T, 32, false, true, 1, FT>();
  return db ? bwd_ring_ptr<T, T, T, 32, false, true, false, FT>() : bwd_ring_ptr<T, T, T, 32, false, false, false, FT>();
}
// Release plans take the 256-thread twins only (rows of 8K-64K: clusters of 256-thread CTAs). No
// release plan fills 128 threads (4K rows take the tile kernel), and at 512 threads (128K+) the
// twin lost: H100, bf16, % of copy at 256K without / with it, LayerNorm 88.2 / 82.3, RMSNorm 89.7 /
// 89.5 (docs/benchmarks/h100/sweep-twins-2026-11-23.json). Tuning builds keep both (sweeps).
// fp32 x keeps its two non-WRP 256-thread twins: without them the fp32 LayerNorm backward at 8K-64K
// lost 8-14% of its speed (H200, docs/benchmarks/h200/kernel-sets-2026-11-25.md).
template <typename T>
BwdKernel ring_ft(int threads, bool db, int wrp) {
#ifdef KP_NORM_TUNING
  if (threads == 512) return ring_ft_t<T, 512>(db, wrp);
  if (threads == 128) return ring_ft_t<T, 128>(db, wrp);
#endif
  return threads == 256 ? ring_ft_t<T, 256>(db, wrp) : nullptr;
}

// Tile kernels. M rows a tile: as many (4, 2 or 1) as keep a tile's raw packets (dy, x, dres:
// 4 registers a packet) within 64 registers, counting db's accumulators as 24, so that with
// launch_bounds (256, 2) nothing spills (bf16 2K without db: M = 4, 128 registers, four
// 128-thread CTAs an SM; M = 4 with db or dres spilled 100-600 bytes).
template <typename T, typename X, bool DB, bool HD>
constexpr int tile_m() {
  constexpr int nv = kTileE * sizeof(T) / 16, xpp = sizeof(X) / sizeof(T);
  constexpr int per_row = 4 * nv * (1 + xpp * (HD ? 2 : 1)), extra = DB ? 24 : 0;
  return 4 * per_row + extra <= 64 ? 4 : 2 * per_row + extra <= 64 ? 2 : 1;
}
template <typename T, typename X>
BwdKernel tile_for(bool db, bool hd) {
  if constexpr (!kFullKernelSet<X>) {  // plan_bwd takes the tile row only for 16-bit h
    return nullptr;
  } else {
    if (db) return hd ? bwd_tile_ptr<T, X, kTileE, tile_m<T, X, true, true>(), true, true>()
                      : bwd_tile_ptr<T, X, kTileE, tile_m<T, X, true, false>(), true, false>();
    return hd ? bwd_tile_ptr<T, X, kTileE, tile_m<T, X, false, true>(), false, true>()
              : bwd_tile_ptr<T, X, kTileE, tile_m<T, X, false, false>(), false, false>();
  }
}

// WRP (see bwd_ring_kernel) for a vector ring plan, where it wins: w as raw packets (registers;
// WRP = 2: 16-bit smem), the fp32 w_eff's smem to the ring. Only with 3+ stages: the
// pipelined loop keeps S - 2 rows in flight during pass 1. Chosen without looking at the
// weight dtype or dres, like the partial count: launch_bwd runs the non-WRP kernel, w_eff
// back in the same smem, for fp32 weights of a 16-bit T (no WRP twin) or when dres leaves
// fewer than 2 stages. The grid is this plan's, so WRP is taken only where both fallbacks,
// at this smem, are as resident as the WRP kernel (they take no more smem, and residency
// only grows as smem shrinks): the grid is one resident wave whichever kernel runs.
// With db (E = 32 only) w's registers come on top of both accumulator sets: no w_eff smem
// means the ring gets the no-db budget, and the pipelined loop hides the cluster exchange
// that the non-WRP loop waits on (ncu, H100 LayerNorm 64K: 12-26% of stall samples).
// Which widths take it with db: kBwd.wrp_db_min_cols (plan_table.h), per GPU class.
template <typename T, typename X>
void choose_wrp(Plan& pl, int64_t cols, bool db, bool wt, int budget, int device) {
  Team& t = pl.t;
  const auto& dev = kp::device_info(device);
  auto sizes = [&](int wrp) { return ring_smem_for(t.threads, t.e, sizeof(T), sizeof(X), sizeof(T), wrp); };
  const RingSmem r0 = sizes(0);
  const int wrp_db_above = knob(Knob::BwdWrpdbcols, kBwd.wrp_db_min_cols.at(fast_dram(dev.mem_gbps, dev.sms)));
  const bool wrp_db = db && t.e == 32 && cols > wrp_db_above;
  // WRP = 2 (db only): w in smem at half the bytes of w_eff, so the registers that spilled in
  // WRP = 1 stay free. Taken where it keeps as many teams resident as WRP = 1 (256K: both one
  // 512-thread CTA an SM; at 16K-64K its extra 16 KB would cost the second CTA).
  if (!kFullKernelSet<X> || pl.t.multipass || wt || (db && !wrp_db) || !knob(Knob::BwdWrp, 1)) return;
  const int budget_w = db ? knob(Knob::BwdRing, t.csize > 1 ? kBwd.ring_budget_deep : kBwd.ring_budget) : budget;
  struct Cand {
    int wrp = 0, stages = 0, resident = 0;
    size_t smem = 0;
    RingSmem rs{};
    BwdKernel k = nullptr;
  };
  auto candidate = [&](int wrp) {
    Cand c;
    c.wrp = wrp;
    c.rs = sizes(wrp);
    c.k = ring_for<T, X>(t.e, false, false, db, wrp);
    const int bpw = std::max(1, kp::blocks_per_sm(reinterpret_cast<const void*>(c.k), device, t.threads, 0));
    c.stages = std::min({knob(Knob::BwdStages, 4), budget_w / (bpw * c.rs.stage),
                         (dev.smem_optin - kStaticSmemSlack - static_cast<int>(c.rs.fixed)) / c.rs.stage});
    c.smem = static_cast<size_t>(std::max(0, c.stages)) * c.rs.stage + c.rs.fixed;
    if (c.stages < 3 || c.smem < r0.fixed + r0.stage) return c;  // the fallback needs one stage
    auto resident = [&](BwdKernel k) {
      const void* f = reinterpret_cast<const void*>(k);
      return t.csize > 1 ? kp::max_active_clusters(f, device, t.threads, c.smem, t.csize)
                         : kp::blocks_per_sm(f, device, t.threads, c.smem);
    };
    const int rw = resident(c.k);
    if (resident(pl.kernel) >= rw &&
        (sizeof(T) == sizeof(float) || resident(ring_for<T, X>(t.e, false, true, db)) >= rw))
      c.resident = rw;
    return c;
  };
  Cand best = candidate(1);
  const int wsm = db ? knob(Knob::BwdWsm, 1) : 0;  // 2: whenever it fits (sweeps)
  if (wsm) {
    const Cand c2 = candidate(2);
    if (c2.resident >= 1 && (wsm == 2 || c2.resident >= best.resident)) best = c2;
  }
  if (best.resident >= 1) {
    pl.kernel = best.k;
    pl.wrp = best.wrp;
    pl.per_stage = best.rs.stage;
    pl.per_stage_dres = best.rs.stage_dres;
    pl.fixed = best.rs.fixed;
    t.stages = best.stages;
    pl.smem = best.smem;
  }
}

// The backward rows of plan_table.h. The plan (and so the number of partials) depends on the shape, dtypes,
// whether db is wanted (its accumulators cost registers, so occupancy) and the device; never on
// dres or the weight dtype.
template <typename T, typename X>
Plan plan_bwd(int64_t cols, bool vector, bool db, int device) {
  Plan pl;
  Team& t = pl.t;
  const auto& dev = kp::device_info(device);
  // Rows of 1K-4K: the tile kernel (see bwd_tile_kernel). Sized, like every plan, without dres.
  if (kFullKernelSet<X> && vector && cols > knob(Knob::BwdTilemin, kBwd.tile_min) && cols <= knob(Knob::BwdTilemax, kBwd.tile_max) &&
      round_up(cdiv(cols, kTileE), 32) <= kTileMaxThreads && knob(Knob::BwdTile, 1)) {
    t.e = kTileE;
    t.tpr = t.threads = round_up(cdiv(cols, kTileE), 32);
    pl.tile_m = db ? tile_m<T, X, true, false>() : tile_m<T, X, false, false>();
    pl.kernel = tile_for<T, X>(db, false);
    pl.row = "tile";
    return pl;
  }
  // E: accumulator registers a thread. Rows up to 1024: warp teams (E 8 / 16 / 32) whose CTA
  // merges them into one partial; wider: CTAs with E = 32 (fewer, fuller threads amortize each
  // row's fixed cost: the reduction, the loop, the copies' address math), clusters beyond.
  bool wt;
  if (!vector) {
    t.e = 8;
    wt = cols <= 32 * t.e;
  } else if (cols <= 1024) {  // warp teams: one partial per CTA (its 8+ teams merged), not per team
    t.e = !kFullKernelSet<X> ? 32 : cols <= 256 ? 8 : cols <= 512 ? 16 : 32;
    wt = true;
  } else {
    t.e = knob(Knob::BwdE, 32);
    wt = false;
  }
  if (wt) {
    t.tpr = next_pow2(static_cast<int>(cdiv(cols, t.e)));
    t.threads = kWarpTeamCTA;
    pl.merge = 2 * sizeof(float) * t.tpc() * cols;
  } else {
    // Columns a CTA: on sm90, rows of 8K-64K go to clusters of 256-thread CTAs (two resident an
    // SM: one CTA's reduction and cluster barrier overlap the other's passes); wider rows, and
    // GPUs without clusters, use up to 512 threads.
    const int64_t split = dev.major >= 9 && cols <= kBwd.cluster_split_max ? kBwd.cta_cols : int64_t{1} << 30;
    const int64_t cpc = std::min<int64_t>(int64_t{kMaxThreads} * t.e, knob(Knob::BwdCpc, static_cast<int>(split)));
    t.csize = static_cast<int>(cdiv(cols, cpc));
    if (vector && t.csize > kMaxCluster) {  // wider accumulators / CTAs rather than >16 CTAs
      t.e = 32;
      t.csize = static_cast<int>(cdiv(cols, static_cast<int64_t>(kMaxThreads) * t.e));
    }
    t.tpr = std::max(32, round_up(cdiv(cols, static_cast<int64_t>(t.csize) * t.e), 32));
    t.threads = t.tpr;
    if (t.csize > 1 && (dev.major < 9 || t.csize > kMaxCluster)) t.multipass = true;
  }
  if (!t.multipass) {
    if (vector) {
      // The partial count must not depend on the weight dtype: size the plan on the act-dtype
      // weight kernel (the same non-WRP kernel serves fp32 weights; plan_for_call swaps WRP out).
      pl.kernel = ring_for<T, X>(t.e, wt, false, db);  // (S = 1 works too: copy, then wait)
      auto sizes = [&](int wrp) { return ring_smem_for(t.threads, t.e, sizeof(T), sizeof(X), sizeof(T), wrp); };
      const RingSmem r0 = sizes(0);
      pl.per_stage = r0.stage;
      pl.per_stage_dres = r0.stage_dres;
      pl.fixed = r0.fixed;  // w_eff
      const int bps = std::max(1, std::min(knob(Knob::BwdBpsmax, 64),
                                           kp::blocks_per_sm(reinterpret_cast<const void*>(pl.kernel), device, t.threads, 0)));
      // Ring depth: up to 4 stages within a budget per SM and the per-CTA smem limit. A stage is
      // refilled as soon as pass 2 has read it, so S stages keep S rows in flight. Clusters (rows
      // past 8192) without db take a deeper ring (their WRP kernel wants 3 stages; H200 16K: 81 ->
      // 85% of copy). With db it would cost the second CTA an SM, whose passes hide this one's
      // reductions (H200, 16K/64K: 68/60 at 225 KB, 80/72 at 160 KB).
      const int cap = dev.smem_optin - kStaticSmemSlack - static_cast<int>(pl.fixed);
      const int budget = knob(Knob::BwdRing, t.csize > 1 && !db ? kBwd.ring_budget_deep : kBwd.ring_budget);
      // With dres, launch_bwd refits the stages into this smem (one dres stage must fit, below);
      // capping the stages here by the dres stage size instead left the 512-thread db plans of
      // 128K/256K with one stage (H200 LayerNorm 256K: 51 -> 63% of copy with two).
      t.stages = std::max(1, std::min({knob(Knob::BwdStages, 4), budget / (bps * pl.per_stage), cap / pl.per_stage}));
      pl.smem = std::max(pl.merge, static_cast<size_t>(t.stages) * pl.per_stage + pl.fixed);
      if (pl.per_stage_dres > cap) t.multipass = true;
      choose_wrp<T, X>(pl, cols, db, wt, budget, device);
    } else {
      pl.kernel = bwd_direct_ptr<T, X>();
      pl.smem = pl.merge;
    }
    if (t.csize > 1 &&
        kp::max_active_clusters(reinterpret_cast<const void*>(pl.kernel), device, t.threads, pl.smem, t.csize) < 1)
      t.multipass = true;
  }
  if (t.multipass) {
    pl = Plan{};
    pl.t.multipass = true;
    pl.t.threads = pl.t.tpr = kMultiThreads;
    pl.kernel = vector ? bwd_multipass_ptr<T, X, true>() : bwd_multipass_ptr<T, X, false>();
    pl.row = "multipass";
  } else {
    pl.row = !vector ? "direct.scalar" : wt ? "ring.warp_teams" : pl.wrp == 2 ? "ring.wrp_smem" : pl.wrp == 1 ? "ring.wrp" :
             t.csize > 1 ? "ring.cluster" : "ring.cta";
  }
  return pl;
}

// The plan of a shape, computed once (the key is everything plan_bwd reads).
template <typename T, typename X>
const Plan& cached_plan(int64_t cols, bool vector, bool db, int device) {
  static kp::PlanCache<Plan, 5> cache;
  return cache.get({device, cols, vector, db, override_generation()},
                   [&] { return plan_bwd<T, X>(cols, vector, db, device); });
}

// Number of partial rows: as many teams as are resident at once, but no idle ones.
int64_t num_partials(const Plan& pl, int64_t rows, int device) {
  if (rows == 0) return 0;
  const void* k = reinterpret_cast<const void*>(pl.kernel);
  int64_t g;
  if (pl.t.csize > 1) {
    g = kp::max_active_clusters(k, device, pl.t.threads, pl.smem, pl.t.csize);
  } else {
    g = int64_t{kp::device_info(device).sms} * std::max(1, kp::blocks_per_sm(k, device, pl.t.threads, pl.smem));
    if (!pl.t.multipass && pl.t.tpr <= 32) g = std::min(g, cdiv(rows, pl.t.tpc()));
    if (pl.tile_m) g = std::min(g, cdiv(rows, pl.tile_m));
  }
  return std::max<int64_t>(1, std::min(g, rows));
}

template <typename T, typename X>
int64_t partials_for(int64_t rows, int64_t cols, bool db, int device) {
  constexpr int VEC = 16 / sizeof(T);
  // Alignment is unknown here, so the count comes from the plan the shape prefers; a call whose
  // pointers force the scalar path runs that path with the same number of partials.
  return num_partials(cached_plan<T, X>(cols, cols % VEC == 0, db, device), rows, device);
}

bool vector_rows(const BwdArgs& a) {
  const int ts = kp::dtype_size(a.act_dtype), xs = kp::dtype_size(a.x_dtype), ws = kp::dtype_size(a.weight_dtype);
  return a.cols % (16 / ts) == 0 && kp::rows_aligned16(a.dy, a.dy_stride, ts) &&
         kp::rows_aligned16(a.x, a.x_stride, xs) && kp::rows_aligned16(a.dres, a.dres_stride, xs) &&
         kp::rows_aligned16(a.dx, a.dx_stride, xs) && kp::rows_aligned16(a.w, 0, ws) &&
         kp::rows_aligned16(a.dw_partial, 0, 4) && kp::rows_aligned16(a.db_partial, 0, 4);
}

// The launch of one call: the shape's cached plan with the kernel swapped for the call's weight
// dtype and dres (same grid and partial count; plan_bwd says why that is safe), and the stages
// refitted for dres.
template <typename T, typename X>
Plan plan_for_call(const BwdSig& s, int device) {
  Plan pl = cached_plan<T, X>(s.cols, s.vector, s.db, device);
  const bool w_f32 = s.weight_dtype == kp::kF32;
  if (pl.tile_m) {
    pl.kernel = tile_for<T, X>(s.db, s.dres);
  } else if (s.vector && !pl.t.multipass) {
    // A WRP plan falls back to the non-WRP kernel (same grid and smem, see plan_bwd) for fp32
    // weights of a 16-bit T, and when dres leaves fewer than the 2 stages its pipelined loop needs.
    const bool wrp = pl.wrp && (sizeof(T) == sizeof(float) || !w_f32) &&
                     (!s.dres || pl.smem >= 2 * static_cast<size_t>(pl.per_stage_dres) + pl.fixed);
    if (pl.wrp && !wrp) {  // the WRP = 0 layout: w_eff, a (mean, rstd) pair a thread
      const RingSmem r0 = ring_smem_for(pl.t.threads, pl.t.e, sizeof(T), sizeof(X), sizeof(T), 0);
      pl.per_stage = r0.stage;
      pl.per_stage_dres = r0.stage_dres;
      pl.fixed = r0.fixed;
      pl.row = pl.t.csize > 1 ? "ring.cluster" : "ring.cta";  // the fallback's own row
    }
    const int kind = wrp ? pl.wrp : 0;
    pl.kernel = ring_for<T, X>(pl.t.e, pl.merge > 0, w_f32, s.db, kind);
    // The compile-time-geometry twin: same launch shape, no more registers (it drops the
    // bounds checks and the run-time offsets; ACC2 keeps its accumulators from spilling), so
    // the plan's grid and smem stand. Not for fp32 weights of a 16-bit T: the twins read T-wide
    // weights only (bwd_ring_kernel's w_eff staging).
    const int thr = pl.t.threads;
    if constexpr (std::is_same_v<T, X>)
      if (pl.merge == 0 && pl.t.e == 32 && (thr == 128 || thr == 256 || thr == 512) && (sizeof(T) == 4 || !w_f32) &&
          int64_t{pl.t.csize} * thr * 32 == s.cols && knob(Knob::BwdFt, 1))
        if (BwdKernel ft = ring_ft<T>(thr, s.db, kind)) pl.kernel = ft;
    if (pl.wrp && !wrp && !s.dres) {
      pl.t.stages = std::max(1, static_cast<int>((pl.smem - pl.fixed) / pl.per_stage));
      pl.smem = static_cast<size_t>(pl.t.stages) * pl.per_stage + pl.fixed;
    }
    pl.wrp = kind;
  }
  if (s.dres && s.vector && !pl.t.multipass && !pl.tile_m) {  // a third stream: fewer stages in about the same smem
    pl.t.stages = std::max(1, static_cast<int>((pl.smem - pl.fixed) / pl.per_stage_dres));
    pl.smem = std::max(pl.merge, static_cast<size_t>(pl.t.stages) * pl.per_stage_dres + pl.fixed);
  }
  return pl;
}

template <typename T, typename X>
void launch_bwd(const BwdArgs& a, int device, cudaStream_t stream) {
  const bool db = a.db_partial != nullptr;
  const int64_t parts = partials_for<T, X>(a.rows, a.cols, db, device);
  KP_CHECK_ARG((!a.dw_partial && !a.db_partial) || a.num_partials == parts,
               "num_partials is " + std::to_string(a.num_partials) + " but norm_bwd_partials gives " +
                   std::to_string(parts) + " for this shape");
  BwdSig s;
  s.cols = a.cols;
  s.act_dtype = a.act_dtype;
  s.x_dtype = a.x_dtype;
  s.weight_dtype = a.weight_dtype;
  s.vector = vector_rows(a);
  s.db = db;
  s.dres = a.dres != nullptr;
  const Plan pl = plan_for_call<T, X>(s, device);

  BwdParams p;
  p.dy = a.dy; p.x = a.x; p.dres = a.dres; p.w = a.w; p.mean = a.mean; p.rstd = a.rstd;
  p.dx = a.dx; p.dw = a.dw_partial; p.db = a.db_partial;
  p.dy_stride = a.dy_stride; p.x_stride = a.x_stride; p.dres_stride = a.dres_stride; p.dx_stride = a.dx_stride;
  p.rows = a.rows; p.cols = static_cast<int>(a.cols);
  p.tpr = pl.t.tpr;
  p.csize = pl.t.multipass ? 1 : pl.t.csize;
  p.stages = pl.t.stages;
  p.w_off = a.weight_offset;
  p.is_rms = a.is_rms;
  p.w_f32 = a.weight_dtype == kp::kF32;
  p.has_w = a.w != nullptr;
  KP_CHECK_ARG(parts * p.csize <= INT32_MAX, "grid too large");
  if (!pl.kernel)
    throw std::invalid_argument("kp_norm: the backward plan (row " + std::string(pl.row) +
                                ") names a kernel this build does not hold (overrides reach every kernel only in a "
                                "KP_NORM_TUNING build)");
  kp::launch(pl.kernel, device, dim3(static_cast<unsigned>(parts * p.csize)), dim3(pl.t.threads), pl.smem, stream,
             p.csize, p);
}

void check_dtypes(int act, int xd) {
  KP_CHECK_ARG(kp::valid_dtype(act), "act_dtype: unsupported dtype code " + std::to_string(act));
  KP_CHECK_ARG(xd == act || xd == kp::kF32, "x_dtype must be act_dtype or float32 (code " + std::to_string(xd) + ")");
}

// (T, X) pairs: X is T or float.
#define KP_DISPATCH_TX(act, xd, ...)                                   \
  KP_DISPATCH_DTYPE(act, T, {                                          \
    if (xd == kp::kF32) {                                              \
      using X = float;                                                 \
      __VA_ARGS__;                                                     \
    } else {                                                           \
      using X = T;                                                     \
      __VA_ARGS__;                                                     \
    }                                                                  \
  })

}  // namespace

int64_t norm_bwd_partials(int64_t rows, int64_t cols, int act_dtype, int x_dtype, bool with_db, int device) {
  check_dtypes(act_dtype, x_dtype);
  KP_CHECK_ARG(rows >= 0, "rows must be >= 0");
  KP_CHECK_ARG(cols >= 1 && cols <= (int64_t{1} << 30), "cols must be in [1, 2^30]");
  if (rows == 0) return 0;
  kp::DeviceGuard guard(device);
  int64_t n = 0;
  KP_DISPATCH_TX(act_dtype, x_dtype, n = partials_for<T, X>(rows, cols, with_db, device));
  return n;
}

PlanInfo norm_bwd_plan(const BwdSig& s, int64_t rows, int device) {
  check_dtypes(s.act_dtype, s.x_dtype);
  KP_CHECK_ARG(s.weight_dtype == s.act_dtype || s.weight_dtype == kp::kF32,
               "weight_dtype must be act_dtype or float32 (code " + std::to_string(s.weight_dtype) + ")");
  KP_CHECK_ARG(rows >= 1, "rows must be >= 1 (a call with no rows launches nothing)");
  KP_CHECK_ARG(s.cols >= 1 && s.cols <= (int64_t{1} << 30), "cols must be in [1, 2^30]");
  kp::DeviceGuard guard(device);
  PlanInfo info;
  KP_DISPATCH_TX(s.act_dtype, s.x_dtype, {
    const Plan pl = plan_for_call<T, X>(s, device);
    info.row = pl.row;
    info.kernel = kp::kernel_name(reinterpret_cast<const void*>(pl.kernel));
    info.e = pl.t.e; info.tpr = pl.t.tpr; info.csize = pl.t.multipass ? 1 : pl.t.csize; info.threads = pl.t.threads;
    info.stages = pl.t.stages; info.wrp = pl.wrp; info.tile_m = pl.tile_m; info.multipass = pl.t.multipass;
    info.smem = static_cast<int64_t>(pl.smem);
    info.partials = partials_for<T, X>(rows, s.cols, s.db, device);
    info.grid = info.partials * info.csize;
  });
  return info;
}

void norm_bwd(const BwdArgs& a, int device, cudaStream_t stream) {
  check_dtypes(a.act_dtype, a.x_dtype);
  KP_CHECK_ARG(a.weight_dtype == a.act_dtype || a.weight_dtype == kp::kF32,
               "weight_dtype must be act_dtype or float32 (code " + std::to_string(a.weight_dtype) + ")");
  KP_CHECK_ARG(a.rows >= 0, "rows must be >= 0");
  KP_CHECK_ARG(a.cols >= 1 && a.cols <= (int64_t{1} << 30), "cols must be in [1, 2^30]");
  KP_CHECK_ARG(a.num_partials >= 0, "num_partials must be >= 0");
  kp::check_rows("dy", a.dy, a.dy_stride, a.rows, a.cols);
  kp::check_rows("x", a.x, a.x_stride, a.rows, a.cols);
  kp::check_rows("dx", a.dx, a.dx_stride, a.rows, a.cols);
  if (a.dres) kp::check_rows("dres", a.dres, a.dres_stride, a.rows, a.cols);
  KP_CHECK_ARG(a.rstd != nullptr, "rstd must not be null");
  KP_CHECK_ARG(a.is_rms || a.mean != nullptr, "mean must not be null for LayerNorm");
  if (a.rows == 0) return;
  kp::DeviceGuard guard(device);
  KP_DISPATCH_TX(a.act_dtype, a.x_dtype, launch_bwd<T, X>(a, device, stream));
}

}  // namespace kp_norm
