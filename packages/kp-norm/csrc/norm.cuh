// kp-norm native side: the host API bindings.cpp calls, the launch configuration, and the
// per-thread row layout the forward and backward kernels share. See NOTES.md for the design.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

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

void norm_fwd(const FwdArgs& a, int device, cudaStream_t stream);
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

// Development knob: with -DKP_NORM_TUNING, config constants can be overridden per call from the
// environment (KP_NORM_<NAME>) for sweeps; a release build compiles it to the default.
#ifdef KP_NORM_TUNING
}  // namespace kp_norm
#include <cstdlib>
namespace kp_norm {
inline int tune(const char* name, int def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : def;
}
#else
inline int tune(const char*, int def) { return def; }
#endif

// DRAM bandwidth an SM (GB/s) splits a few plans: at >= 30 (H200: 36) an SM needs more bytes in
// flight than at the H100 SXM's 25, and some choices tuned on one GPU lost on the other (NOTES.md
// "Session 9": LayerNorm forward E = 16 at 2K, the backward's WRP with db).
inline bool fast_dram(int mem_gbps, int sms) { return mem_gbps >= tune("KP_NORM_FASTDRAM_GBPSM", 30) * sms; }

inline int next_pow2(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}
inline int round_up(int64_t v, int m) { return static_cast<int>((v + m - 1) / m * m); }
inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace kp_norm

#ifdef __CUDACC__
#include "kp/dtype.cuh"
#include "kp/reduce.cuh"
#include "kp/vec.cuh"

namespace kp_norm {

// Where a thread's E elements sit in its CTA's column slice [base, base + tpr * E). They come in
// NV chunks of VEC = 16 bytes of the activation dtype T:
//   vector: chunk i of lane l is columns (i*tpr + l)*VEC .. +VEC-1: one 16-byte access, and the
//           team's accesses to chunk i are contiguous (coalesced).
//   scalar: element k of chunk i is column (i*VEC + k)*tpr + l: each scalar access is coalesced.
// The same mapping serves every tensor of a row (x, res, y, w, b, dy, dx ...), so a thread only
// ever touches its own columns. Vector path precondition (host): cols % VEC == 0 and every pointer
// and row stride 16-byte aligned, so a chunk is either wholly in the row or wholly out.
// FT > 0 (vector path): the row is exactly FT threads x E columns (no cluster), so tpr is a
// compile-time value (chunk offsets become immediates) and no chunk needs a bounds check.
template <typename T, int E, bool VECTOR, int FT = 0>
struct Lay {
  static constexpr int VEC = 16 / sizeof(T);
  static constexpr int NV = E / VEC;
  static_assert(E % VEC == 0, "E must be whole 16-byte chunks of T");
  static_assert(FT == 0 || VECTOR, "compile-time geometry: vector path only");
  int base, lane, tpr, cols;

  __device__ __forceinline__ int col(int i, int k) const {
    const int t = FT ? FT : tpr;
    return VECTOR ? base + (i * t + lane) * VEC + k : base + (i * VEC + k) * t + lane;
  }
  __device__ __forceinline__ bool ok(int i, int k) const { return FT || col(i, VECTOR ? 0 : k) < cols; }

  // Chunk i of a row of S (S is T or float) -> VEC floats; 0 outside the row or when !active.
  template <typename S, kp::Ld H>
  __device__ __forceinline__ void load(const S* row, int i, float* v, bool active) const {
    if constexpr (VECTOR) {
      const int c = col(i, 0);
      if (active && ok(i, 0)) {
        kp::ld_chunk<S, VEC, H>(row + c, v);
      } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = 0.f;
      }
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const int c = col(i, k);
        v[k] = (active && c < cols) ? kp::to_f(kp::ld1<S, H>(row + c)) : 0.f;
      }
    }
  }
  template <typename S, kp::St SH = kp::St::Plain>
  __device__ __forceinline__ void store(S* row, int i, const float* v, bool active) const {
    if constexpr (VECTOR) {
      const int c = col(i, 0);
      if (active && ok(i, 0)) kp::st_chunk<S, VEC, SH>(row + c, v);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const int c = col(i, k);
        if (active && c < cols) row[c] = kp::from_f<S>(v[k]);
      }
    }
  }
  // Load chunk i of a row whose dtype is T or float, chosen at run time (uniform branch).
  template <kp::Ld H>
  __device__ __forceinline__ void load_tf(const void* row, bool is_f32, int i, float* v, bool active) const {
    if (is_f32) load<float, H>(static_cast<const float*>(row), i, v, active);
    else load<T, H>(static_cast<const T*>(row), i, v, active);
  }
  __device__ __forceinline__ void store_tf(void* row, bool is_f32, int i, const float* v, bool active) const {
    if (is_f32) store<float>(static_cast<float*>(row), i, v, active);
    else store<T>(static_cast<T*>(row), i, v, active);
  }
};

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

