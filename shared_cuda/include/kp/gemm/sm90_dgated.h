// kp's sm90a gated-gradient GEMM, the declarations (no CUTLASS): the backward of a gated MLP's
// down projection and gated activation in one GEMM, whose epilogue turns dh into dP and never
// writes dh.
//
//   dh[M, I] = dy[M, H] @ Wd[H, I]                  (Wd: the down projection's nn.Linear weight)
//   dP = [dh * up * act'(gate) | dh * act(gate)]    [M, 2I], from P = [gate | up] as the gated
//                                                   forward saved it (sm90_gated.h's `pre`)
//
// A = dy is K-major, B = Wd MN-major (its rows run along I, the GEMM's N): the mainloop reads it
// with wgmma's transposed B. dh stays in fp32 registers: dP is rounded once. The epilogue reads
// P and writes dP with 16-byte accesses (quad_io.cuh); those, and TMA's rows, need every size and
// row stride a multiple of 8 elements and 16-byte aligned bases.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <string>

#include "kp/error.cuh"
#include "kp/gemm/epilogues.h"
#include "kp/gemm/problem.h"
#include "kp/gemm/sm90_gated.h"

namespace kp::gemm {

struct DGatedProblem {
  const void* dy;  // [m, k], row stride lddy (elements), unit column stride
  int64_t lddy;
  const void* wd;  // [k, inter], row stride ldwd, unit column stride (nn.Linear(inter, k).weight)
  int64_t ldwd;
  const void* pre;  // [m, 2 * inter] = [gate_pre | up_pre], row stride ldp
  int64_t ldp;
  void* dpre;  // [m, 2 * inter], row stride lddp: the output
  int64_t lddp;
  int64_t m, inter, k;  // k: the hidden size (the down projection's outputs)
  int dtype;            // kp::DType of every operand (16-bit)
  int act;              // kp::gemm::Act: kSilu or kGeluTanh
};

// "" when the sizes suit the kernel, else what to pad, naming the size.
inline std::string dgated_size_problem(int64_t inter, int64_t k, int elem_bytes) {
  std::string why = tma_row_problem("hidden", k, elem_bytes);
  return why.empty() ? tma_row_problem("intermediate", inter, elem_bytes) : why;
}

inline void check_dgated(const DGatedProblem& p, int elem_bytes) {
  KP_CHECK_ARG(p.m >= 0 && p.inter >= 0 && p.k >= 0, "gated gradient gemm: negative size");
  const int64_t imax = std::numeric_limits<int32_t>::max();
  KP_CHECK_ARG(p.m <= imax && 2 * p.inter <= imax && p.k <= imax,
               "gated gradient gemm: M, 2 * I and H must each be below 2^31 (TMA coordinates are 32-bit)");
  const std::string why = dgated_size_problem(p.inter, p.k, elem_bytes);
  KP_CHECK_ARG(why.empty(), "gated gradient gemm: " + why);
  if (p.m == 0 || p.inter == 0) return;  // nothing to compute: no pointer is read
  KP_CHECK_ARG(p.k > 0, "gated gradient gemm: H = 0 (nothing to accumulate): dP is zero, the caller writes it");
  KP_CHECK_ARG(p.dy && p.wd && p.pre && p.dpre, "gated gradient gemm: dy, wd, pre and dpre must not be null");
  auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % kTmaAlignBytes == 0; };
  KP_CHECK_ARG(aligned(p.dy) && aligned(p.wd) && aligned(p.pre) && aligned(p.dpre),
               "gated gradient gemm: dy, wd, pre and dpre must be 16-byte aligned");
  const int64_t mult = kTmaAlignBytes / elem_bytes;
  KP_CHECK_ARG(p.lddy % mult == 0 && p.ldwd % mult == 0 && p.ldp % mult == 0 && p.lddp % mult == 0,
               "gated gradient gemm: the row strides of dy, wd, pre and dpre must be multiples of " +
                   std::to_string(mult) + " elements (16 bytes)");
  KP_CHECK_ARG(p.lddy >= p.k && p.ldwd >= p.inter && p.ldp >= 2 * p.inter && p.lddp >= 2 * p.inter,
               "gated gradient gemm: a row stride is shorter than its row");
  KP_CHECK_ARG(p.act == static_cast<int>(Act::kSilu) || p.act == static_cast<int>(Act::kGeluTanh),
               "gated gradient gemm: the activation must be silu or gelu_tanh, got code " + std::to_string(p.act));
}

template <int DType, class Config>
struct Sm90DGated {
  // Checks the problem (check_dgated), then launches on `stream` of `device` (M = 0 or I = 0: nothing).
  static void run(const DGatedProblem& p, int device, cudaStream_t stream, SchedulerKnobs knobs = {});
  static const void* kernel();  // the __global__ function
  static int smem_bytes();      // its dynamic shared memory
};

}  // namespace kp::gemm
