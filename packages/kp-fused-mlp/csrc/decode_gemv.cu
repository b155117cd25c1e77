// The decode kernels (decode_gemv.cuh): y^T = W x^T on mma.sync m16n8k16, with the weight rows as
// the MMA's M side (16 rows x 8 tokens a tile), so M = 1-32 tokens fill the N = 8 side and the
// weight is the operand that streams.
//
// Weight fragments straight from global memory (no shared memory): a 16-byte load gives thread
// (g = lane / 4, t = lane % 4) the 8 columns k0 + 8t .. 8t + 7 of weight row g, another those of
// row g + 8. A sum over k does not care in which order k runs, so the MMA's k index is permuted
// to match: with the same 16-byte load of x row (token) g at k0 + 8t, thread (g, t) holds exactly
// the A registers {row g, row g + 8} x {pairs 0, 1} of one m16n8k16 and the B registers of the
// same k values; pairs 2, 3 are a second MMA. Every weight byte is loaded once, 16 bytes a thread;
// a step loads `packets` adjacent packets of each row back to back, so a row is read in runs of
// 64 x packets bytes. x (small, read by every warp) sits in two CTA-shared chunks of columns that
// the CTA copies once (cp.async) while its warps read the other, one barrier a chunk.
//
// Bandwidth: each warp keeps a ring of `stages` k-steps of its 32 weight rows in registers: a step
// is consumed, then its ring slot is refilled with the step `stages` ahead, so stages x packets x
// 2 KB stay in flight per warp without shared memory. Weights are loaded with
// ld.global.nc.L1::no_allocate (they would only evict x from L1) and an L2 evict_first policy
// (read once; keeps the L2 for x, the partials and the rest of the model).
//
// K splits (grid y): on sm90, up to 8 splits of a column block are one thread-block cluster, and
// rank 0 adds the others' accumulators through distributed shared memory in split order
// (cluster_sum) and runs the epilogue. Otherwise (more splits, sm80) they write fp32 partials
// [split, m, rows] and a second kernel sums them in split order and applies the epilogue. Either
// way deterministic (no atomics), and the same sums. The kernels are launched as programmatic
// dependents (sm90; cluster launches plainly, see decode_gemv), so a kernel's launch hides under
// the previous one's tail; each waits (griddepcontrol.wait) before its first global access, so
// the overlap never reads what the previous kernel is still writing. When to trigger (H200, 2026-11-26, back-to-back calls, the
// bench's "host" column; a single call's time is the same either way): a main kernel of one split
// lets the next launch only after its weight stream: triggered at its start, the next call's CTAs
// sat resident for the whole call, and 50 calls in a row ran at 167 us each instead of 121
// (8192 -> 28672, 16 tokens; tools/decode_variants.cu pdl). With splits, whose dependent is the
// reduce, it triggers at its start: triggered after the stream, back-to-back calls of 14336 ->
// 4096 at 16 tokens ran at 52.7 us instead of 39.0 (bench_decode).
//
// The fma rows (decode_fma_kernel, M <= 2): the same weight stream on the CUDA cores, where the
// MMA's 8-token tile is mostly padding. A warp owns `rows` whole weight rows; lane l reads the
// 16-byte packet at column 8 l + 256 s of each row at step s, so one instruction covers 512
// contiguous bytes of a row (vs 64 for the mma fragments) and no lane shares a packet. Products
// in fp32 FMAs, each lane's partial sums added over the warp by a fixed xor-shuffle tree at the
// end (deterministic), the same splits, reduce and epilogue as the mma rows.
//
// Instantiations, listed on purpose: 5 fma / mma table rows x 2 dtypes x {linear, gated} main kernels, and
// 2 dtypes x {linear, gated} reduce kernels: 24 kernels.
#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "decode_epilogue.cuh"
#include "decode_gemv.cuh"
#include "decode_ptx.cuh"
#include "decode_table.h"
#include "decode_tma.cuh"
#include "kp/dtype.cuh"
#include "kp/error.cuh"
#include "kp/gemm/activation.cuh"
#include "kp/host.cuh"
#include "kp/launch.cuh"
#include "kp/plan_cache.h"

