// The row-kernel kit: how a team of threads lays out, loads, stages and reduces one row of a
// [rows, cols] tensor (kp-norm's kernels are built from it; so are kp-quant's per-token scales).
//   Lay   where a thread's E columns sit (16-byte chunks, coalesced), loads and stores of a chunk
//   Raw   a thread's E elements kept undecoded in registers (16-bit: half the registers of floats)
//   Ring  a per-thread ring of row slices in shared memory, filled with cp.async
//   Geo   the team geometry of a persistent grid (sub-warp, warp, CTA or cluster teams)
//   team_reduce<Op> (team_sum / team_max / team_absmax), team_mean_m2   the team's reductions
//   row_ptr   64-bit row addressing
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kp/dtype.cuh"
#include "kp/reduce.cuh"
#include "kp/vec.cuh"

namespace kp {

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
  template <typename S, Ld H>
  __device__ __forceinline__ void load(const S* row, int i, float* v, bool active) const {
    if constexpr (VECTOR) {
      const int c = col(i, 0);
      if (active && ok(i, 0)) {
        ld_chunk<S, VEC, H>(row + c, v);
      } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) v[k] = 0.f;
      }
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const int c = col(i, k);
        v[k] = (active && c < cols) ? to_f(ld1<S, H>(row + c)) : 0.f;
      }
    }
  }
  template <typename S, St SH = St::Plain>
  __device__ __forceinline__ void store(S* row, int i, const float* v, bool active) const {
    if constexpr (VECTOR) {
      const int c = col(i, 0);
      if (active && ok(i, 0)) st_chunk<S, VEC, SH>(row + c, v);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const int c = col(i, k);
        if (active && c < cols) row[c] = from_f<S>(v[k]);
      }
    }
  }
  // Load chunk i of a row whose dtype is T or float, chosen at run time (uniform branch).
  template <Ld H>
  __device__ __forceinline__ void load_tf(const void* row, bool is_f32, int i, float* v, bool active) const {
    if (is_f32) load<float, H>(static_cast<const float*>(row), i, v, active);
    else load<T, H>(static_cast<const T*>(row), i, v, active);
  }
  __device__ __forceinline__ void store_tf(void* row, bool is_f32, int i, const float* v, bool active) const {
    if (is_f32) store<float>(static_cast<float*>(row), i, v, active);
    else store<T>(static_cast<T*>(row), i, v, active);
  }
};

// A thread's E elements of one row of S (T or float), kept undecoded: for 16-bit S half the
// registers of floats. Lets loads be in flight while registers hold other data (the residual's
// packets next to x's, the next row's packets while this row is computed).
template <typename T, typename S, int E, bool VECTOR>
struct Raw {
  using L = Lay<T, E, VECTOR>;
  static constexpr int VEC = L::VEC, NV = L::NV;
  static constexpr int PPC = VEC * static_cast<int>(sizeof(S)) / 16;  // 16-byte packets a chunk
  static constexpr int PN = Packet<S>::N;
  uint4 pk[VECTOR ? NV * PPC : 1];
  float sc[VECTOR ? 1 : E];  // the scalar path keeps decoded values

  template <Ld HINT = Ld::Stream, typename LL = L>  // LL: L or its compile-time-geometry twin
  __device__ __forceinline__ void load(const LL& lay, const S* row, bool active) {
    if constexpr (VECTOR) {
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        const int c = lay.col(i, 0);
        const bool ok = active && lay.ok(i, 0);
#pragma unroll
        for (int j = 0; j < PPC; ++j) pk[i * PPC + j] = ok ? ld16<HINT>(row + c + j * PN) : make_uint4(0, 0, 0, 0);
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
      for (int q = 0; q < PPC; ++q) unpack<S>(pk[i * PPC + q], v + q * PN);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[k] = sc[i * VEC + k];
    }
  }
  // Store VEC floats as chunk i (rounded to S).
  __device__ __forceinline__ void encode_chunk(int i, const float* v) {
    if constexpr (VECTOR) {
#pragma unroll
      for (int q = 0; q < PPC; ++q) pk[i * PPC + q] = pack<S>(v + q * PN);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) sc[i * VEC + k] = round_to<S>(v[k]);
    }
  }
  __device__ __forceinline__ void decode(float* v) const {
    if constexpr (VECTOR) {
#pragma unroll
      for (int q = 0; q < NV * PPC; ++q) unpack<S>(pk[q], v + q * PN);
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
  static constexpr int PN = Packet<S>::N;
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
        cp_async16(at(s, i * PPC + j), ok ? static_cast<const void*>(row + c + j * PN) : any, ok);
    }
  }
  __device__ __forceinline__ void read_chunk(int s, int i, float* v) const {
#pragma unroll
    for (int j = 0; j < PPC; ++j) unpack<S>(*at(s, i * PPC + j), v + j * PN);
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

// Reduce N values over the team with Op (kp::Sum, kp::Max, kp::AbsMax; reduce.cuh): shuffles for
// warp/sub-warp teams, one smem round for a CTA team (`buf`: __shared__ float[32 * N], alternated
// between consecutive reductions as block_reduce says). FT > 0: tpr = FT threads is compile-time (a
// CTA team of FT threads is the whole CTA). A fixed order: the bit-identical result in every lane.
// Each thread's values go in through Op::lift (|x| for AbsMax); elements a thread has none of (past
// the row) should hold Op::identity() (-inf for Max; the 0 that Lay::load gives suits Sum, AbsMax).
// NaN propagates (reduce.cuh): a row with a NaN gives NaN, in every lane.
template <class Op, int FT = 0, int N>
__device__ __forceinline__ void team_reduce(float (&v)[N], int tpr, float* buf) {
  if (FT ? FT <= 32 : tpr <= 32) warp_reduce<Op>(v, FT ? FT : tpr);
  else if constexpr (FT > 32) block_reduce_shfl<Op, FT / 32>(v, buf);
  else block_reduce<Op>(v, buf);
}
template <int FT = 0, int N>
__device__ __forceinline__ void team_sum(float (&v)[N], int tpr, float* buf) {
  team_reduce<Sum, FT>(v, tpr, buf);
}
template <int FT = 0, int N>
__device__ __forceinline__ void team_max(float (&v)[N], int tpr, float* buf) {
  team_reduce<Max, FT>(v, tpr, buf);
}
// max |x| over the team (fabsf on entry): a per-row (per-token) quantization scale's numerator.
template <int FT = 0, int N>
__device__ __forceinline__ void team_absmax(float (&v)[N], int tpr, float* buf) {
  team_reduce<AbsMax, FT>(v, tpr, buf);
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

}  // namespace kp
