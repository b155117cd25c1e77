// Microbenchmark of the decode kernel's weight stream at 8-32 tokens (csrc/decode_gemv.cu's mma
// rows), to find what keeps them under the copy ceiling. Standalone: build here, run on the GPU.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -o decode_variants tools/decode_variants.cu   (in packages/kp-fused-mlp)
//   ./decode_variants [reps] [sweep|pdl]   (sweep: every variant at K splits 1-12 too, not only the
//   rule; pdl: plain vs programmatic dependent launches triggering at the start or after the main
//   loop, single flushed calls and 50 back to back)
//
// The kernel is the package's mma row (fragments straight from global memory, a register ring of
// U k-steps, K splits writing fp32 partials) with two knobs; the "(package)" variants are the rows
// before session 21, which chose PK = 2 with XM = 1 from this tool's runs:
//   PK  16-byte packets a thread loads of each of its rows a step: a step covers 32 PK columns,
//       so one row's 64 PK contiguous bytes are requested back to back.
//   XM  0: x in a per-thread shared-memory ring (every warp copies all of x, x is 8 MT / 32 of the
//       weight traffic into the SM: 50% at 16 tokens); 1: x in CTA-shared, double-buffered
//       chunks of XC columns that the 4 warps load once (a barrier a chunk).
// Every variant is checked against a naive fp32 kernel; times are medians of single calls, each
// after a 256 MB read flush of L2, the variants interleaved call by call (no heat order bias).
#include <cuda_bf16.h>

#include "../csrc/decode_ptx.cuh"
#include "decode_bench.cuh"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>


using namespace decode_bench;  // T, CK, the reference, fills, Timer
constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int XC = 512;     // XM = 1: columns of an x chunk
constexpr int XPAD = 32;    // elements of padding a token row of a chunk (64 B: conflict-free LDS.128)

struct Params {
  const T* x;
  const T* w;
  float* ws;
  int64_t m, n, k;
  int split_steps;
};

using namespace kp_fused_mlp::decode_ptx;  // the package's loads and MMA step (csrc/decode_ptx.cuh)
// The tool's short names for them.
__device__ __forceinline__ void cp_async16(void* smem, const void* p, bool ok) { cp_async_16(smem, p, ok); }
__device__ __forceinline__ void cp_commit() { cp_async_commit(); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  cp_async_wait<N>();
}

template <int MT, int U, int PK, int XM, int TRIG>
__global__ void __launch_bounds__(kThreads) decode_variant(const Params p) {
  constexpr int KS = 32 * PK;  // columns a step
  if constexpr (TRIG != 0) asm volatile("griddepcontrol.wait;\n" ::: "memory");
  if constexpr (TRIG == 1) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * 32;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * p.split_steps * KS;
  const int klen = static_cast<int>(std::min<int64_t>(p.k - k_begin, static_cast<int64_t>(p.split_steps) * KS));
  const int64_t tok0 = static_cast<int64_t>(blockIdx.z) * (8 * MT);

  const T* wp[2][2];
  bool wv[2][2];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = row0 + 16 * r + g + 8 * h;
      wv[r][h] = row < p.n;
      wp[r][h] = p.w + (wv[r][h] ? row * p.k : 0) + k_begin + 8 * t;
    }
  const uint64_t pol = evict_first_policy();
  extern __shared__ uint4 smem[];

  // XM 0: per-thread x ring [U][MT][PK][threads].
  const T* xp[MT];
  bool xv[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int64_t tok = tok0 + 8 * mt + g;
    xv[mt] = tok < p.m;
    xp[mt] = p.x + (xv[mt] ? tok * p.k : 0) + k_begin + 8 * t;
  }
  auto x_slot = [&](int u, int mt, int pk) -> uint4& {
    return smem[((u * MT + mt) * PK + pk) * kThreads + threadIdx.x];
  };
  // XM 1: chunks [2][8 MT][XC + XPAD] of T.
  T* xs = reinterpret_cast<T*>(smem);
  constexpr int kRowElems = XC + XPAD;
  auto load_chunk = [&](int c) {
    T* buf = xs + (c & 1) * (8 * MT) * kRowElems;
    for (int i = threadIdx.x; i < 8 * MT * (XC / 8); i += kThreads) {
      const int tok = i / (XC / 8), c8 = i % (XC / 8);
      const int col = c * XC + 8 * c8;  // within the split
      const bool ok = tok0 + tok < p.m && col < klen;
      cp_async16(buf + tok * kRowElems + 8 * c8, p.x + (ok ? (tok0 + tok) * p.k + k_begin + col : 0), ok);
    }
    cp_commit();
  };

  uint4 ring[U][2][2][PK];
  auto refill = [&](int u, int step) {
#pragma unroll
    for (int pk = 0; pk < PK; ++pk) {
      const bool kin = step * KS + 32 * pk + 8 * t < klen;
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          ring[u][r][h][pk] = ld_weight(wp[r][h] + step * KS + 32 * pk, wv[r][h] && kin, pol);
    }
    if constexpr (XM == 0) {
#pragma unroll
      for (int pk = 0; pk < PK; ++pk) {
        const bool kin = step * KS + 32 * pk + 8 * t < klen;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) cp_async16(&x_slot(u, mt, pk), xp[mt] + step * KS + 32 * pk, xv[mt] && kin);
      }
      cp_commit();
    }
  };
  if constexpr (XM == 1) load_chunk(0);
