// kp-norm's dw/db column reduction: shared_cuda's kp::col_sum, with its programmatic-dependent
// launch under the plan override (colsum_pdl = 0 turns it off, for sweeps).
#include "kp/col_sum.cuh"
#include "norm.cuh"

namespace kp_norm {

void col_sum(const float* partial, int64_t num_partials, int64_t cols, void* out, int out_dtype, int device,
             cudaStream_t stream, const float* partial2, void* out2) {
  kp::col_sum(partial, num_partials, cols, out, out_dtype, device, stream, partial2, out2, knob(Knob::ColsumPdl, 1));
}

}  // namespace kp_norm