namespace kp_fused_mlp {
namespace {

using kp::gemm::Act;

constexpr int kWarps = DecodeTable::kWarps;
constexpr int kThreads = 32 * kWarps;
constexpr int kStepK = 32;      // mma: columns of one packet a row: 4 threads x 8 elements (a step: PK of them)
constexpr int kXPad = 32;       // mma: elements of padding after each token row of an x chunk (64 bytes)
constexpr int kFmaStepK = 256;  // fma: 32 lanes x 8 elements of each row
constexpr int kReduceThreads = 256;
constexpr int kMaxClusterSplits = 8;  // the portable cluster size

struct Params {
  const void* x;
  int64_t x_stride;
  const void* w;
  int64_t w_stride;
  const void* bias;
  void* y;
  float* ws;
  int64_t m, n_out, rows, k;
  int act, splits, split_steps;
  int cluster;  // > 1: the splits of a column block are one cluster and sum over it (no workspace)
};

// ---- PTX helpers (the rest: decode_ptx.cuh) ------------------------------------------------------

using namespace decode_ptx;

// 16 bytes of x through L1 (every warp of the SM reads the same columns), or zeros.
__device__ __forceinline__ uint4 ld_x(const void* p, bool ok) {
  uint4 v;
  asm volatile(
      "{\n .reg .pred q;\n setp.ne.b32 q, %5, 0;\n"
      " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
      " @q ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"(static_cast<int>(ok)));
  return v;
}

// The epilogue of one output element (decode_epilogue.cuh).
template <typename T, bool GATED>
__device__ __forceinline__ void store_out(const Params& p, int64_t tok, int64_t col, float a, float u) {
  store_decode_out<T, GATED>(p.bias, p.y, p.act, p.n_out, tok, col, a, u);
}

// The K splits' sum over a cluster (sm90): the CTAs of a cluster are the splits (grid y) of one
// block of output columns, ranked in split order. Every thread parks its accumulators in its CTA's
// shared memory (`park`, kThreads x N floats; it may alias what the CTA read before: a barrier
// first); rank 0's threads add the other ranks' parked values (distributed shared memory) rank by
// rank, each the same thread's of the same elements: the reduce kernel's order (split by split),
// without the workspace round trip or the second kernel. Returns whether this CTA holds the sums
// (rank 0: it runs the epilogue).
template <int N>
__device__ __forceinline__ bool cluster_sum(float (&acc)[N], float* park) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) park[i * kThreads + threadIdx.x] = acc[i];
  cluster.sync();
  const unsigned rank = cluster.block_rank();
  if (rank == 0)
    for (unsigned r = 1; r < cluster.num_blocks(); ++r) {
      const float* other = cluster.map_shared_rank(park, r);
#pragma unroll
      for (int i = 0; i < N; ++i) acc[i] += other[i * kThreads + threadIdx.x];
    }
  cluster.sync();  // the other ranks' shared memory stays until rank 0 has read it
  return rank == 0;
#else
  return true;  // no clusters below sm90: the plan never asks for one there
#endif
}

// ---- the main kernel -----------------------------------------------------------------------------

// Grid: x = blocks of kWarps warps (a warp: 32 weight rows; gated: 16 output columns = 16 gate
// rows + the 16 up rows I below them), y = K splits, z = 32-token (MT x 8) chunks of x.
// MT: 8-token MMA tiles; U: k-steps in the weight ring; PK: 16-byte packets a thread loads of each
// of its rows a step (a step: 32 PK columns); XC: columns of an x chunk; CTAS: CTAs an SM the
// registers must allow (decode_table.h).
template <typename T, int MT, int U, int PK, int XC, int CTAS, bool GATED>
__global__ void __launch_bounds__(kThreads, CTAS) decode_gemv_kernel(const Params p) {
  constexpr int KS = kStepK * PK;  // columns a step
  constexpr int CS = XC / KS;      // steps an x chunk
  static_assert(XC % KS == 0, "an x chunk is whole steps");
  // Launched as a programmatic dependent: this CTA may be resident before the previous kernel of
  // the stream has finished (when that kernel triggers early, as this one does). Nothing global
  // is read or written before the wait: x may be that kernel's output, and so may the weights.
  kp::wait_prior_grid();
  const bool to_reduce = p.splits > 1 && p.cluster == 1;  // the workspace and the reduce kernel
  if (to_reduce) kp::allow_dependents();  // the dependent is our reduce (header: when to trigger)
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t warp_id = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  // Output column of tile r's row g (+ 8 h); its weight row is col (+ I for the gated up tile).
  const int64_t col0 = GATED ? warp_id * 16 : warp_id * 32;
  auto col_of = [&](int r, int h) { return col0 + (GATED ? 0 : 16 * r) + g + 8 * h; };
  auto row_of = [&](int r, int h) { return col_of(r, h) + (GATED && r == 1 ? p.n_out : 0); };

  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.split_steps * KS;
  const int klen = static_cast<int>(std::min<int64_t>(p.k - k_begin, static_cast<int64_t>(p.split_steps) * KS));
  const int64_t tok0 = static_cast<int64_t>(blockIdx.z) * (8 * MT);

  const T* wp[2][2];
  bool wv[2][2];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      wv[r][h] = col_of(r, h) < p.n_out;
      wp[r][h] = static_cast<const T*>(p.w) + (wv[r][h] ? row_of(r, h) * p.w_stride : 0) + k_begin + 8 * t;
    }
  const uint64_t pol = evict_first_policy();

  // x in CTA-shared chunks of XC columns, double-buffered: the CTA's 128 threads copy chunk c + 1
  // (cp.async) while its warps read chunk c, one barrier a chunk. Every warp reads all of x, so a
  // copy per warp (the rings of before) moved 8 MT / 32 of the weight bytes again from L2 into
  // the SM: 50% at 16 tokens; shared, a quarter of that. Token rows padded by 64 bytes, so the 8
  // rows g of a quarter-warp's 16-byte reads fall in different banks. Columns past the split and
  // tokens past M are zero-filled (the weights there are zeros; garbage x could be NaN).
  constexpr int kRowElems = XC + kXPad;
  extern __shared__ uint4 x_smem[];  // [2][8 MT][kRowElems] of T
  T* const x_chunks = reinterpret_cast<T*>(x_smem);
  const T* const x_base = static_cast<const T*>(p.x);
  auto load_chunk = [&](int c) {
    T* buf = x_chunks + (c & 1) * (8 * MT) * kRowElems;
    constexpr int kPackets = 8 * MT * (XC / 8);
    static_assert(kPackets % kThreads == 0, "a chunk is whole packets a thread");
    // Not unrolled: unrolled, ptxas keeps every packet's address live across the main loop (spills).
#pragma unroll 1
    for (int i0 = 0; i0 < kPackets; i0 += kThreads) {
      const int i = i0 + threadIdx.x;
      const int tok = i / (XC / 8), c8 = i % (XC / 8);
      const int col = c * XC + 8 * c8;  // within the split
      const bool ok = tok0 + tok < p.m && col < klen;
      cp_async_16(buf + tok * kRowElems + 8 * c8, ok ? x_base + (tok0 + tok) * p.x_stride + k_begin + col : x_base, ok);
    }
    cp_async_commit();
  };

  // Each warp keeps a ring of U k-steps of its 32 weight rows in registers; a step's PK packets of
  // a row are requested back to back, so a row is read in 64 PK-byte runs (16 tokens, % of a
  // same-bytes copy, H200: PK = 1, 64-byte runs a step apart, 71-79%; PK = 2 79-91%).
  uint4 ring[U][2][2][PK];
  auto refill = [&](int u, int step) {
#pragma unroll
    for (int pk = 0; pk < PK; ++pk) {
      const bool kin = step * KS + kStepK * pk + 8 * t < klen;
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          ring[u][r][h][pk] = ld_weight(wp[r][h] + step * KS + kStepK * pk, wv[r][h] && kin, pol);
    }
  };
  load_chunk(0);
