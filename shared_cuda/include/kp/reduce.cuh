// Reductions: warp (shfl_xor butterfly), block (one smem round), cluster (DSMEM, sm90+).
// Every level sums in a fixed order, and the butterfly leaves the bit-identical total in every
// lane (a+b == b+a in IEEE), so all threads that share a row agree on its statistics exactly and
// results are run-to-run deterministic.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace kp {

// Sum over aligned groups of `width` lanes (power of two <= 32). All 32 lanes must call it.
template <int N> __device__ __forceinline__ void warp_sum(float (&v)[N], int width = 32) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    if (o < width) {
#pragma unroll
      for (int k = 0; k < N; ++k) v[k] += __shfl_xor_sync(0xffffffffu, v[k], o);
    }
  }
}
__device__ __forceinline__ float warp_sum(float v, int width = 32) {
  float a[1] = {v};
  warp_sum(a, width);
  return a[0];
}

// Sum of N floats over the whole block (blockDim.x a multiple of 32). `buf` is __shared__
// float[32 * N]. One __syncthreads: callers alternate two buffers between consecutive reductions,
// since a thread reaching reduction k+2 implies every thread has finished reading reduction k.
template <int N> __device__ __forceinline__ void block_sum(float (&v)[N], float* buf) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  warp_sum(v);
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < N; ++k) buf[warp * N + k] = v[k];
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = 0.f;
  for (int w = 0; w < nw; ++w) {  // smem broadcast reads, fixed order
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] += buf[w * N + k];
  }
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// ---- thread-block clusters (sm90): distributed shared memory ------------------------------------
// Split barrier: arrive (release: my earlier smem writes become visible) ... wait (acquire). Every
// thread of every CTA in the cluster takes part; `.aligned` needs warp-uniform control flow.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_sync() { cluster_arrive(); cluster_wait(); }
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

// Gather-and-sum of a per-CTA partial: each CTA has written N floats to `slot` (its own smem) and
// the cluster has synced. Lane r of the calling warp reads rank r's slot and the warp sums them, so
// any warp gets the cluster total without another block barrier. csize <= 32.
template <int N> __device__ __forceinline__ void cluster_gather_sum(const float* slot, int csize, float (&out)[N]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int k = 0; k < N; ++k) out[k] = lane < csize ? ld_dsmem(slot + k, lane) : 0.f;
  warp_sum(out);
}
#endif

}  // namespace kp
