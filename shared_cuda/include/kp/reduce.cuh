// Reductions: warp (shfl_xor butterfly), block (one smem round), cluster (DSMEM, sm90+), each
// generic over a reduction operator (Sum, Max, AbsMax below) with the sum kept under its old names.
// Every level combines in a fixed order, and the butterfly leaves the bit-identical result in every
// lane (each op's combine is commutative bit for bit: a+b == b+a in IEEE; max orders -0 < +0 and
// returns the canonical NaN), so all threads that share a row agree on its statistics exactly and
// results are run-to-run deterministic.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace kp {

// ---- reduction operators -------------------------------------------------------------------------
// An op is a type with three static members:
//   identity()     the value that changes nothing (what lanes or elements outside the row hold)
//   lift(x)        applied once to each thread's own values on entry to a reduction (idempotent:
//                  entering a second level, e.g. a block's partials, may apply it again)
//   combine(a, b)  the associative, commutative step; combine(a, b) and combine(b, a) are the same
//                  bits, which is what makes every lane of a butterfly end with the same result
// Note identity(): Lay::load fills 0 outside the row, right for Sum and AbsMax, not for Max (a
// row of negatives would reduce to 0): give masked-off elements Max::identity() (-inf) instead.
// NaN: all three ops propagate it. A row with a NaN sums to NaN (IEEE) and its Max and AbsMax are
// NaN too (the canonical NaN 0x7fffffff, the same bits in every lane): a quantization scale taken
// from a row with a NaN is NaN, never a silently finite scale that drops the NaN (fmaxf would).
struct Sum {
  __host__ __device__ static constexpr float identity() { return 0.f; }
  __device__ __forceinline__ static float lift(float x) { return x; }
  __device__ __forceinline__ static float combine(float a, float b) { return a + b; }
};
// max with NaN propagation: max.NaN (sm_80+; PTX: either input NaN -> canonical NaN, +0 > -0).
struct Max {
  __host__ __device__ static constexpr float identity() { return -__builtin_huge_valf(); }
  __device__ __forceinline__ static float lift(float x) { return x; }
  __device__ __forceinline__ static float combine(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    float d;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
#else
    return (a != a || b != b) ? __int_as_float(0x7fffffff) : fmaxf(a, b);
#endif
  }
};
// max |x|: lift is fabsf, and combine takes |.| of both sides too (a free operand modifier of the
// max instruction), so it is right on raw values as well. The result is >= +0 or NaN.
struct AbsMax {
  __host__ __device__ static constexpr float identity() { return 0.f; }
  __device__ __forceinline__ static float lift(float x) { return fabsf(x); }
  __device__ __forceinline__ static float combine(float a, float b) { return Max::combine(fabsf(a), fabsf(b)); }
};

// Reduce over aligned groups of `width` lanes (power of two <= 32). All 32 lanes must call it.
template <class Op, int N> __device__ __forceinline__ void warp_reduce(float (&v)[N], int width = 32) {
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = Op::lift(v[k]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    if (o < width) {
#pragma unroll
      for (int k = 0; k < N; ++k) v[k] = Op::combine(v[k], __shfl_xor_sync(0xffffffffu, v[k], o));
    }
  }
}
template <class Op> __device__ __forceinline__ float warp_reduce(float v, int width = 32) {
  float a[1] = {v};
  warp_reduce<Op>(a, width);
  return a[0];
}
template <int N> __device__ __forceinline__ void warp_sum(float (&v)[N], int width = 32) { warp_reduce<Sum>(v, width); }
__device__ __forceinline__ float warp_sum(float v, int width = 32) { return warp_reduce<Sum>(v, width); }

// The first half of a block reduction: each warp's reduction of its N floats into
// buf[warp * N + k], then the one barrier after which every thread may read all the warps' partials.
template <class Op, int N> __device__ __forceinline__ void warp_reduce_to_smem(float (&v)[N], float* buf) {
  warp_reduce<Op>(v);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int k = 0; k < N; ++k) buf[(threadIdx.x >> 5) * N + k] = v[k];
  }
  __syncthreads();
}
template <int N> __device__ __forceinline__ void warp_partials_to_smem(float (&v)[N], float* buf) {
  warp_reduce_to_smem<Sum>(v, buf);
}