#pragma unroll
  for (int u = 0; u < U; ++u) refill(u, u);

  float acc[2][MT][4];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[r][mt][i] = 0.f;

  // Steps run in whole rings past the split's end (zeros: nothing is loaded there), so every
  // thread of the CTA meets the same chunk barriers.
  const int steps = (klen + KS - 1) / KS;
  for (int s0 = 0; s0 < steps; s0 += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int step = s0 + u;
      const int c = step / CS;
      if (step % CS == 0) {
        cp_async_wait<0>();  // chunk c (ours; the other threads' after the barrier)
        __syncthreads();     // ... and every warp is done with chunk c - 1, whose buffer c + 1 takes
        load_chunk(c + 1);
      }
      const T* xrow = x_chunks + (c & 1) * (8 * MT) * kRowElems + (step % CS) * KS + 8 * t;
      uint4 xb[MT][PK];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int pk = 0; pk < PK; ++pk)
          xb[mt][pk] = *reinterpret_cast<const uint4*>(xrow + (8 * mt + g) * kRowElems + kStepK * pk);
#pragma unroll
      for (int pk = 0; pk < PK; ++pk)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
            mma_step<T>(acc[r][mt], ring[u][r][0][pk], ring[u][r][1][pk], xb[mt][pk]);
      refill(u, step + U);  // steps past the split load nothing (zeros)
    }
  }

  cp_async_wait<0>();  // nothing in flight at exit (the last chunks are zero fills past the split)
  if (!to_reduce) kp::allow_dependents();  // only the epilogue is left (header: when to trigger)

  // Accumulator i of tile r, token tile mt: weight row of (r, h = i / 2), token 8 mt + 2t + i % 2.
  static_assert(2 * MT * 4 * kThreads * 4 <= 2 * 8 * MT * kRowElems * 2, "the x chunks hold the parked sums");
  if (p.cluster > 1 && !cluster_sum(*reinterpret_cast<float(*)[2 * MT * 4]>(&acc[0][0][0]),
                                    reinterpret_cast<float*>(x_smem)))
    return;
  if (to_reduce) {
    float* ws = p.ws + static_cast<int64_t>(blockIdx.y) * p.m * p.rows;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t tok = tok0 + 8 * mt + 2 * t + (i & 1);
        if (tok >= p.m) continue;
#pragma unroll
        for (int r = 0; r < 2; ++r)
          if (col_of(r, i >> 1) < p.n_out) ws[tok * p.rows + row_of(r, i >> 1)] = acc[r][mt][i];
      }
    return;
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t tok = tok0 + 8 * mt + 2 * t + (i & 1);
      const int h = i >> 1;
      if (tok >= p.m) continue;
      if constexpr (GATED) {
        if (wv[0][h]) store_out<T, true>(p, tok, col_of(0, h), acc[0][mt][i], acc[1][mt][i]);
      } else {
#pragma unroll
        for (int r = 0; r < 2; ++r)
          if (wv[r][h]) store_out<T, false>(p, tok, col_of(r, h), acc[r][mt][i], 0.f);
      }
    }
}

// ---- the fma kernel ------------------------------------------------------------------------------

