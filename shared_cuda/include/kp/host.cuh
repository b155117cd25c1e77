// Host-side helpers every package's launchers share: integer arithmetic of grids and sizes, and
// the argument checks of a [rows, cols] tensor. Plain C++ (no CUDA needed to include it).
#pragma once
#include <cstdint>
#include <string>

#include "kp/error.cuh"

namespace kp {

inline int next_pow2(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}
inline int round_up(int64_t v, int m) { return static_cast<int>((v + m - 1) / m * m); }
inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A [rows, cols] tensor given as a pointer and a row stride (elements): not null, rows apart by
// at least a row (one row may have any stride).
inline void check_rows(const char* name, const void* ptr, int64_t stride, int64_t rows, int64_t cols) {
  KP_CHECK_ARG(ptr != nullptr, std::string(name) + " must not be null");
  KP_CHECK_ARG(rows <= 1 || stride >= cols,
               std::string(name) + "_stride (" + std::to_string(stride) + ") must be >= cols (" +
                   std::to_string(cols) + ")");
}

}  // namespace kp
