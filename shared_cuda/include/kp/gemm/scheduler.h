// A run-time override of the persistent tile scheduler of every sm90 GEMM of a module, for sweeps:
// the swizzle group (1, 2, 4 or 8 tiles walked together for L2 reuse) and the raster order are
// arguments of the scheduler, not of the kernel, so a sweep changes them without new kernels.
// 0 / -1 mean "the table row's own". Process-wide (one module), meant for benchmarks: tuned values
// go into the package's table, not here.
#pragma once
#include <atomic>
#include <string>

#include "kp/error.cuh"
#include "kp/gemm/config.h"

namespace kp::gemm {
namespace detail {
inline std::atomic<int>& swizzle_override() {
  static std::atomic<int> v{0};
  return v;
}
inline std::atomic<int>& raster_override() {
  static std::atomic<int> v{-1};
  return v;
}
}  // namespace detail

// max_swizzle: 0 (the row's), 1, 2, 4 or 8; raster: -1 (the row's) or an Sm90Raster code.
inline void set_scheduler_override(int max_swizzle, int raster) {
  KP_CHECK_ARG(max_swizzle == 0 || max_swizzle == 1 || max_swizzle == 2 || max_swizzle == 4 || max_swizzle == 8,
               "gemm scheduler: max_swizzle must be 0 (the table row's), 1, 2, 4 or 8, got " +
                   std::to_string(max_swizzle));
  KP_CHECK_ARG(raster >= -1 && raster <= static_cast<int>(Sm90Raster::kAlongN),
               "gemm scheduler: raster must be -1 (the table row's), 0 (heuristic), 1 (along M) or 2 (along N), got " +
                   std::to_string(raster));
  detail::swizzle_override().store(max_swizzle, std::memory_order_relaxed);
  detail::raster_override().store(raster, std::memory_order_relaxed);
}

// (max_swizzle, raster) as set: (0, -1) when nothing is overridden.
inline int scheduler_swizzle_override() { return detail::swizzle_override().load(std::memory_order_relaxed); }
inline int scheduler_raster_override() { return detail::raster_override().load(std::memory_order_relaxed); }

// Row `c` as a launch uses it: its swizzle and raster replaced by the override where one is set.
inline Sm90TileConfig with_scheduler_override(Sm90TileConfig c) {
  const int s = scheduler_swizzle_override(), r = scheduler_raster_override();
  if (s) c.max_swizzle = s;
  if (r >= 0) c.raster = static_cast<Sm90Raster>(r);
  return c;
}

}  // namespace kp::gemm