// Two bf16 or fp16 values of a 32-bit word (element 2j: the low half) as fp32. bf16: the bits
// shifted into a float's top half (one integer op, no conversion instruction).
template <typename T>
__device__ __forceinline__ void unpack2(uint32_t v, float& lo, float& hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    lo = __uint_as_float(v << 16);
    hi = __uint_as_float(v & 0xffff0000u);
  } else {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&v));
    lo = f.x;
    hi = f.y;
  }
}

template <typename T>
__device__ __forceinline__ void unpack8(const uint4& q, float (&f)[8]) {
  unpack2<T>(q.x, f[0], f[1]);
  unpack2<T>(q.y, f[2], f[3]);
  unpack2<T>(q.z, f[4], f[5]);
  unpack2<T>(q.w, f[6], f[7]);
}

// Grid: x = blocks of kWarps warps (a warp: R weight rows; gated: R / 2 output columns, their gate
// rows and the up rows I below them), y = K splits, z = MM-token chunks of x. CTAS = 4: 128
// registers at most (16 warps an SM: decode_table.h says why).
template <typename T, int MM, int U, int R, int CTAS, bool GATED>
__global__ void __launch_bounds__(kThreads, CTAS) decode_fma_kernel(const Params p) {
  static_assert(!GATED || R % 2 == 0, "gated: a warp's rows are gate / up pairs");
  kp::wait_prior_grid();  // as decode_gemv_kernel: nothing global before the wait
  const bool to_reduce = p.splits > 1 && p.cluster == 1;
  if (to_reduce) kp::allow_dependents();  // as decode_gemv_kernel
  constexpr int C = GATED ? R / 2 : R;  // output columns a warp
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t col0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * C;
  auto col_of = [&](int r) { return col0 + r % C; };
  auto row_of = [&](int r) { return col_of(r) + (r >= C ? p.n_out : 0); };

  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.split_steps * kFmaStepK;
  const int klen = static_cast<int>(std::min<int64_t>(p.k - k_begin, static_cast<int64_t>(p.split_steps) * kFmaStepK));
  const int64_t tok0 = static_cast<int64_t>(blockIdx.z) * MM;

  const T* wp[R];
  bool wv[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    wv[r] = col_of(r) < p.n_out;
    wp[r] = static_cast<const T*>(p.w) + (wv[r] ? row_of(r) * p.w_stride : 0) + k_begin + 8 * lane;
  }
  const T* xp[MM];
  bool xv[MM];
#pragma unroll
  for (int j = 0; j < MM; ++j) {
    xv[j] = tok0 + j < p.m;
    xp[j] = static_cast<const T*>(p.x) + (xv[j] ? (tok0 + j) * p.x_stride : 0) + k_begin + 8 * lane;
  }
  const uint64_t pol = evict_first_policy();

  uint4 ring[U][R];
  auto refill = [&](uint4 (&slot)[R], int step) {
    const bool kin = step * kFmaStepK + 8 * lane < klen;
#pragma unroll
    for (int r = 0; r < R; ++r) slot[r] = ld_weight(wp[r] + step * kFmaStepK, wv[r] && kin, pol);
  };
#pragma unroll
  for (int u = 0; u < U; ++u) refill(ring[u], u);

  float acc[R][MM];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < MM; ++j) acc[r][j] = 0.f;

  const int steps = (klen + kFmaStepK - 1) / kFmaStepK;
  for (int s0 = 0; s0 < steps; s0 += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int step = s0 + u;
      const bool kin = step * kFmaStepK + 8 * lane < klen;
      float xf[MM][8];
#pragma unroll
      for (int j = 0; j < MM; ++j) unpack8<T>(ld_x(xp[j] + step * kFmaStepK, xv[j] && kin), xf[j]);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float wf[8];
        unpack8<T>(ring[u][r], wf);
#pragma unroll
        for (int e = 0; e < 8; ++e)
#pragma unroll
          for (int j = 0; j < MM; ++j) acc[r][j] = fmaf(wf[e], xf[j][e], acc[r][j]);
      }
      refill(ring[u], step + U);  // steps past the split load nothing (zeros)
    }
  }

  if (!to_reduce) kp::allow_dependents();  // as decode_gemv_kernel
  // The lanes' partial sums over the warp: a fixed xor tree, so every lane holds the same total.
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < MM; ++j)
#pragma unroll
      for (int o = 16; o; o >>= 1) acc[r][j] += __shfl_xor_sync(0xffffffffu, acc[r][j], o);

  // Every lane holds every sum now; a cluster's splits add them up (4 KB of parking, static).
  __shared__ float park[R * MM * kThreads];
  if (p.cluster > 1 && !cluster_sum(*reinterpret_cast<float(*)[R * MM]>(&acc[0][0]), park)) return;
  // Lane (r MM + j) % 32 stores (row r, token j): the stores spread over the warp.
  if (to_reduce) {
    float* ws = p.ws + static_cast<int64_t>(blockIdx.y) * p.m * p.rows;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int j = 0; j < MM; ++j)
        if (lane == (r * MM + j) % 32 && wv[r] && xv[j]) ws[(tok0 + j) * p.rows + row_of(r)] = acc[r][j];
    return;
  }
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int j = 0; j < MM; ++j)
      if (lane == (c * MM + j) % 32 && wv[c] && xv[j])
        store_out<T, GATED>(p, tok0 + j, col_of(c), acc[c][j], GATED ? acc[c + C][j] : 0.f);
}