// Reduction of N floats over the whole block (blockDim.x a multiple of 32). `buf` is __shared__
// float[32 * N]. One __syncthreads: callers alternate two buffers between consecutive reductions,
// since a thread reaching reduction k+2 implies every thread has finished reading reduction k.
// NW > 0: the block has NW warps (compile-time: the final loop unrolls into vector smem reads).
// The warps' partials are combined in warp order, starting from identity(), in every thread.
template <class Op, int NW = 0, int N> __device__ __forceinline__ void block_reduce(float (&v)[N], float* buf) {
  const int nw = NW ? NW : blockDim.x >> 5;
  warp_reduce_to_smem<Op>(v, buf);
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = Op::identity();
  if constexpr (NW > 0) {
#pragma unroll
    for (int w = 0; w < NW; ++w) {
#pragma unroll
      for (int k = 0; k < N; ++k) v[k] = Op::combine(v[k], buf[w * N + k]);
    }
  } else {
    for (int w = 0; w < nw; ++w) {  // smem broadcast reads, fixed order
#pragma unroll
      for (int k = 0; k < N; ++k) v[k] = Op::combine(v[k], buf[w * N + k]);
    }
  }
}
template <int N, int NW = 0> __device__ __forceinline__ void block_sum(float (&v)[N], float* buf) {
  block_reduce<Sum, NW>(v, buf);
}

// block_reduce for a compile-time NW warps that keeps registers low: after the barrier each lane
// reads one warp's partial (lane % NW) and the NW lanes of a group combine them up a shuffle
// butterfly, so a thread holds N floats instead of the N * NW that block_reduce's final loop loads
// at once (a 1024-thread CTA under a 32-register cap would spill them). Same buffer contract.
template <class Op, int NW, int N> __device__ __forceinline__ void block_reduce_shfl(float (&v)[N], float* buf) {
  static_assert(NW >= 1 && NW <= 32 && (NW & (NW - 1)) == 0, "a power-of-two warp count");
  warp_reduce_to_smem<Op>(v, buf);
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = buf[(lane & (NW - 1)) * N + k];
  warp_reduce<Op>(v, NW);
}
template <int N, int NW> __device__ __forceinline__ void block_sum_shfl(float (&v)[N], float* buf) {
  block_reduce_shfl<Sum, NW>(v, buf);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// ---- thread-block clusters (sm90): distributed shared memory ------------------------------------
// Split barrier: arrive (release: my earlier smem writes become visible) ... wait (acquire). Every
// thread of every CTA in the cluster takes part; `.aligned` needs warp-uniform control flow.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_sync() { cluster_arrive(); cluster_wait(); }
// No ordering of this thread's memory accesses (no MEMBAR): for a barrier that only says "this CTA
// has started" (its mbarriers initialized, fenced by fence.mbarrier_init).
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

// Load a float from CTA `rank`'s copy of the __shared__ object at `p` (mapa + ld.shared::cluster).
__device__ __forceinline__ float ld_dsmem(const float* p, uint32_t rank) {
  const uint32_t local = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  uint32_t remote;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

// Gather-and-reduce of a per-CTA partial: each CTA has written N floats to `slot` (its own smem)
// and the cluster has synced. Lane r of the calling warp reads rank r's slot and the warp combines
// them, so any warp gets the cluster result without another block barrier. csize <= 32.
template <class Op, int N>
__device__ __forceinline__ void cluster_gather_reduce(const float* slot, int csize, float (&out)[N]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int k = 0; k < N; ++k) out[k] = lane < csize ? ld_dsmem(slot + k, lane) : Op::identity();
  warp_reduce<Op>(out);
}
template <int N> __device__ __forceinline__ void cluster_gather_sum(const float* slot, int csize, float (&out)[N]) {
  cluster_gather_reduce<Sum>(slot, csize, out);
}

#endif

// ---- cluster exchange without a cluster barrier (sm90): st.async + mbarrier --------------------
// barrier.cluster.arrive.release has to make this CTA's *global* stores visible cluster-wide, so it
// costs a GPU-scope memory barrier (MEMBAR.ALL.GPU in SASS: wait for every store in flight) on
// each use. A persistent kernel that combines per-CTA partials once per row pays that per row.
// Instead each CTA pushes its partial (up to 4 floats) into every CTA's smem with st.async, whose
// arrival completes bytes on the receiver's mbarrier; receivers wait on their own mbarrier only.
// NB buffers rotate by row. NB = 2 when a CTA sends row k+1 after it has waited for row k: it sends
// row k+2 only after receiving every CTA's row k+1, which each sends only after reading its row-k
// buffer (past a CTA barrier), so a buffer is never overwritten while it is read. NB = 4 when a
// CTA sends row k+1 *before* waiting for row k (the statistics of the next row overlap the
// exchange of this one): row k+4's send then follows the sender's wait for row k+2, hence every
// CTA's send of row k+2, which each makes only after reading its row-k buffer.
// The sum over ranks is in rank order: bit-identical in every CTA.
// The type exists for every arch (kernels declare it in __shared__); its methods only work on sm90+.
template <int NB = 2>
struct ClusterExchangeN {
  static_assert(NB == 2 || NB == 4, "a power of two the wait parity can be taken from");
  float4 slot[NB][16];  // [buffer][sender rank]
  uint64_t bar[NB];

  __device__ __forceinline__ static uint32_t saddr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
  }
  __device__ __forceinline__ void arm(int b, int csize) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(saddr(&bar[b])), "r"(csize * 16)
                 : "memory");
