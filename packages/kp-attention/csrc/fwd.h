// The attention forward's host API (fwd.cu) and the parameters its kernels take (fwd_kernel.cuh).
// No CUTLASS here: bindings.cpp includes it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace kp_attention {

// One call as Python passes it: raw pointers, strides in elements (64-bit), a kp::DType code.
//   batched: q [batch, seqlen_q, heads_q, d], k and v [batch, seqlen_k, heads_kv, d]
//   varlen (cu_q, cu_k not 0): q [total_q, heads_q, d], k and v [total_k, heads_kv, d], sequence b
//            rows cu_q[b]:cu_q[b+1] of q against rows cu_k[b]:cu_k[b+1] of k, v (batch strides
//            unused; seqlen_q / seqlen_k: the longest sequences; total_q: q's rows)
// Unit last stride everywhere (the caller checked); out contiguous like q, lse fp32 contiguous
// [batch, heads_q, seqlen_q] (varlen [heads_q, total_q]).
struct FwdArgs {
  const void *q, *k, *v;
  void* out;
  float* lse;
  const int *cu_q, *cu_k;
  int64_t q_batch, q_row, q_head;
  int64_t k_batch, k_row, k_head;
  int64_t v_batch, v_row, v_head;
  int64_t batch, seqlen_q, seqlen_k, total_q;
  int64_t heads_q, heads_kv, head_dim;
  double scale;
  bool causal;
  int64_t left, right;  // window sides, -1: unbounded
  double softcap;       // > 0: s = softcap tanh(scale q.k / softcap)
  int64_t diagonal;     // batched: the key index of query row 0's diagonal (varlen: per sequence)
  int dtype;
};

// Checks every argument (std::invalid_argument: ValueError in Python), then launches on `stream`
// of `device` and checks the launch.
void attention_fwd(const FwdArgs& a, int device, cudaStream_t stream);

// "" when `device` can run the forward kernels (sm_80 or newer), else why not.
std::string fwd_device_problem(int device);

// One of the module's kernels, for kp::check_device (its machine code must fit the device).
const void* probe_kernel();

// What the kernel of one parameter set sees (fwd_kernel.cuh). Pointers are the tensors' starts;
// strides in elements; left / right already folded with causal (causal: right = 0).
struct FwdParams {
  const void *q, *k, *v;
  void* out;
  float* lse;
  const int *cu_q, *cu_k;  // nullptr: batched
  int64_t q_batch, q_row, q_head;
  int64_t k_batch, k_row, k_head;
  int64_t v_batch, v_row, v_head;
  int64_t o_batch, o_row, o_head;  // out [.., heads_q, d] contiguous (o_head = d)
  int64_t lse_batch, lse_head;  // batched: heads_q seqlen_q, seqlen_q; varlen: -, total_q
  int seqlen_q, seqlen_k;       // batched: the lengths; varlen: the longest (each sequence reads its own)
  int batch, heads_q, group;    // group = heads_q / heads_kv (GQA: query head h reads kv head h / group)
  int m_blocks;                 // query blocks a (sequence, head): ceil(seqlen_q / block_m), set by run_fwd
  int64_t diagonal;             // batched; varlen: len_k - len_q of each sequence
  int left, right;              // -1: that side unbounded
  float factor;                 // exp2 units per score unit: |scale| log2(e), or softcap log2(e)
  float tanh_scale;             // softcap: scale / softcap
  bool negate;                  // scale < 0 without softcap: the scores are negated first
  bool softcap;                 // the kernels with the tanh
};

// The kernels of one head dim and dtype (fwd_launch.cuh; instantiated in fwd_d<D>.cu).
template <int HeadDim, int DType>
void run_fwd(const FwdParams& p, int device, cudaStream_t stream);

template <int HeadDim, int DType>
const void* fwd_kernel_ptr();

}  // namespace kp_attention