// A thread's E elements of one row of S (T or float), kept undecoded: for 16-bit S half the
// registers of floats. Lets loads be in flight while registers hold other data (the residual's
// packets next to x's, the next row's packets while this row is computed).
template <typename T, typename S, int E, bool VECTOR>
struct Raw {
  using L = Lay<T, E, VECTOR>;
  static constexpr int VEC = L::VEC, NV = L::NV;
  static constexpr int PPC = VEC * static_cast<int>(sizeof(S)) / 16;  // 16-byte packets a chunk
  static constexpr int PN = kp::Packet<S>::N;
  uint4 pk[VECTOR ? NV * PPC : 1];
  float sc[VECTOR ? 1 : E];  // the scalar path keeps decoded values

  template <kp::Ld HINT = kp::Ld::Stream, typename LL = L>  // LL: L or its compile-time-geometry twin
  __device__ __forceinline__ void load(const LL& lay, const S* row, bool active) {
    if constexpr (VECTOR) {
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        const int c = lay.col(i, 0);
        const bool ok = active && lay.ok(i, 0);
#pragma unroll
        for (int j = 0; j < PPC; ++j) pk[i * PPC + j] = ok ? kp::ld16<HINT>(row + c + j * PN) : make_uint4(0, 0, 0, 0);
      }
    } else {
#pragma unroll
      for (int i = 0; i < NV; ++i) lay.template load<S, HINT>(row, i, sc + i * VEC, active);
    }
  }
  // Hide the packets' values from the optimizer, so values decoded from them before this point are
  // not kept alive (in twice the registers) for reuse after it: decoding again is cheaper.
  __device__ __forceinline__ void opaque() {
    if constexpr (VECTOR) {
#pragma unroll
      for (int q = 0; q < NV * PPC; ++q) asm volatile("" : "+r"(pk[q].x), "+r"(pk[q].y), "+r"(pk[q].z), "+r"(pk[q].w));
    } else {
#pragma unroll
      for (int j = 0; j < E; ++j) asm volatile("" : "+f"(sc[j]));
    }
  }
  __device__ __forceinline__ void decode_chunk(int i, float* v) const {  // chunk i -> VEC floats
    if constexpr (VECTOR) {
#pragma unroll
      for (int q = 0; q < PPC; ++q) kp::unpack<S>(pk[i * PPC + q], v + q * PN);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[k] = sc[i * VEC + k];
    }
  }
  // Store VEC floats as chunk i (rounded to S).
  __device__ __forceinline__ void encode_chunk(int i, const float* v) {
    if constexpr (VECTOR) {
#pragma unroll
      for (int q = 0; q < PPC; ++q) pk[i * PPC + q] = kp::pack<S>(v + q * PN);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) sc[i * VEC + k] = kp::round_to<S>(v[k]);
    }
  }
  __device__ __forceinline__ void decode(float* v) const {
    if constexpr (VECTOR) {
#pragma unroll
      for (int q = 0; q < NV * PPC; ++q) kp::unpack<S>(pk[q], v + q * PN);
    } else {
#pragma unroll
      for (int j = 0; j < E; ++j) v[j] = sc[j];
    }
  }
};

// A per-thread ring of `stages` row slices in shared memory, filled with cp.async. Packet q of a
// thread's slice in stage s sits at [(s * NP + q) * blockDim + tid] (16-byte units): consecutive
// threads hit consecutive 16 bytes (conflict-free), and a thread only ever reads its own packets,
// so cp.async.wait_group is the only synchronization. Rows in flight cost smem, not registers.
template <typename T, typename S, int E>
struct Ring {
  using L = Lay<T, E, true>;
  static constexpr int VEC = L::VEC, NV = L::NV;
  static constexpr int PPC = VEC * static_cast<int>(sizeof(S)) / 16;  // packets a chunk
  static constexpr int NP = NV * PPC;                                // packets a slice
  static constexpr int PN = kp::Packet<S>::N;
  uint4* base;  // this tensor's region: stages * NP * blockDim packets

  static constexpr int bytes_per_thread_stage() { return NP * 16; }
  __device__ __forceinline__ uint4* at(int s, int q) const { return base + (s * NP + q) * blockDim.x + threadIdx.x; }
  // Start copying `row`'s slice into stage s (zeros where !active or past the row). `any` is any
  // valid global address, used as the (unread) source of masked-off packets.
  __device__ __forceinline__ void fill(int s, const L& lay, const S* row, bool active, const void* any) const {
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int c = lay.col(i, 0);
      const bool ok = active && c < lay.cols;
#pragma unroll
      for (int j = 0; j < PPC; ++j)
        kp::cp_async16(at(s, i * PPC + j), ok ? static_cast<const void*>(row + c + j * PN) : any, ok);
    }
  }
  __device__ __forceinline__ void read_chunk(int s, int i, float* v) const {
#pragma unroll
    for (int j = 0; j < PPC; ++j) kp::unpack<S>(*at(s, i * PPC + j), v + j * PN);
  }
};