#endif
  }
  // Every thread of every CTA of the cluster calls this once, before the first send (it ends with
  // a cluster barrier: no CTA may push into an mbarrier that is not initialized yet).
  __device__ __forceinline__ void init(int csize) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    init_mbarriers(csize);
    cluster_sync();
#endif
  }
  // init() in two halves, so that a short-lived CTA's first loads overlap the cluster barrier:
  // init_arrive() before them (a relaxed arrive: the fence in init_mbarriers() is what publishes
  // the mbarriers, so no MEMBAR is needed), init_wait() before the first send.
  __device__ __forceinline__ void init_arrive(int csize) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    init_mbarriers(csize);
    cluster_arrive_relaxed();
#endif
  }
  __device__ __forceinline__ void init_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cluster_wait();
#endif
  }
  __device__ __forceinline__ void init_mbarriers(int csize) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x == 0) {
      for (int b = 0; b < NB; ++b) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(saddr(&bar[b])) : "memory");
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
      for (int b = 0; b < NB; ++b) arm(b, csize);
    }
#endif
  }
  // Row k's partial v (the same in every thread of this CTA): lanes < csize of warp 0 push it to
  // rank `lane`'s slot[k % NB][my rank].
  __device__ __forceinline__ void send(int k, float4 v, int csize) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const int lane = threadIdx.x;
    if (lane < csize) {
      const uint32_t me = cluster_rank();
      uint32_t dst, mb;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(dst) : "r"(saddr(&slot[k % NB][me])), "r"(lane));
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(mb) : "r"(saddr(&bar[k % NB])), "r"(lane));
      asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(dst),
                   "r"(__float_as_uint(v.x)), "r"(__float_as_uint(v.y)), "r"(__float_as_uint(v.z)),
                   "r"(__float_as_uint(v.w)), "r"(mb)
                   : "memory");
    }
#endif
  }
  // Wait for row k's partials from all csize CTAs; returns the buffer to read (slot[k % NB][r]).
  // Thread 0 re-arms the buffer for row k + NB as soon as it has seen row k complete.
  __device__ __forceinline__ const float4* wait(int k, int csize) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const uint32_t b = saddr(&bar[k % NB]), parity = (k / NB) & 1;
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra WAIT;\n"
        "}\n" ::"r"(b),
        "r"(parity)
        : "memory");
    if (threadIdx.x == 0) arm(k % NB, csize);
#endif
    return slot[k % NB];
  }
  // send + wait, then each component combined over ranks, in rank order (the same in every CTA).
  template <class Op>
  __device__ __forceinline__ float4 reduce(int k, float4 v, int csize) {
    send(k, v, csize);
    const float4* r = wait(k, csize);
    float4 t = make_float4(Op::identity(), Op::identity(), Op::identity(), Op::identity());
    for (int i = 0; i < csize; ++i)
      t.x = Op::combine(t.x, r[i].x), t.y = Op::combine(t.y, r[i].y), t.z = Op::combine(t.z, r[i].z),
      t.w = Op::combine(t.w, r[i].w);
    return t;
  }
  __device__ __forceinline__ float4 sum(int k, float4 v, int csize) { return reduce<Sum>(k, v, csize); }
};
using ClusterExchange = ClusterExchangeN<2>;

}  // namespace kp
