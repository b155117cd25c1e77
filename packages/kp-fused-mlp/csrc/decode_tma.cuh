// The decode table's tma rows (decode_table.h, kind kTma): the sm90 weight stream through shared
// memory. decode_gemv.cu plans and checks a call, then hands it here.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "decode_gemv.cuh"

namespace kp_fused_mlp {

// 16-row weight tiles a CTA holds in one pass (4 mma warps x 2): with K split over a cluster, a
// cluster's whole run of tiles (decode_gemv.cu's tma_layout).
constexpr int kDecodeTmaPassTiles = 8;

// CTAs of a tma row's kernel resident on one SM of `device` (its grid: that many x SMs).
int decode_tma_ctas_per_sm(int row, int dtype, bool gated, int device);
// 16-row weight tiles of a call (gated: 8 gate and 8 up rows each): the unit CTAs share.
int64_t decode_tma_tiles(int64_t n_out, bool gated);
// Clusters of `splits` CTAs of a tma row's kernel that can be resident at once on `device`.
int decode_tma_max_clusters(int row, int dtype, bool gated, int splits, int device);
// Launches plan `p` (a tma row's) on `stream`; it needs no workspace. The arguments are checked by
// decode_gemv.
void decode_tma(const DecodeArgs& a, const DecodePlan& p, int device, cudaStream_t stream);

}  // namespace kp_fused_mlp
