// A GEMM problem as kp's kernels take it, and the host checks TMA needs, with messages that say
// what to pad. Plain C++ (no CUDA, no CUTLASS).
//
//   D[M, N] = epilogue(A[M, K] @ B[N, K]^T),  fp32 accumulation
//
// A: activations, row-major with row stride lda (elements). B: a weight as nn.Linear stores it,
// [N, K] row-major with row stride ldb (in GEMM terms a column-major K x N operand: both operands
// are K-major, the layout wgmma reads without a transpose). D: row-major, row stride ldd.
// With MN-major operands (operands.h) lda / ldb are the row strides of what is stored: A^T [K, M]
// and B^T [K, N] rows.
#pragma once
#include <cstdint>
#include <limits>
#include <string>

#include "kp/error.cuh"
#include "kp/gemm/operands.h"

namespace kp::gemm {

struct Problem {
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  void* d;
  int64_t ldd;
  int64_t m, n, k;
  int dtype;  // kp::DType of A, B and D (16-bit)
};

// TMA (cuTensorMapEncodeTiled) needs a 16-byte aligned global address and row strides that are
// multiples of 16 bytes: for 16-bit elements, K, N and every row stride a multiple of 8.
constexpr int kTmaAlignBytes = 16;

inline int64_t pad_to(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// "" when rows of v elements are what TMA needs, else the sentence that says what to pad, naming
// the size as `what` (e.g. "in_features K").
inline std::string tma_row_problem(const char* what, int64_t v, int elem_bytes) {
  const int64_t mult = kTmaAlignBytes / elem_bytes;
  if (v % mult == 0) return "";
  return std::string(what) + "=" + std::to_string(v) + " is not a multiple of " + std::to_string(mult) +
         ": TMA needs rows of a multiple of 16 bytes (" + std::to_string(mult) + " " + std::to_string(8 * elem_bytes) +
         "-bit elements); pad it to " + std::to_string(pad_to(v, mult));
}

// "" when the sizes are what TMA needs, else the sentence that says what to pad (the Python side
// raises it before any launch; C++ checks again).
inline std::string tma_size_problem(int64_t n, int64_t k, int elem_bytes) {
  std::string why = tma_row_problem("in_features K", k, elem_bytes);
  return why.empty() ? tma_row_problem("out_features N", n, elem_bytes) : why;
}

inline void check_problem(const Problem& p, int elem_bytes, Operands ops = Operands::kKK) {
  KP_CHECK_ARG(p.m >= 0 && p.n >= 0 && p.k >= 0, "gemm: negative size");
  const int64_t imax = std::numeric_limits<int32_t>::max();
  KP_CHECK_ARG(p.m <= imax && p.n <= imax && p.k <= imax,
               "gemm: M, N and K must each be below 2^31 (TMA coordinates are 32-bit)");
  const int64_t mult = kTmaAlignBytes / elem_bytes;
  // The contiguous extent of each operand: TMA moves whole 16-byte units of it.
  const int64_t a_row = a_mn_major(ops) ? p.m : p.k, b_row = b_mn_major(ops) ? p.n : p.k;
  if (ops == Operands::kKK) {
    const std::string why = tma_size_problem(p.n, p.k, elem_bytes);
    KP_CHECK_ARG(why.empty(), "gemm: " + why);
  } else {
    KP_CHECK_ARG(a_row % mult == 0 && b_row % mult == 0 && p.n % mult == 0,
                 std::string("gemm (") + operands_name(ops) + "): the contiguous extents of A (" +
                     std::to_string(a_row) + "), B (" + std::to_string(b_row) + ") and D (N=" + std::to_string(p.n) +
                     ") must be multiples of " + std::to_string(mult) + " elements (16 bytes, TMA)");
  }
  if (p.m == 0 || p.n == 0) return;  // nothing to compute: no pointer is read
  KP_CHECK_ARG(p.k > 0, "gemm: K = 0 (nothing to accumulate): the caller computes epilogue(0)");
  auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % kTmaAlignBytes == 0; };
  KP_CHECK_ARG(p.a && p.b && p.d, "gemm: A, B and D must not be null");
  KP_CHECK_ARG(aligned(p.a) && aligned(p.b) && aligned(p.d), "gemm: A, B and D must be 16-byte aligned (TMA)");
  KP_CHECK_ARG(p.lda % mult == 0 && p.ldb % mult == 0 && p.ldd % mult == 0,
               "gemm: row strides must be multiples of " + std::to_string(mult) + " elements (16 bytes, TMA)");
  KP_CHECK_ARG(p.lda >= a_row && p.ldb >= b_row && p.ldd >= p.n,
               "gemm: a row stride is shorter than its row (a single row passes its length)");
}

}  // namespace kp::gemm