// ---- the split reduction -------------------------------------------------------------------------

// One thread an output element: the splits' partials summed in split order, then the epilogue.
template <typename T, bool GATED>
__global__ void __launch_bounds__(kReduceThreads) decode_reduce_kernel(const Params p) {
  kp::wait_prior_grid();  // the partials of the main kernel (launched before, as our primary)
  kp::allow_dependents();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kReduceThreads + threadIdx.x;
  if (i >= p.m * p.n_out) return;
  const int64_t tok = i / p.n_out, col = i - tok * p.n_out;
  const float* ws = p.ws + tok * p.rows + col;
  const int64_t split_stride = p.m * p.rows;
  float a = 0.f, u = 0.f;
  for (int s = 0; s < p.splits; ++s) {
    a += ws[s * split_stride];
    if constexpr (GATED) u += ws[s * split_stride + p.n_out];
  }
  store_out<T, GATED>(p, tok, col, a, u);
}

// ---- host: the instantiations, plans, launches ---------------------------------------------------

template <typename T, int Row, bool GATED>
constexpr auto main_kernel() {
  using R = DecodeRowT<Row>;
  if constexpr (R::kind == DecodeKind::kFma)
    return decode_fma_kernel<T, R::tokens, R::stages, R::rows, R::ctas, GATED>;
  else
    return decode_gemv_kernel<T, R::tokens, R::stages, R::packets, R::x_chunk, R::ctas, GATED>;
}

// f(kernel) for the (dtype, row, gated) instantiation of an fma or mma row: the one place they are
// chosen (the tma rows: decode_tma.cu).
template <typename F>
void with_main_kernel(int dtype, int row, bool gated, F&& f) {
  static_assert(DecodeTable::size == 8, "a new decode row needs a case here");
  static_assert(DecodeTable::rows[5].kind == DecodeKind::kMma && DecodeTable::rows[7].kind == DecodeKind::kMma,
                "rows 2-4 are the tma rows (decode_tma.cu), 5-7 the mma rows");
  auto pick = [&](auto t) {
    using T = decltype(t);
    auto by_row = [&](auto gt) {
      constexpr bool G = decltype(gt)::value;
      switch (row) {
        case 0: return f(main_kernel<T, 0, G>());
        case 1: return f(main_kernel<T, 1, G>());
        case 5: return f(main_kernel<T, 5, G>());
        case 6: return f(main_kernel<T, 6, G>());
        case 7: return f(main_kernel<T, 7, G>());
        default: kp::throw_arg(std::string("decode: ") + DecodeTable::rows[row].name + " is a tma row");
      }
    };
    if (gated) return by_row(std::true_type{});
    return by_row(std::false_type{});
  };
  if (dtype == kp::kBF16) return pick(__nv_bfloat16{});
  return pick(__half{});
}

bool is_fma(const DecodeRow& row) { return row.kind == DecodeKind::kFma; }
bool is_tma(const DecodeRow& row) { return row.kind == DecodeKind::kTma; }
// Columns of k a step covers, output columns a CTA covers (tma: a row block), tokens a CTA covers
// (grid z's unit).
int64_t step_k(const DecodeRow& row) {
  return is_tma(row) ? row.stage_k : is_fma(row) ? kFmaStepK : kStepK * row.packets;
}
int64_t cols_per_block(const DecodeRow& row, bool gated) { return kWarps * (gated ? row.rows / 2 : row.rows); }
int64_t tokens_per_chunk(const DecodeRow& row) { return is_fma(row) ? row.tokens : 8 * row.tokens; }
// Dynamic shared memory of a CTA: the mma rows' two x chunks, [2][8 m_tiles][x_chunk + kXPad] elements
// (2 bytes each). At most 48 KB (decode_table.h), so no opt-in attribute is needed on any arch.
size_t smem_bytes(const DecodeRow& row) {
  return is_fma(row) ? 0 : static_cast<size_t>(2) * 8 * row.tokens * (row.x_chunk + kXPad) * 2;
}

// The K splits of a call (decode_table.h's rule): the fewest whose waves fill the GPU best. A
// grid of W = ctas x S / slots waves keeps W / ceil(W) of the resident slots busy over the call
// (1.13 waves: 57%, its second wave a tail), and below one wave W / min_wave, where min_wave is
// the share of the slots that saturates HBM. Bounded by the split length and the partials' bytes.
int64_t pick_splits(const DecodeRow& row, int64_t ctas, int64_t slots, int64_t ksteps, int64_t m, int64_t k) {
  const int64_t by_steps = std::max<int64_t>(1, ksteps / row.min_split_steps);
  const int64_t by_ws = std::max<int64_t>(1, row.ws_pct * k / (400 * std::max<int64_t>(1, m)));
  const int64_t s_max = std::min({by_steps, by_ws, static_cast<int64_t>(DecodeTable::kMaxSplits)});
  const double min_wave = row.min_wave_pct / 100.0;
  int64_t best = 1;
  double best_eff = -1;
  for (int64_t s = 1; s <= s_max; ++s) {
    const double w = static_cast<double>(ctas * s) / static_cast<double>(std::max<int64_t>(1, slots));
    const double eff = w > 1 ? w / std::ceil(w) : std::min(1.0, w / min_wave);
    if (eff > best_eff + 0.02) best = s, best_eff = eff;  // a split must earn its partials: > 2%
  }
  return best;
}