#pragma unroll
  for (int u = 0; u < U; ++u) refill(u, u);

  float acc[2][MT][4];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[r][mt][i] = 0.f;

  constexpr int CS = XC / KS;  // steps a chunk
  const int steps = (klen + KS - 1) / KS;
  for (int s0 = 0; s0 < steps; s0 += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int step = s0 + u;
      uint4 xb[MT][PK];
      if constexpr (XM == 0) {
        cp_wait<U - 1>();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int pk = 0; pk < PK; ++pk) xb[mt][pk] = x_slot(u, mt, pk);
      } else {
        const int c = step / CS;
        if (step % CS == 0) {
          cp_wait<0>();
          __syncthreads();
          load_chunk(c + 1);
        }
        const T* buf = xs + (c & 1) * (8 * MT) * kRowElems + (step % CS) * KS + 8 * t;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int pk = 0; pk < PK; ++pk)
            xb[mt][pk] = *reinterpret_cast<const uint4*>(buf + (8 * mt + g) * kRowElems + 32 * pk);
      }
#pragma unroll
      for (int pk = 0; pk < PK; ++pk)
#pragma unroll
        for (int r = 0; r < 2; ++r)
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) mma_step<T>(acc[r][mt], ring[u][r][0][pk], ring[u][r][1][pk], xb[mt][pk]);
      refill(u, step + U);
    }
  }
  cp_wait<0>();
  if constexpr (TRIG == 2) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");

  float* ws = p.ws + static_cast<int64_t>(blockIdx.y) * p.m * p.n;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t tok = tok0 + 8 * mt + 2 * t + (i & 1);
      if (tok >= p.m) continue;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int64_t row = row0 + 16 * r + g + 8 * (i >> 1);
        if (row < p.n) ws[tok * p.n + row] = acc[r][mt][i];
      }
    }
}

struct Variant {
  std::string name;
  int mt, u, pk, xm;
  const void* fn;
  std::function<void(dim3, size_t, const Params&)> launch;
};

template <int MT, int U, int PK, int XM, int TRIG = 0>
Variant make(const char* name) {
  auto fn = decode_variant<MT, U, PK, XM, TRIG>;
  return {name, MT, U, PK, XM, reinterpret_cast<const void*>(fn), [fn](dim3 grid, size_t smem, const Params& p) {
            if constexpr (TRIG == 0) {
              fn<<<grid, kThreads, smem>>>(p);
            } else {  // a programmatic dependent launch, as the package's kp::launch_dependent
              cudaLaunchConfig_t cfg = {};
              cfg.gridDim = grid;
              cfg.blockDim = dim3(kThreads);
              cfg.dynamicSmemBytes = smem;
              cudaLaunchAttribute attr[1];
              attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
              attr[0].val.programmaticStreamSerializationAllowed = 1;
              cfg.attrs = attr;
              cfg.numAttrs = 1;
              CK(cudaLaunchKernelEx(&cfg, fn, p));
            }
          }};
}

