// How a GEMM's operands lie in memory: which dimension of A[M, K] and of B[N, K] is contiguous.
// wgmma reads either from shared memory (for 16-bit types the transposed, MN-major, smem layouts
// are native: .tnspA/.tnspB), and TMA loads a tile either way, so a transposed operand is read in
// place: no transposed copy. The backward of y = x W^T needs both kinds:
//   dX[M, K] = dP[M, N] @ W[N, K]     A = dP K-major (N contiguous), B = W MN-major (K contiguous)
//   dW[N, K] = dP^T @ X[M, K]         A = dP^T MN-major (N contiguous), B = X MN-major (K contiguous)
// Plain data (no CUTLASS): the host dispatch of a package sees it too.
#pragma once

namespace kp::gemm {

// K-major: the reduction dimension is contiguous (A as [M, K] rows, B as nn.Linear's [N, K] rows).
// MN-major: M (A) or N (B) is contiguous (A stored as A^T [K, M] rows, B as B^T [K, N] rows).
enum class Operands : int {
  kKK = 0,    // A K-major,  B K-major: the forward, y = x W^T
  kKMn = 1,   // A K-major,  B MN-major: dX = dP W
  kMnMn = 2,  // A MN-major, B MN-major: dW = dP^T X
  kMnK = 3,   // A MN-major, B K-major
};

constexpr bool a_mn_major(Operands o) { return o == Operands::kMnMn || o == Operands::kMnK; }
constexpr bool b_mn_major(Operands o) { return o == Operands::kKMn || o == Operands::kMnMn; }
inline const char* operands_name(Operands o) {
  switch (o) {
    case Operands::kKK: return "A K-major, B K-major";
    case Operands::kKMn: return "A K-major, B MN-major";
    case Operands::kMnMn: return "A MN-major, B MN-major";
    default: return "A MN-major, B K-major";
  }
}

}  // namespace kp::gemm
