// kp's sm90a gated GEMM, the declarations (no CUTLASS): the gated half of a Llama-style MLP in one
// GEMM whose epilogue writes h = act(gate) * up, never the [M, 2I] projections.
//
//   h[M, I] = act(x Wg^T + bg) * (x Wu^T + bu),   W = [Wg; Wu] [2I, K] (nn.Linear's layout)
//
// The GEMM runs x [M, K] @ Wi^T with N = 2I, where Wi is W with its rows interleaved in blocks of
// kGatedBlock: Wi rows 16b..16b+7 are Wg rows 8b..8b+7, Wi rows 16b+8..16b+15 are Wu rows
// 8b..8b+7. Why 8: a 64 x N wgmma gives each thread two adjacent columns of every 8-column group
// of the accumulator (columns 8j + 2(lane % 4) + {0, 1}, the same in every group j: CuTe's
// CLayout_64xN, value mode (2, 2, N/8) with column strides 1 and 8). With 8-row blocks, gate
// column c sits in group 2(c / 8) and up column c in group 2(c / 8) + 1, at the same offset in the
// same thread's registers: the epilogue pairs them without any data exchange. The caller builds
// Wi (kp_fused_mlp: a cached private copy of the weight). The biases stay in W's order.
//
// When `pre` is given, the epilogue also writes P = [gate_pre | up_pre] [M, 2I] (the
// pre-activations a backward needs), in W's order, not Wi's.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <string>

#include "kp/error.cuh"
#include "kp/gemm/config.h"
#include "kp/gemm/epilogues.h"
#include "kp/gemm/problem.h"

namespace kp::gemm {

constexpr int kGatedBlock = 8;  // rows of Wg, then of Wu, in each 16-row block of Wi

struct GatedProblem {
  const void* x;  // [m, k], row stride ldx (elements), unit column stride
  int64_t ldx;
  const void* w;  // Wi [2 * inter, k] interleaved (above), row stride ldw
  int64_t ldw;
  const void* bias;  // [2 * inter] = [bg; bu] (W's order), contiguous, or null
  void* h;           // [m, inter], row stride ldh
  int64_t ldh;
  void* pre;  // [m, 2 * inter] = [gate_pre | up_pre], row stride ldp, or null (not saved)
  int64_t ldp;
  int64_t m, inter, k;
  int dtype;  // kp::DType of x, w, bias, h, pre (16-bit)
  int act;    // kp::gemm::Act: kSilu or kGeluTanh
};

// "" when TMA can take the sizes (rows of 16 bytes), else what to pad, naming the size.
inline std::string gated_size_problem(int64_t inter, int64_t k, int elem_bytes) {
  std::string why = tma_row_problem("hidden K", k, elem_bytes);
  // I: also what the interleave needs (whole 8-row blocks of Wg and Wu).
  return why.empty() ? tma_row_problem("intermediate I", inter, elem_bytes) : why;
}

inline void check_gated(const GatedProblem& p, int elem_bytes) {
  KP_CHECK_ARG(p.m >= 0 && p.inter >= 0 && p.k >= 0, "gated gemm: negative size");
  const int64_t imax = std::numeric_limits<int32_t>::max();
  KP_CHECK_ARG(p.m <= imax && 2 * p.inter <= imax && p.k <= imax,
               "gated gemm: M, 2 * I and K must each be below 2^31 (TMA coordinates are 32-bit)");
  const std::string why = gated_size_problem(p.inter, p.k, elem_bytes);
  KP_CHECK_ARG(why.empty(), "gated gemm: " + why);
  if (p.m == 0 || p.inter == 0) return;  // nothing to compute: no pointer is read
  KP_CHECK_ARG(p.k > 0, "gated gemm: K = 0 (nothing to accumulate): the caller computes act(bg) * bu itself");
  const int64_t mult = kTmaAlignBytes / elem_bytes;
  auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % kTmaAlignBytes == 0; };
  KP_CHECK_ARG(p.x && p.w && p.h, "gated gemm: x, w and h must not be null");
  // x and w: TMA. h, pre, bias: the epilogue's 2-element (4-byte) stores and loads; 16 asked of all.
  KP_CHECK_ARG(aligned(p.x) && aligned(p.w) && aligned(p.h) && (!p.pre || aligned(p.pre)) &&
                   (!p.bias || aligned(p.bias)),
               "gated gemm: x, w, h, pre and bias must be 16-byte aligned");
  KP_CHECK_ARG(p.ldx % mult == 0 && p.ldw % mult == 0,
               "gated gemm: the row strides of x and w must be multiples of " + std::to_string(mult) +
                   " elements (16 bytes, TMA)");
  KP_CHECK_ARG(p.ldh % 2 == 0 && (!p.pre || p.ldp % 2 == 0), "gated gemm: the row strides of h and pre must be even");
  KP_CHECK_ARG(p.ldx >= p.k && p.ldw >= p.k && p.ldh >= p.inter && (!p.pre || p.ldp >= 2 * p.inter),
               "gated gemm: a row stride is shorter than its row (a single row passes its length)");
  KP_CHECK_ARG(p.act == static_cast<int>(Act::kSilu) || p.act == static_cast<int>(Act::kGeluTanh),
               "gated gemm: the activation must be silu or gelu_tanh, got code " + std::to_string(p.act));
}

// The run-time knobs of the persistent scheduler, for sweeps: 0 / -1 keep the table row's.
struct SchedulerKnobs {
  int max_swizzle = 0;  // 1, 2, 4 or 8 tiles a swizzle group
  int raster = -1;      // Sm90Raster
};

template <int DType, class Config>
struct Sm90Gated {
  // Checks the problem (check_gated), then launches on `stream` of `device` (M = 0 or I = 0: nothing).
  static void run(const GatedProblem& p, int device, cudaStream_t stream, SchedulerKnobs knobs = {});
  static const void* kernel();  // the __global__ function
  static int smem_bytes();      // its dynamic shared memory
};

}  // namespace kp::gemm