// The K splits and clusters of a tma call (decode_tma.cu): a cluster of S CTAs shares a run of
// tiles, rank r taking the r-th S-th of the k-steps; S = 1: rows only. The makespan is the most
// tiles a cluster gets over S, so S is the one that minimizes it among those giving each CTA
// min_cta_tiles tiles (bytes in flight), with one pass (<= 8 tiles) a cluster when S > 1, and no
// more clusters than can be resident: on the H200, 2 CTAs an SM, 132 clusters of 2 but 62 of 4, 39
// of 6, 32 of 7, 30 of 8 (GPCs). 14336 -> 4096 (256 tiles): S = 7, 8 tiles a cluster (S = 4:
// 5; S = 8 would need 32 clusters). `forced` > 0: that S (at most 8), with as many clusters as
// one pass needs.
struct TmaLayout {
  int64_t splits, clusters, per_cluster;  // per_cluster: the most tiles a cluster gets
};
TmaLayout tma_layout(const DecodeRow& row, int row_index, int dtype, bool gated, int device, int64_t tiles,
                     int64_t slots, int64_t ksteps, int forced) {
  auto layout = [&](int64_t s) {  // as many clusters as are resident at once, at most one a tile
    int64_t clusters = std::min(slots / s, tiles);
    if (s > 1) clusters = std::min<int64_t>(clusters, decode_tma_max_clusters(row_index, dtype, gated, static_cast<int>(s), device));
    clusters = std::max<int64_t>(1, clusters);
    return TmaLayout{s, clusters, kp::cdiv(tiles, clusters)};
  };
  const int64_t s_max = std::max<int64_t>(1, std::min<int64_t>(kMaxClusterSplits, ksteps));
  if (forced > 0) {  // one pass a cluster, if it takes more clusters than are resident
    TmaLayout f = layout(std::min<int64_t>(forced, s_max));
    if (f.splits > 1 && f.per_cluster > kDecodeTmaPassTiles)
      f.clusters = kp::cdiv(tiles, kDecodeTmaPassTiles), f.per_cluster = kp::cdiv(tiles, f.clusters);
    return f;
  }
  TmaLayout best = layout(1);
  bool best_fits = best.per_cluster >= row.min_cta_tiles;
  for (int64_t s = 2; s <= s_max; ++s) {
    TmaLayout c = layout(s);
    if (c.per_cluster > kDecodeTmaPassTiles) continue;  // that many clusters are not resident at once
    const bool fits = c.per_cluster >= row.min_cta_tiles;
    // Fitting first, then the makespan (per_cluster / s), the fewer splits on a tie.
    if ((fits && !best_fits) || (fits == best_fits && c.per_cluster * best.splits < best.per_cluster * s))
      best = c, best_fits = fits;
  }
  return best;
}

