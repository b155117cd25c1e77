// The forward kernels as the plan (norm_fwd.cu) sees them: getters of their addresses, and the
// constants both sides read. Each family is defined in fwd_kernels.cuh and instantiated, from an explicit list,
// in its own translation unit (fwd_direct.cu, fwd_ring.cu, fwd_multipass.cu).
#pragma once
#include <algorithm>
#include "kp/vec.cuh"
#include "norm.cuh"

namespace kp_norm {

constexpr int kFwdPol = 1;  // the release cache policy of the direct kernel (fwd_kernels.cuh: kFwdXLd)
constexpr int kRingNV = 8;
enum WMode { kWL2 = 0, kWSmem = 1, kWReg = 2 };

// Two 512-thread CTAs an SM need <= 64 registers a thread: the 16-bit kernels without a residual
// fit that without spilling, so they are held to it; the others would spill and keep 1 CTA an SM.
// RMSNorm with fp32 weights of a 16-bit x fits too (ptxas, sm_90a, E = 32: 72 registers unbounded,
// 64 without a spill when held); LayerNorm's bias would spill (64 + 224 bytes).
template <typename T, typename W, bool RES, bool RMS>
constexpr int kDirectMinBlocks = sizeof(T) == 2 && (sizeof(W) == 2 || RMS) && !RES ? 2 : 1;

// CAP > 0 (the CTA-team twins, FT > 32): at most CAP registers a thread, so that 64K / (FT x CAP)
// CTAs fit an SM (see kTwinCap). FT = 1024 needs one (no default bound admits 1024 threads).
template <int FT, int CAP>
constexpr int kDirectBoundThreads = CAP && FT > 32 ? FT : kMaxThreads;
// Threads an SM hold at most: 1536 on sm_86/87/89, 2048 on sm_80 and sm_90. A min-blocks bound past
// it is ignored by ptxas, with a warning (the 1024-thread twin's 2 blocks, on sm_86/89).
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 870 || __CUDA_ARCH__ == 890)
constexpr int kMaxThreadsPerSm = 1536;
#else
constexpr int kMaxThreadsPerSm = 2048;
#endif
template <int FT, int CAP, typename T, typename W, bool RES, bool RMS>
constexpr int kDirectBoundBlocks = CAP && FT > 32 ? std::min(65536 / (FT * CAP), std::max(1, kMaxThreadsPerSm / FT))
                                                   : kDirectMinBlocks<T, W, RES, RMS>;

// A kernel's address, from the translation unit that instantiates it (nvcc gives kernels internal
// linkage without relocatable device code, so the plan cannot name them across translation units).
using FwdKernel = void (*)(const FwdParams);
template <typename T, typename W, bool RES, bool RMS, int WM, int FT = 0>
FwdKernel fwd_ring_ptr();
template <typename T, typename W, int E, bool VECTOR, bool RES, bool RMS, int FT = 0, int POL = kFwdPol, int CAP = 0>
FwdKernel fwd_direct_ptr();
template <typename T, bool VECTOR>
FwdKernel fwd_multipass_ptr();
template <typename T>
FwdKernel fwd_scalar_ptr();
// direct.wide.staged (fwd_kernels.cuh): 16-bit T, NR chunks of x a thread in registers.
constexpr int kWideThreads = 256, kWideCtaCols = 16384;  // 256 threads x 8 chunks x 8 values
template <typename T, int NR>
FwdKernel fwd_wide_staged_ptr();

}  // namespace kp_norm