size_t smem_of(const Variant& v) {
  return v.xm == 0 ? static_cast<size_t>(v.u) * v.mt * v.pk * kThreads * 16
                   : static_cast<size_t>(2) * 8 * v.mt * (XC + XPAD) * sizeof(T);
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 30;
  const bool sweep = argc > 2 && std::string(argv[2]) == "sweep";
  const bool pdl = argc > 2 && std::string(argv[2]) == "pdl";
  // 0: the package's split rule; others force that many splits.
  const std::vector<int> split_list = sweep ? std::vector<int>{0, 1, 2, 3, 4, 6, 8, 12}
                                     : pdl  ? std::vector<int>{0, 1, 3}
                                            : std::vector<int>{0};
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("device %s, %d SMs\n", prop.name, sms);

  std::vector<Variant> vars = {
      make<1, 6, 1, 0>("m8  pk1 u6 xring (package)"),
      make<1, 3, 2, 1>("m8  pk2 u3 xcta"),
      make<1, 2, 4, 1>("m8  pk4 u2 xcta"),
      make<1, 4, 2, 1>("m8  pk2 u4 xcta"),
      make<2, 5, 1, 0>("m16 pk1 u5 xring (package)"),
      make<2, 3, 2, 0>("m16 pk2 u3 xring"),
      make<2, 5, 1, 1>("m16 pk1 u5 xcta"),
      make<2, 3, 2, 1>("m16 pk2 u3 xcta"),
      make<2, 4, 2, 1>("m16 pk2 u4 xcta"),
      make<2, 2, 4, 1>("m16 pk4 u2 xcta"),
      make<4, 3, 1, 0>("m32 pk1 u3 xring (package)"),
      make<4, 3, 1, 1>("m32 pk1 u3 xcta"),
      make<4, 2, 2, 1>("m32 pk2 u2 xcta"),
  };
  if (argc > 2 && std::string(argv[2]) == "pdl")
    vars = {
        make<1, 3, 2, 1, 0>("m8  pk2 u3 xcta plain"),
        make<1, 3, 2, 1, 1>("m8  pk2 u3 xcta pdl-start"),
        make<1, 3, 2, 1, 2>("m8  pk2 u3 xcta pdl-end"),
        make<2, 3, 2, 1, 0>("m16 pk2 u3 xcta plain"),
        make<2, 3, 2, 1, 1>("m16 pk2 u3 xcta pdl-start"),
        make<2, 3, 2, 1, 2>("m16 pk2 u3 xcta pdl-end"),
    };
  for (auto& v : vars) {
    CK(cudaFuncSetAttribute(v.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_of(v))));
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, v.fn));
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, v.fn, kThreads, smem_of(v)));
    std::printf("  %-30s regs %3d  local %4zu B  smem %6zu B  CTAs/SM %d\n", v.name.c_str(), fa.numRegs,
                fa.localSizeBytes, smem_of(v), occ);
  }

  const Shape shapes[] = {{"4096->14336", 14336, 4096},        {"14336->4096", 4096, 14336},
                          {"gated 4096/14336", 28672, 4096},   {"8192->28672", 28672, 8192},
                          {"28672->8192", 8192, 28672},        {"gated 8192/28672", 57344, 8192}};
  const int64_t max_w = 57344LL * 8192, max_x = 32LL * 28672;
  T *w, *x;
  float *ws, *ref;
  CK(cudaMalloc(&w, max_w * sizeof(T)));
  CK(cudaMalloc(&x, max_x * sizeof(T)));
  CK(cudaMalloc(&ws, 32LL * 32 * 57344 * sizeof(float)));
  CK(cudaMalloc(&ref, 32LL * 57344 * sizeof(float)));
  fill(w, max_w, 1u);
  fill(x, max_x, 7u);
  Timer timer(sms);
  auto time_one = [&](const std::function<void()>& f) { return timer.time_one(f); };

  for (const Shape& s : shapes) {
    const int64_t wbytes = s.n * s.k * 2;
    // Ceilings: a read of the weight bytes, and a device copy of them (2x the bytes moved).
    float read_us, copy_us;
    timer.ceilings(s.name, s.n, s.k, w, wbytes, reps, read_us, copy_us);
    for (int64_t m : {8, 16, 32}) {
      const std::vector<float> h_ref = reference(x, w, ref, m, s.n, s.k);
      std::vector<std::function<float()>> runs;
      std::vector<std::string> labels;
      for (const Variant& v : vars)
        for (int forced : split_list) {
        if (8 * v.mt != m) continue;
        int occ = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, v.fn, kThreads, smem_of(v)));
        const int ks = 32 * v.pk;
        const int64_t ksteps = (s.k + ks - 1) / ks;
        const int64_t ctas = (s.n + 127) / 128;
        // The package's split rule before session 21 (fill 2, one wave, >= 448 columns a split,
        // partials <= 4%); `sweep` tries the others.
        int64_t sp = std::min<int64_t>({(2LL * sms + ctas - 1) / ctas, std::max<int64_t>(1, occ * sms / ctas),
                               std::max<int64_t>(1, ksteps * ks / 448), std::max<int64_t>(1, 4 * s.k / (400 * m)),
                               (int64_t)32});
        sp = std::max<int64_t>(1, forced > 0 ? forced : sp);
        const int split_steps = static_cast<int>((ksteps + sp - 1) / sp);
        const int splits = static_cast<int>((ksteps + split_steps - 1) / split_steps);
        if (forced > 0 && splits != forced) continue;
        const Params p{x, w, ws, m, s.n, s.k, split_steps};
        const dim3 grid(static_cast<unsigned>(ctas), splits, 1);
        const size_t smem = smem_of(v);
        // Correctness: the splits' partials summed against the naive kernel.
        CK(cudaMemset(ws, 0xff, static_cast<size_t>(splits) * m * s.n * 4));  // NaN-poisoned
        v.launch(grid, smem, p);
        CK(cudaGetLastError());
        std::vector<float> h_ws(static_cast<size_t>(splits) * m * s.n);
        CK(cudaMemcpy(h_ws.data(), ws, h_ws.size() * 4, cudaMemcpyDeviceToHost));
        double max_err = 0, max_ref = 0;
        for (int64_t i = 0; i < m * s.n; ++i) {
          double a = 0;
          for (int sp2 = 0; sp2 < splits; ++sp2) a += h_ws[sp2 * m * s.n + i];
          max_err = std::max(max_err, std::abs(a - h_ref[i]));
          if (!(std::abs(a - h_ref[i]) <= 1e30)) max_err = 1e30;  // NaN
          max_ref = std::max(max_ref, (double)std::abs(h_ref[i]));
        }
        char label[160];
        std::snprintf(label, sizeof label, "%-30s splits %2d%s err %.1e/%.0f", v.name.c_str(), splits,
                      forced > 0 ? " " : "*", max_err, max_ref);
        labels.push_back(label);
        runs.push_back([&v, grid, smem, p, &time_one] { return time_one([&] { v.launch(grid, smem, p); }); });
        if (pdl) {  // back to back: 50 calls between two events, no flush (a model's layer loop)
          labels.push_back(std::string(label) + " b2b");
          runs.push_back([&v, grid, smem, p, &timer] {
            CK(cudaEventRecord(timer.e0));
            for (int i = 0; i < 50; ++i) v.launch(grid, smem, p);
            CK(cudaEventRecord(timer.e1));
            CK(cudaEventSynchronize(timer.e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, timer.e0, timer.e1));
            return ms * 1e3f / 50;
          });
        }
      }
      std::printf("  M = %lld\n", (long long)m);
      report_interleaved(runs, labels, reps, read_us, copy_us);
    }
  }
  return 0;
}
