// kp-norm native side: the host API bindings.cpp calls, the launch configuration, and the affine
// parameter loads the forward and backward kernels share (the row kit itself is shared_cuda's
// kp/row.cuh). See DESIGN.md for the design.
#pragma once
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kp/host.cuh"

namespace kp_norm {

// ---- host API (argument order and meaning: docs/architecture.md, "kp-norm _C") -----------------
struct FwdArgs {
  const void* x; int64_t x_stride;
  const void* res; int64_t res_stride;
  const void* w; const void* b;
  void* y; int64_t y_stride;
  void* res_out; int64_t res_out_stride;
  float* mean; float* rstd;
  int64_t rows, cols;
  int act_dtype, weight_dtype, res_dtype;
  float eps, weight_offset;
  bool is_rms;
};

struct BwdArgs {
  const void* dy; int64_t dy_stride;
  const void* x; int64_t x_stride;
  const void* dres; int64_t dres_stride;
  const void* w; const float* mean; const float* rstd;
  void* dx; int64_t dx_stride;
  float* dw_partial; float* db_partial; int64_t num_partials;
  int64_t rows, cols;
  int act_dtype, x_dtype, weight_dtype;
  float weight_offset;
  bool is_rms;
};

// What a plan depends on besides the device and the override: the call's signature (pointer
// alignment enters as `vector`: 16-byte rows take the vector kernels, others the scalar ones).
struct FwdSig {
  int64_t cols = 0;
  int act_dtype = 0, weight_dtype = 0, res_dtype = 0;  // weight_dtype: of w (or b), else act_dtype
  bool vector = true, res = false, rms = true;
  int n_affine = 0;  // parameter vectors read: the weight, and LayerNorm's bias
};
struct BwdSig {
  int64_t cols = 0;
  int act_dtype = 0, x_dtype = 0, weight_dtype = 0;
  bool vector = true, db = false, dres = false;
};
// A plan as `plan()` reports it to Python: the table row that chose it, the kernel and its launch.
struct PlanInfo {
  std::string row, kernel;
  int e = 0, tpr = 0, csize = 1, threads = 0, stages = 0, nv = 0, wrp = 0, tile_m = 0;
  bool multipass = false;
  int64_t smem = 0, grid = 0, partials = 0;
};

void norm_fwd(const FwdArgs& a, int device, cudaStream_t stream);
PlanInfo norm_fwd_plan(const FwdSig& s, int64_t rows, int device);
PlanInfo norm_bwd_plan(const BwdSig& s, int64_t rows, int device);
int64_t norm_bwd_partials(int64_t rows, int64_t cols, int act_dtype, int x_dtype, bool with_db, int device);
void norm_bwd(const BwdArgs& a, int device, cudaStream_t stream);
// out[j] = sum_p partial[p, j]; with partial2/out2 also out2 from partial2, in the same launch.
void col_sum(const float* partial, int64_t num_partials, int64_t cols, void* out, int out_dtype, int device,
             cudaStream_t stream, const float* partial2 = nullptr, void* out2 = nullptr);
const void* probe_kernel();  // a real kernel for check_device()

// ---- launch configuration -------------------------------------------------------------------------
// A "team" normalizes one row at a time: `tpr` threads per CTA slice, each holding `e` elements in
// registers, over `csize` CTAs (a thread-block cluster on sm90) when one CTA's registers can't hold
// the row. tpr <= 32: several teams (warps or aligned sub-warps) share a CTA and reduce with
// shuffles only; tpr > 32: the CTA is the team (block reduction).
constexpr int kMaxThreads = 512;   // launch bound of the row kernels: up to 128 registers a thread
constexpr int kMaxTwinThreads = 1024;  // the register-capped E = 16 twins (16K: 1024 x 16)
constexpr int kWarpTeamCTA = 256;  // CTA size when rows share a CTA
constexpr int kMaxCluster = 16;    // sm90 limit with cudaFuncAttributeNonPortableClusterSizeAllowed
constexpr int kMultiThreads = 512; // CTA size of the multi-pass fallbacks
constexpr int kTileMaxThreads = 256;  // launch bound of the backward tile kernel (rows up to 4K, E = 16)
constexpr int kTileE = 16;             // its columns a thread
constexpr int kStaticSmemSlack = 2048;  // static smem of the kernels, kept out of the dynamic budget

struct Team {
  int e = 0, tpr = 0, csize = 1, threads = 0, stages = 0, nv = 0;  // stages: cp.async ring depth; nv: chunks a thread
  bool multipass = false;  // too wide for registers (or no clusters here): stream the row twice
  int tpc() const { return tpr <= 32 ? threads / tpr : 1; }  // teams per CTA
  int cpc() const { return tpr * e; }                         // columns per CTA slice
};

// Kernel parameters (by value, __grid_constant__-style: one struct in the constant bank).
struct FwdParams {
  const void* x; const void* res; const void* w; const void* b;
  void* y; void* res_out; float* mean; float* rstd;
  int64_t x_stride, res_stride, y_stride, res_out_stride, rows;
  int cols, tpr, csize, stages, nv;  // nv: 16-byte chunks a thread (ring kernel)
  float eps, w_off, inv_cols;        // inv_cols = 1 / cols: no division in the kernels
  bool is_rms, w_f32, res_f32, has_w, has_b, has_res, has_res_out;
};

struct BwdParams {
  const void* dy; const void* x; const void* dres; const void* w; const float* mean; const float* rstd;
  void* dx; float* dw; float* db;
  int64_t dy_stride, x_stride, dres_stride, dx_stride, rows;
  int cols, tpr, csize, stages;
  float w_off;
  bool is_rms, w_f32, has_w;
};

// ---- plan override (sweeps) -----------------------------------------------------------------
// The plan tables (norm_fwd.cu, norm_bwd.cu) decide every launch. For sweeps, a process-wide
// override replaces single table values by name: Python's `kp_norm.plan_override(fwd_stages=2)`
// (a context manager), never the environment. Every plan cache key carries the override's
// generation, so a change re-plans. An override that reaches a kernel outside the release lists
// raises in a release build (a `KP_NORM_TUNING` build instantiates every kernel the plan can name).
enum class Knob : int {
  FwdDirectmax,
  FwdLndirectmax,
  FwdWide,
  FwdWidestaged,
  FwdLne16max,
  FwdRmse16max,
  FwdRmse16twinmax,
  FwdLne16twinmax,
  FwdDft,
  FwdEmax,
  FwdDcpc,
  FwdW32split,
  FwdCap,
  FwdPol,
  FwdMaxcpt,
  FwdRthreads,
  FwdWreg,
  FwdRingws,
  FwdWsmem,
  FwdFull,
  FwdRingwr,
  FwdRing,
  FwdStages,
  FwdNp,
  BwdTilemin,
  BwdTilemax,
  BwdTile,
  BwdE,
  BwdCpc,
  BwdBpsmax,
  BwdRing,
  BwdStages,
  BwdWrpdbcols,
  BwdWrp,
  BwdWsm,
  BwdFt,
  FastdramGbpsm,
  ColsumPdl,
  kCount
};
constexpr const char* kKnobNames[] = {
    "fwd_directmax",
    "fwd_lndirectmax",
    "fwd_wide",
    "fwd_widestaged",
    "fwd_lne16max",
    "fwd_rmse16max",
    "fwd_rmse16twinmax",
    "fwd_lne16twinmax",
    "fwd_dft",
    "fwd_emax",
    "fwd_dcpc",
    "fwd_w32split",
    "fwd_cap",
    "fwd_pol",
    "fwd_maxcpt",
    "fwd_rthreads",
    "fwd_wreg",
    "fwd_ringws",
    "fwd_wsmem",
    "fwd_full",
    "fwd_ringwr",
    "fwd_ring",
    "fwd_stages",
    "fwd_np",
    "bwd_tilemin",
    "bwd_tilemax",
    "bwd_tile",
    "bwd_e",
    "bwd_cpc",
    "bwd_bpsmax",
    "bwd_ring",
    "bwd_stages",
    "bwd_wrpdbcols",
    "bwd_wrp",
    "bwd_wsm",
    "bwd_ft",
    "fastdram_gbpsm",
    "colsum_pdl"};
static_assert(sizeof(kKnobNames) / sizeof(kKnobNames[0]) == static_cast<int>(Knob::kCount), "one name a knob");

struct Override {
  std::atomic<bool> any{false};
  std::atomic<int64_t> generation{0};
  int value[static_cast<int>(Knob::kCount)] = {};
  bool set[static_cast<int>(Knob::kCount)] = {};
};
inline Override& plan_override() {
  static Override o;
  return o;
}
// The table value `def`, or the override's. Set overrides between calls, from one thread.
inline int knob(Knob k, int def) {
  const Override& o = plan_override();
  if (!o.any.load(std::memory_order_acquire)) return def;
  return o.set[static_cast<int>(k)] ? o.value[static_cast<int>(k)] : def;
}
inline int64_t override_generation() { return plan_override().generation.load(std::memory_order_acquire); }
// Replace the override (an empty list clears it). Unknown names raise ValueError.
void set_plan_override(const std::vector<std::pair<std::string, int>>& values);

// DRAM bandwidth an SM (GB/s) splits a few plans: at >= 30 (H200: 36) an SM needs more bytes in
// flight than at the H100 SXM's 25, and some choices tuned on one GPU lost on the other
// (docs/journal/kp-norm.md, session 9: LayerNorm forward E = 16 at 2K, the backward's WRP with db).
// The tables name the two classes in their columns: `slow` (H100) and `fast` (H200).
inline bool fast_dram(int mem_gbps, int sms) { return mem_gbps >= knob(Knob::FastdramGbpsm, 30) * sms; }

using kp::cdiv;
using kp::next_pow2;
using kp::round_up;

}  // namespace kp_norm

