// Host launch helpers: device guard, per-device caches of the properties and occupancy numbers a
// launch decision needs (queried once, so a call costs no driver round trips after the first), and
// cudaLaunchKernelEx with an optional thread-block cluster.
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "kp/error.cuh"

namespace kp {

// Binds `device`'s primary context to this thread, once a thread and device. kp's host code calls
// the driver API (cuTensorMapEncodeTiled: every TMA descriptor, CUTLASS's and kp's own), which needs
// a current context; the runtime binds one only at a thread's first runtime call that needs it. An
// autograd worker thread whose first CUDA work was a kp backward GEMM had none: its descriptors
// failed with CUDA_ERROR_INVALID_CONTEXT and the kernel ran on garbage ones (an illegal
// instruction; GatedMLP's fused backward as the first backward of a process, H200, 2026-11-30).
// cudaSetDevice binds the primary context immediately (CUDA 12+).
inline void bind_context(int device) {
  thread_local uint64_t bound = 0;  // bit d: device d's context was bound on this thread
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  if (bound & bit) return;
  KP_CHECK_CUDA(cudaSetDevice(device));
  bound |= bit;
}

// Make `device` current for this scope (its context bound to the thread); restore the caller's
// device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : dev_(device) {
    KP_CHECK_CUDA(cudaGetDevice(&prev_));
    if (prev_ != dev_) KP_CHECK_CUDA(cudaSetDevice(dev_));
    else bind_context(dev_);  // a different device was just set: cudaSetDevice bound its context
  }
  ~DeviceGuard() {
    if (prev_ != dev_) (void)cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int dev_, prev_ = -1;
};

struct DeviceInfo {
  int sms = 0, major = 0, minor = 0;
  int smem_optin = 0;  // max dynamic smem per block after opting in (227 KiB on sm90)
  int mem_gbps = 0;    // peak DRAM bandwidth, GB/s (memory clock x bus width x 2); 0 if not reported
};

// Properties of `device`, read once per process.
inline const DeviceInfo& device_info(int device) {
  constexpr int kMax = 64;
  static DeviceInfo info[kMax];
  static std::atomic<bool> ready[kMax];
  static std::mutex mu;
  if (device < 0 || device >= kMax) throw_arg("device index out of range: " + std::to_string(device));
  if (!ready[device].load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(mu);
    if (!ready[device].load(std::memory_order_relaxed)) {
      DeviceInfo d;
      KP_CHECK_CUDA(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device));
      KP_CHECK_CUDA(cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, device));
      KP_CHECK_CUDA(cudaDeviceGetAttribute(&d.minor, cudaDevAttrComputeCapabilityMinor, device));
      KP_CHECK_CUDA(cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
      int mem_khz = 0, bus_bits = 0;
      if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device) == cudaSuccess &&
          cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess)
        d.mem_gbps = static_cast<int>(2.0 * mem_khz * 1e3 * bus_bits / 8 / 1e9);
      else
        (void)cudaGetLastError();  // not reported by this driver: not an error, the plans fall back
      info[device] = d;
      ready[device].store(true, std::memory_order_release);
    }
  }
  return info[device];
}

namespace detail {
using FuncKey = std::tuple<const void*, int, int, size_t, int>;  // func, device, threads, smem, cluster
inline std::mutex& cache_mu() { static std::mutex m; return m; }
inline std::map<FuncKey, int>& cache() { static std::map<FuncKey, int> c; return c; }

// Without an opt-in a launch may use 48 KB of smem, static and dynamic together: a kernel with
// 1.5 KB of static smem and exactly 48 KB of dynamic smem fails with cudaErrorInvalidValue (the
// 16-bit backward at hidden <= 256 did, from 0.2.0 to 0.2.9). kp kernels keep their static smem
// under 16 KB, so every launch of more than 32 KB of dynamic smem opts in.
constexpr size_t kOptInAbove = 32 * 1024;

// Opt the kernel into what the launch needs, once per (kernel, device): the largest dynamic smem
// the device allows (the attribute is one value per kernel, so it is set to the maximum rather than
// to each launch's size), and clusters above the portable 8 CTAs (sm90 allows 16 with
// cudaFuncAttributeNonPortableClusterSizeAllowed).
inline void prepare(const void* func, int device, size_t smem, int cluster) {
  const FuncKey key{func, device, -1, 0, 0};
  auto it = cache().find(key);
  const int done = it == cache().end() ? 0 : it->second;  // bit 1: smem opted in, bit 2: 16-CTA clusters
  int want = done;
  if (smem > kOptInAbove && !(done & 1)) {
    int optin = 0;
    cudaFuncAttributes fa;
    KP_CHECK_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    KP_CHECK_CUDA(cudaFuncGetAttributes(&fa, func));  // the limit counts static smem too
    KP_CHECK_CUDA(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       optin - static_cast<int>(fa.sharedSizeBytes)));
    want |= 1;
  }
  if (cluster > 8 && !(done & 2)) {
    KP_CHECK_CUDA(cudaFuncSetAttribute(func, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    want |= 2;
  }
  if (want != done) cache()[key] = want;
}
}  // namespace detail

// Resident blocks per SM of `func` at this block size (0 if it cannot launch). Device must be current.
inline int blocks_per_sm(const void* func, int device, int threads, size_t smem) {
  std::lock_guard<std::mutex> lock(detail::cache_mu());
  const detail::FuncKey key{func, device, threads, smem, 1};
  auto it = detail::cache().find(key);
  if (it != detail::cache().end()) return it->second;
  detail::prepare(func, device, smem, 1);
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, func, threads, smem) != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  detail::cache()[key] = n;
  return n;
}

