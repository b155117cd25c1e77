// The decode table's tma rows (decode_table.h, kind kTma): the sm90 weight stream through shared
// memory. decode_gemv.cu plans and checks a call, then hands it here.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "decode_gemv.cuh"

namespace kp_fused_mlp {

// CTAs of a tma row's kernel resident on one SM of `device` (its grid: that many x SMs).
int decode_tma_ctas_per_sm(int row, int dtype, bool gated, int device);
// Row blocks of a call (128 weight rows; gated: 64 output columns).
int64_t decode_tma_blocks(int64_t n_out, bool gated);
// Bytes of workspace a call needs: each CTA's partial sums of the two row blocks it may share with
// other CTAs (its first and its last), and an arrival counter a row block and token chunk.
int64_t decode_tma_workspace_bytes(int row, int64_t grid_x, int64_t grid_z, int64_t blocks);
// Launches plan `p` (a tma row's; a.ws of decode_tma_workspace_bytes) on `stream`. The arguments
// are checked by decode_gemv.
void decode_tma(const DecodeArgs& a, const DecodePlan& p, int device, cudaStream_t stream);

}  // namespace kp_fused_mlp