#ifdef __CUDACC__
#include "kp/dtype.cuh"
#include "kp/reduce.cuh"
#include "kp/row.cuh"
#include "kp/vec.cuh"

namespace kp_norm {

// The affine parameters of chunk i: w_eff = w + offset (1 without a weight) and the bias (0 without
// one). P is FwdParams or BwdParams; both passes of every kernel read them this way.
template <typename L, typename P>
__device__ __forceinline__ void load_w(const L& lay, const P& p, int i, float* w, bool active) {
  if (p.has_w) {
    lay.template load_tf<kp::Ld::RO>(p.w, p.w_f32, i, w, active);
#pragma unroll
    for (int k = 0; k < L::VEC; ++k) w[k] += p.w_off;
  } else {
#pragma unroll
    for (int k = 0; k < L::VEC; ++k) w[k] = 1.f;
  }
}
template <typename L>
__device__ __forceinline__ void load_b(const L& lay, const FwdParams& p, int i, float* b, bool active) {
  if (p.has_b) {
    lay.template load_tf<kp::Ld::RO>(p.b, p.w_f32, i, b, active);
  } else {
#pragma unroll
    for (int k = 0; k < L::VEC; ++k) b[k] = 0.f;
  }
}
// The residual gradient of chunk i, added to dx (0 without one).
template <typename X, typename L>
__device__ __forceinline__ void load_dres(const L& lay, const X* drr, int i, float* r, bool active) {
  if (drr) {
    lay.template load<X, kp::Ld::Stream>(drr, i, r, active);
  } else {
#pragma unroll
    for (int k = 0; k < L::VEC; ++k) r[k] = 0.f;
  }
}

using kp::chan_pair;
using kp::Geo;
using kp::Lay;
using kp::Raw;
using kp::Ring;
using kp::row_ptr;
using kp::team_mean_m2;
using kp::team_sum;

}  // namespace kp_norm
#endif  // __CUDACC__