DecodePlan make_plan(int64_t m, int64_t n_out, int64_t k, bool gated, int dtype, int splits, int row_index,
                     int device) {
  DecodePlan pl{};
  const kp::DeviceInfo& info = kp::device_info(device);
  const int sm = info.major * 10 + info.minor;
  const int64_t tiles = decode_tma_tiles(n_out, gated);
  auto layout_of = [&](int r) {
    const int64_t slots = int64_t{decode_tma_ctas_per_sm(r, dtype, gated, device)} * info.sms;
    return tma_layout(DecodeTable::rows[r], r, dtype, gated, device, tiles, slots,
                      kp::cdiv(k, step_k(DecodeTable::rows[r])), splits);
  };
  pl.row = row_index;
  TmaLayout lay{};
  if (pl.row >= 0 && is_tma(DecodeTable::rows[pl.row])) lay = layout_of(pl.row);
  if (pl.row < 0) {  // the first row that serves M; a tma row only where rows alone fill its CTAs
    pl.row = pick_decode_row(m, sm, true);
    if (is_tma(DecodeTable::rows[pl.row])) {
      lay = layout_of(pl.row);
      // K splits stay forced only: the down projection of Llama-3-8B at 16 tokens (7 splits, 8
      // tiles a cluster) ran as fast as the mma rows alone (39.3 / 39.2 us) and made GatedMLP slower
      // after the gated tma kernel (105 us against 103; H200, 2026-11-29).
      if (lay.splits > 1 || lay.per_cluster < DecodeTable::rows[pl.row].min_cta_tiles) pl.row = pick_decode_row(m, sm, false);
    }
  }
  const DecodeRow& row = DecodeTable::rows[pl.row];
  const int64_t ksteps = kp::cdiv(k, step_k(row));
  const int64_t blocks = kp::cdiv(n_out, cols_per_block(row, gated));
  const int64_t chunks = kp::cdiv(m, tokens_per_chunk(row));
  if (is_tma(row)) {  // persistent: clusters share the 16-row tiles, K split over a cluster (decode_tma.cu)
    pl.ctas_per_sm = decode_tma_ctas_per_sm(pl.row, dtype, gated, device);
    const int64_t s = lay.splits, clusters = lay.clusters;  // computed above, once
    pl.splits = static_cast<int>(s);
    pl.split_steps = static_cast<int>(kp::cdiv(ksteps, s));
    pl.step_k = static_cast<int>(step_k(row));
    pl.cluster = static_cast<int>(s);
    pl.grid_x = static_cast<int>(clusters * s);
    pl.grid_y = 1;
    pl.grid_z = static_cast<int>(std::min<int64_t>(chunks, INT32_MAX));
    return pl;
  }
  const int64_t ctas = std::max<int64_t>(1, blocks * chunks);
  with_main_kernel(dtype, pl.row, gated, [&](auto kernel) {
    kp::DeviceGuard guard(device);
    pl.ctas_per_sm = kp::blocks_per_sm(reinterpret_cast<const void*>(kernel), device, kThreads, smem_bytes(row));
  });
  int64_t s = splits;
  if (s <= 0) s = pick_splits(row, ctas, static_cast<int64_t>(pl.ctas_per_sm) * info.sms, ksteps, m, k);
  s = std::max<int64_t>(1, std::min(s, ksteps));
  pl.split_steps = static_cast<int>(kp::cdiv(ksteps, s));
  pl.step_k = static_cast<int>(step_k(row));
  pl.splits = static_cast<int>(kp::cdiv(ksteps, pl.split_steps));  // no empty split
  // The splits sum over a cluster where they can (sm90, the portable 8 CTAs at most): no
  // workspace round trip, no reduce kernel.
  pl.cluster = info.major >= 9 && pl.splits > 1 && pl.splits <= kMaxClusterSplits ? pl.splits : 1;
  pl.grid_x = static_cast<int>(blocks);
  pl.grid_y = pl.splits;
  pl.grid_z = static_cast<int>(std::min<int64_t>(chunks, INT32_MAX));
  return pl;
}

void check(const DecodeArgs& a, int splits, int row) {
  KP_CHECK_ARG(a.dtype == kp::kF16 || a.dtype == kp::kBF16,
               std::string("decode: float16 or bfloat16, got ") + kp::dtype_name(a.dtype));
  KP_CHECK_ARG(a.act >= 0 && a.act < kp::gemm::kNumActs, "decode: unknown activation code " + std::to_string(a.act));
  KP_CHECK_ARG(!a.gated || a.act == static_cast<int>(Act::kSilu) || a.act == static_cast<int>(Act::kGeluTanh),
               "decode: the gated activation is silu or gelu_tanh (kp::gemm::Act 4 or 3)");
  KP_CHECK_ARG(a.m >= 0 && a.n_out >= 0 && a.k >= 0, "decode: negative size");
  KP_CHECK_ARG(splits >= 0, "decode: splits must be >= 0 (0: the table's choice)");
  KP_CHECK_ARG(row >= -1 && row < DecodeTable::size,
               "decode: no decode row " + std::to_string(row) + " (-1: the table's choice; decode_configs() lists " +
                   std::to_string(DecodeTable::size) + ")");
  KP_CHECK_ARG(a.k % 8 == 0, "decode: in_features K=" + std::to_string(a.k) +
                                 " is not a multiple of 8: the kernel reads 16-byte packets of 8 elements; pad it to " +
                                 std::to_string(kp::cdiv(a.k, 8) * 8));
  KP_CHECK_ARG(a.k < (int64_t{1} << 30) && a.n_out < (int64_t{1} << 30),
               "decode: K and N must be below 2^30 (the grid's and the k loop's 32-bit counters)");
  if (a.m == 0 || a.n_out == 0) return;
  KP_CHECK_ARG(a.k > 0, "decode: K = 0 (nothing to accumulate): the caller computes the epilogue of 0");
  KP_CHECK_ARG(a.x && a.w && a.y, "decode: x, w and y must not be null");
  auto rows16 = [](const void* ptr, int64_t stride, int64_t rows) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && (rows <= 1 || stride % 8 == 0);
  };
  KP_CHECK_ARG(rows16(a.x, a.x_stride, a.m) && rows16(a.w, a.w_stride, a.gated ? 2 * a.n_out : a.n_out),
               "decode: x and w must be 16-byte aligned and their row strides must be multiples of 8 elements");
  KP_CHECK_ARG(a.m <= 1 || a.x_stride >= a.k, "decode: x_stride must be >= K");
  KP_CHECK_ARG(a.w_stride >= a.k, "decode: w_stride must be >= K");
}

}  // namespace