// Clusters of `cluster` CTAs that can be resident at once on the device (0: cannot launch, e.g. a
// 16-CTA cluster whose CTAs don't fit one GPC). Device must be current.
inline int max_active_clusters(const void* func, int device, int threads, size_t smem, int cluster) {
  std::lock_guard<std::mutex> lock(detail::cache_mu());
  const detail::FuncKey key{func, device, threads, smem, cluster};
  auto it = detail::cache().find(key);
  if (it != detail::cache().end()) return it->second;
  int n = 0;
  if (device_info(device).major >= 9) {
    detail::prepare(func, device, smem, cluster);
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(cluster);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (cudaOccupancyMaxActiveClusters(&n, func, &cfg) != cudaSuccess) {
      (void)cudaGetLastError();
      n = 0;
    }
  }
  detail::cache()[key] = n;
  return n;
}

namespace detail {
// cudaLaunchKernelEx with the attributes a launch asks for: a cluster shape (more than one CTA),
// and a programmatic dependency on the previous kernel of the stream (pdl).
template <typename... KArgs, typename... Args>
inline void launch_ex(void (*kernel)(KArgs...), int device, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      dim3 cluster_dim, bool pdl, Args&&... args) {
  const int cluster = static_cast<int>(cluster_dim.x * cluster_dim.y * cluster_dim.z);
  if (smem > kOptInAbove || cluster > 8) {  // only these need a one-time attribute; skip the lock otherwise
    std::lock_guard<std::mutex> lock(cache_mu());
    prepare(reinterpret_cast<const void*>(kernel), device, smem, cluster);
  }
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[2];
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  if (cluster > 1) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attr[cfg.numAttrs].val.clusterDim.x = cluster_dim.x;
    attr[cfg.numAttrs].val.clusterDim.y = cluster_dim.y;
    attr[cfg.numAttrs].val.clusterDim.z = cluster_dim.z;
    ++cfg.numAttrs;
  }
  if (pdl) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[cfg.numAttrs].val.programmaticStreamSerializationAllowed = 1;
    ++cfg.numAttrs;
  }
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (e != cudaSuccess) throw_cuda(e, "cudaLaunchKernelEx", __FILE__, __LINE__);
  KP_CHECK_LAUNCH();
}
}  // namespace detail

// Launch `kernel` on `stream`, as clusters of `cluster` CTAs along x when cluster > 1, and check it.
template <typename... KArgs, typename... Args>
inline void launch(void (*kernel)(KArgs...), int device, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   int cluster, Args&&... args) {
  detail::launch_ex(kernel, device, grid, block, smem, stream, dim3(cluster), false, std::forward<Args>(args)...);
}

// Launch `kernel` as a programmatic dependent of the previous kernel on `stream` (sm90+; a plain
// launch elsewhere): its CTAs may start while that kernel's last CTAs still run, so the launch
// latency and ramp hide under its tail. The kernel must call kp::wait_prior_grid() before it
// reads anything the previous kernel wrote.
template <typename... KArgs, typename... Args>
inline void launch_dependent(void (*kernel)(KArgs...), int device, dim3 grid, dim3 block, size_t smem,
                             cudaStream_t stream, Args&&... args) {
  detail::launch_ex(kernel, device, grid, block, smem, stream, dim3(1), device_info(device).major >= 9,
                    std::forward<Args>(args)...);
}

// launch as clusters of shape `cluster` (any of x, y, z; sm90: the caller checks the arch).
template <typename... KArgs, typename... Args>
inline void launch_cluster_shape(void (*kernel)(KArgs...), int device, dim3 grid, dim3 block, size_t smem,
                                 cudaStream_t stream, dim3 cluster, Args&&... args) {
  detail::launch_ex(kernel, device, grid, block, smem, stream, cluster, false, std::forward<Args>(args)...);
}

// Launch `kernel` cooperatively: the driver starts it only with every CTA resident at once (or
// fails the launch), so its CTAs may wait on each other (a grid barrier). The grid must fit
// blocks_per_sm x SMs.
template <typename... KArgs, typename... Args>
inline void launch_cooperative(void (*kernel)(KArgs...), int device, dim3 grid, dim3 block, size_t smem,
                               cudaStream_t stream, Args&&... args) {
  if (smem > detail::kOptInAbove) {
    std::lock_guard<std::mutex> lock(detail::cache_mu());
    detail::prepare(reinterpret_cast<const void*>(kernel), device, smem, 1);
  }
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (e != cudaSuccess) throw_cuda(e, "cudaLaunchKernelEx (cooperative)", __FILE__, __LINE__);
  KP_CHECK_LAUNCH();
}

// In the kernel before one launched by launch_dependent: let the dependent's CTAs be scheduled
// as this grid's CTAs exit, instead of after the whole grid (griddepcontrol.launch_dependents).
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// In a kernel launched by launch_dependent: wait until the previous grid has finished and its
// writes are visible (griddepcontrol.wait; returns at once without a programmatic dependency).
__device__ __forceinline__ void wait_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

}  // namespace kp
