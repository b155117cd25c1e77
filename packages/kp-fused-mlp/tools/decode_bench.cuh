// The decode microbenchmarks' shared harness (tools/decode_variants.cu, tools/decode_stream.cu):
// the error check, a naive fp32 reference, deterministic fills, and a timer of single calls after
// a 256 MB read that flushes the L2, with the read and copy ceilings of a weight's bytes.
#pragma once
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#define CK(x)                                                                \
  do {                                                                       \
    cudaError_t e_ = (x);                                                    \
    if (e_ != cudaSuccess) {                                                 \
      std::printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                          \
    }                                                                        \
  } while (0)

namespace decode_bench {

using T = __nv_bfloat16;

// y[tok, row] = x[tok] . w[row] in fp32, a warp an output element (coalesced rows).
__global__ void reference_kernel(const T* x, const T* w, float* y, int64_t m, int64_t n, int64_t k) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (i >= m * n) return;
  const int64_t tok = i / n, row = i % n;
  float s = 0.f;
  for (int64_t c = lane; c < k; c += 32) s += __bfloat162float(x[tok * k + c]) * __bfloat162float(w[row * k + c]);
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) y[i] = s;
}

__global__ void read_kernel(const uint4* a, int64_t n16, unsigned* sink) {
  unsigned v = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n16;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 q = a[i];
    v ^= q.x ^ q.y ^ q.z ^ q.w;
  }
  if (v == 0x12345678u) *sink = v;
}

// A weight shape: N outputs (rows), K inputs.
struct Shape {
  const char* name;
  int64_t n, k;
};

// The reference outputs [m, n] on the host (ref: a device buffer of m n floats).
inline std::vector<float> reference(const T* x, const T* w, float* ref, int64_t m, int64_t n, int64_t k) {
  reference_kernel<<<static_cast<unsigned>((m * n * 32 + 255) / 256), 256>>>(x, w, ref, m, n, k);
  CK(cudaGetLastError());
  std::vector<float> h(m * n);
  CK(cudaMemcpy(h.data(), ref, h.size() * 4, cudaMemcpyDeviceToHost));
  return h;
}

// Values in [-1, 1) on a 1/512 grid, or (noisy) random bits in every mantissa, like torch.randn's.
__global__ void fill_kernel(T* a, int64_t n, unsigned seed, bool noisy = false) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  if (!noisy) {
    a[i] = __float2bfloat16((static_cast<int>(h & 1023) - 512) / 512.f);
    return;
  }
  h *= 3266489917u;
  h ^= h >> 16;
  a[i] = __float2bfloat16((static_cast<float>(h & 0xffffff) / 16777216.f - 0.5f) * 0.03f);
}
inline void fill(T* a, int64_t n, unsigned seed, bool noisy = false) {
  fill_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(a, n, seed, noisy);
  CK(cudaGetLastError());
}

inline float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Single calls, each after a read of 256 MB (the L2 left clean and cold), timed by events.
struct Timer {
  int sms;
  uint4* flush = nullptr;
  unsigned* sink = nullptr;
  cudaEvent_t e0, e1;
  static constexpr int64_t kFlushBytes = 256LL << 20;

  explicit Timer(int sms_) : sms(sms_) {
    CK(cudaMalloc(&flush, kFlushBytes));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(flush, 1, kFlushBytes));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
  }
  void read(const void* p, int64_t bytes) { read_kernel<<<sms * 8, 512>>>(static_cast<const uint4*>(p), bytes / 16, sink); }
  // Microseconds of f() after a flush.
  float time_one(const std::function<void()>& f) {
    read(flush, kFlushBytes);
    CK(cudaEventRecord(e0));
    f();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return ms * 1e3f;
  }
  // The ceilings of shape `name`'s `bytes` of weights at `w` (medians of `reps`), printed: a read of
  // them, and a device copy of half of them each way (the same bytes moved). w holds 1.5 x bytes.
  void ceilings(const char* name, int64_t n, int64_t k, void* w, int64_t bytes, int reps, float& read_us,
                float& copy_us) {
    std::vector<float> t_read, t_copy;
    for (int r = 0; r < reps; ++r) {
      t_read.push_back(time_one([&] { read(w, bytes); }));
      t_copy.push_back(time_one([&] {
        CK(cudaMemcpyAsync(static_cast<char*>(w) + bytes / 2, w, bytes / 2, cudaMemcpyDeviceToDevice));
      }));
    }
    read_us = median(t_read);
    copy_us = median(t_copy);
    std::printf("\n%s  (N %lld, K %lld, %.1f MB): read %.1f us (%.0f GB/s), copy of the same bytes %.1f us (%.0f GB/s)\n",
                name, (long long)n, (long long)k, bytes / 1e6, read_us, bytes / read_us / 1e3, copy_us,
                bytes / copy_us / 1e3);
  }
};

// Times runs[i]() `reps` times each, interleaved call by call (no heat order bias), and prints the
// medians against the ceilings.
inline void report_interleaved(const std::vector<std::function<float()>>& runs, const std::vector<std::string>& labels,
                               int reps, float read_us, float copy_us) {
  std::vector<std::vector<float>> t(runs.size());
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < runs.size(); ++i) t[i].push_back(runs[i]());
  for (size_t i = 0; i < runs.size(); ++i) {
    const float us = median(t[i]);
    std::printf("    %s  %7.1f us  %5.1f%% of read  %5.1f%% of copy\n", labels[i].c_str(), us, 100 * read_us / us,
                100 * copy_us / us);
  }
}

// The largest error of a kernel's outputs against the reference's (NaN counts as 1e30), and a
// label's "err E/R" text, " WRONG" past 1% of the largest reference value.
struct MaxError {
  double err = 0, ref = 0;
  void add(double got, double want) {
    const double e = std::abs(got - want);
    err = (e <= 1e30) ? std::max(err, e) : 1e30;
    ref = std::max(ref, std::abs(want));
  }
  std::string text() const {
    char buf[64];
    std::snprintf(buf, sizeof buf, "err %.1e/%.0f%s", err, ref, err > 1e-2 * std::max(1.0, ref) ? "  WRONG" : "");
    return buf;
  }
};

// Timed runs of one token count, labelled; report() times them interleaved and prints them.
struct Runs {
  std::vector<std::function<float()>> fns;
  std::vector<std::string> labels;
  void add(std::string label, std::function<float()> f) {
    labels.push_back(std::move(label));
    fns.push_back(std::move(f));
  }
  void report(int64_t m, int reps, float read_us, float copy_us) const {
    std::printf("  M = %lld\n", static_cast<long long>(m));
    report_interleaved(fns, labels, reps, read_us, copy_us);
  }
};

// For each shape (its ceilings measured and printed) and token count: f(shape, m, the reference
// outputs, read_us, copy_us).
template <typename Shapes, typename F>
void for_each_case(const Shapes& shapes, std::initializer_list<int64_t> tokens, Timer& timer, const T* x, T* w,
                   float* ref, int reps, F&& f) {
  for (const Shape& s : shapes) {
    float read_us, copy_us;
    timer.ceilings(s.name, s.n, s.k, w, s.n * s.k * 2, reps, read_us, copy_us);
    for (int64_t m : tokens) f(s, m, reference(x, w, ref, m, s.n, s.k), read_us, copy_us);
  }
}

}  // namespace decode_bench