// Team geometry of a persistent grid. tpr <= 32: teams of tpr lanes share the CTA; else the CTA
// (times csize, a cluster) is the team. Team `my_team` takes rows my_team, my_team + nteams, ...
struct Geo {
  int lane, team, tpc, crank;
  int64_t my_team, nteams, lead0;  // lead0: the warp's first team (warp-uniform loop control)
  __device__ __forceinline__ Geo(int tpr, int csize) {
    const int tid = threadIdx.x;
    if (tpr <= 32) {
      lane = tid & (tpr - 1), team = tid / tpr, tpc = blockDim.x / tpr, crank = 0;
    } else {
      lane = tid, team = 0, tpc = 1, crank = static_cast<int>(blockIdx.x % csize);
    }
    const int64_t cta_team0 = static_cast<int64_t>(blockIdx.x / csize) * tpc;
    my_team = cta_team0 + team;
    nteams = static_cast<int64_t>(gridDim.x / csize) * tpc;
    lead0 = cta_team0 + (tpr <= 32 ? (tid & ~31) / tpr : 0);
  }
};

// Sum over the team: shuffles for warp/sub-warp teams, one smem round for a CTA team. FT > 0:
// tpr = FT threads is compile-time (a CTA team of FT threads is the whole CTA).
template <int FT = 0, int N>
__device__ __forceinline__ void team_sum(float (&v)[N], int tpr, float* buf) {
  if (FT ? FT <= 32 : tpr <= 32) kp::warp_sum(v, FT ? FT : tpr);
  else if constexpr (FT > 32) kp::block_sum_shfl<N, FT / 32>(v, buf);
  else kp::block_sum<N>(v, buf);
}

// LayerNorm statistics over a compile-time-geometry team (FT threads, n values of the row each): a
// thread's (mean, M2 about it), merged pairwise (Chan et al.) up a shuffle butterfly, then across
// the warps in one smem round: one reduction a row instead of a sum for the mean and another for
// M2. Merged pairs always hold equal counts, so a merge is mean = (ma + mb) / 2 and
// M2 = M2a + M2b + (mb - ma)^2 n / 2 (n: the count of one side). Each step is symmetric in a and b
// ((-d)^2 == d^2, IEEE addition commutes), so every lane ends with bit-identical statistics.
// Across warps, each lane takes one warp's pair (lane % NW) and the lanes merge up a butterfly: the
// same tree as merging the NW pairs pairwise in every thread, in 2 registers instead of 2 * NW.
// `buf`: __shared__, 8-byte aligned, FT / 32 float2.
__device__ __forceinline__ void chan_pair(float& mean, float& m2, float om, float oq, float n) {
  const float d = om - mean;
  mean = 0.5f * (mean + om);
  m2 = fmaf(d * d, 0.5f * n, m2 + oq);
}
template <int FT>
__device__ __forceinline__ void team_mean_m2(float& mean, float& m2, float n, float2* buf) {
  static_assert(FT > 0 && (FT & (FT - 1)) == 0, "a power-of-two team");
#pragma unroll
  for (int o = 1; o < (FT < 32 ? FT : 32); o <<= 1, n *= 2.f)
    chan_pair(mean, m2, __shfl_xor_sync(0xffffffffu, mean, o), __shfl_xor_sync(0xffffffffu, m2, o), n);
  if constexpr (FT > 32) {
    constexpr int NW = FT / 32;
    if ((threadIdx.x & 31) == 0) buf[threadIdx.x >> 5] = make_float2(mean, m2);
    __syncthreads();
    const float2 v = buf[threadIdx.x & (NW - 1)];
    mean = v.x;
    m2 = v.y;
#pragma unroll
    for (int o = 1; o < NW; o <<= 1, n *= 2.f)
      chan_pair(mean, m2, __shfl_xor_sync(0xffffffffu, mean, o), __shfl_xor_sync(0xffffffffu, m2, o), n);
  }
}

// Row pointer arithmetic in 64 bits (tensors exceed 2^31 elements).
template <typename S>
__device__ __forceinline__ const S* row_ptr(const void* base, int64_t row, int64_t stride) {
  return static_cast<const S*>(base) + row * stride;
}
template <typename S>
__device__ __forceinline__ S* row_ptr(void* base, int64_t row, int64_t stride) {
  return static_cast<S*>(base) + row * stride;
}

}  // namespace kp_norm
#endif  // __CUDACC__