DecodePlan decode_plan(int64_t m, int64_t n_out, int64_t k, bool gated, int dtype, int splits, int row,
                       int device) {
  KP_CHECK_ARG(row >= -1 && row < DecodeTable::size, "decode: no decode row " + std::to_string(row));
  static kp::PlanCache<DecodePlan, 8> cache;
  return cache.get({m, n_out, k, gated, dtype, splits, row, device},
                   [&] { return make_plan(m, n_out, k, gated, dtype, splits, row, device); });
}

int64_t decode_workspace_bytes(const DecodePlan& p, int64_t m, int64_t n_out, bool gated) {
  if (is_tma(DecodeTable::rows[p.row])) return 0;  // rows only: no partial sums
  return p.splits > 1 && p.cluster == 1 ? static_cast<int64_t>(p.splits) * m * (gated ? 2 * n_out : n_out) * 4 : 0;
}

std::string decode_device_problem(int device) {
  const kp::DeviceInfo& info = kp::device_info(device);
  if (info.major < 8)
    return "device " + std::to_string(device) + " is sm_" + std::to_string(info.major * 10 + info.minor) +
           ": the decode kernels need sm80 or newer (mma.sync with bfloat16)";
  return "";
}

std::vector<std::string> decode_row_names() {
  std::vector<std::string> out;
  for (const auto& r : DecodeTable::rows) out.push_back(r.name);
  return out;
}

int decode_max_m() { return DecodeTable::max_m; }

int decode_gated_max_m() { return DecodeCutTable::gated_max_m; }

void decode_gemv(const DecodeArgs& a, int splits, int row, int device, cudaStream_t stream) {
  check(a, splits, row);
  if (a.m == 0 || a.n_out == 0) return;
  const std::string why = decode_device_problem(device);
  KP_CHECK_ARG(why.empty(), "decode: " + why);
  const DecodePlan pl = decode_plan(a.m, a.n_out, a.k, a.gated, a.dtype, splits, row, device);
  KP_CHECK_ARG(kp::cdiv(a.m, tokens_per_chunk(DecodeTable::rows[pl.row])) <= 65535,
               "decode: M=" + std::to_string(a.m) + " is too large for " + DecodeTable::rows[pl.row].name +
                   "'s token chunks (grid z <= 65535); use a GEMM config");
  if (is_tma(DecodeTable::rows[pl.row])) {
    const kp::DeviceInfo& info = kp::device_info(device);
    KP_CHECK_ARG(info.major >= 9, std::string("decode: ") + DecodeTable::rows[pl.row].name +
                                      " needs sm90 (TMA); device " + std::to_string(device) + " is sm_" +
                                      std::to_string(info.major * 10 + info.minor));
    decode_tma(a, pl, device, stream);
    return;
  }
  KP_CHECK_ARG(pl.splits == 1 || pl.cluster > 1 || a.ws != nullptr,
               "decode: the plan splits K " + std::to_string(pl.splits) +
                   " ways and needs an fp32 workspace of splits x m x rows (decode_plan says how much)");
  const Params p{a.x, a.x_stride, a.w, a.w_stride, a.bias, a.y, a.ws, a.m, a.n_out,
                 a.gated ? 2 * a.n_out : a.n_out, a.k, a.act, pl.splits, pl.split_steps, pl.cluster};
  kp::DeviceGuard guard(device);
  // A programmatic dependent launch (sm90; plain elsewhere): after a kernel that triggers early
  // (this one's gated call before the down projection of GatedMLP), the CTAs are scheduled under
  // its tail instead of after it, which takes the launch gap (~1-2 us of a 25-80 us call) off.
  with_main_kernel(a.dtype, pl.row, a.gated, [&](auto kernel) {
    const dim3 grid(pl.grid_x, pl.grid_y, pl.grid_z);
    const size_t smem = smem_bytes(DecodeTable::rows[pl.row]);
    // Clusters launch plainly: as programmatic dependents, calls back to back ran ~9 us a call
    // slower than single ones (H200, 4096 -> 14336 at 1-8 tokens, 2 splits), and GatedMLP at 16
    // tokens (the down projection's 6 splits after the gated tma kernel) 107-117 us against 98,
    // also with the down weights' first KB a row prefetched to L2 before the wait (2026-11-29).
    if (pl.cluster > 1)
      kp::launch_cluster_shape(kernel, device, grid, dim3(kThreads), smem, stream, dim3(1, pl.cluster, 1), p);
    else
      kp::launch_dependent(kernel, device, grid, dim3(kThreads), smem, stream, p);
  });
  if (pl.splits == 1 || pl.cluster > 1) return;
  const dim3 grid(static_cast<unsigned>(kp::cdiv(a.m * a.n_out, kReduceThreads)));
  auto reduce = [&](auto t) {
    using T = decltype(t);
    if (a.gated)
      kp::launch_dependent(decode_reduce_kernel<T, true>, device, grid, dim3(kReduceThreads), 0, stream, p);
    else
      kp::launch_dependent(decode_reduce_kernel<T, false>, device, grid, dim3(kReduceThreads), 0, stream, p);
  };
  if (a.dtype == kp::kBF16)
    reduce(__nv_bfloat16{});
  else
    reduce(__half{});
}

}  // namespace kp_fused_mlp
