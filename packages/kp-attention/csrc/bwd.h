// The attention backward's host API (bwd.cu) and the parameters its kernels take (bwd_kernel.cuh).
// No CUTLASS here: bindings.cpp includes it.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace kp_attention {

// One call as Python passes it. q, k, v, cu_q, cu_k and the options as in FwdArgs (fwd.h); out
// (the forward's, contiguous like q) and dout (any strides, unit last) like q; lse the forward's.
// dq (like q), dk and dv (like k) contiguous, written whole. Scratch from the caller: delta fp32
// like lse; dq_accum fp32 like dq, or nullptr for deterministic=True (then the dq kernel writes
// dq without atomics).
struct BwdArgs {
  const void *q, *k, *v, *out, *dout;
  const float* lse;
  float* delta;
  float* dq_accum;
  float* dkv_accum;  // GQA with atomics: fp32 scratch of 2 dk's elements for the Hopper kernel's split, or nullptr
  void *dq, *dk, *dv;
  const int *cu_q, *cu_k;
  int64_t q_batch, q_row, q_head;
  int64_t k_batch, k_row, k_head;
  int64_t v_batch, v_row, v_head;
  int64_t do_batch, do_row, do_head;
  int64_t batch, seqlen_q, seqlen_k, total_q, total_k;
  int64_t heads_q, heads_kv, head_dim;
  double scale;
  bool causal;
  int64_t left, right;
  double softcap;
  int64_t diagonal;
  int dtype;
};

void attention_bwd(const BwdArgs& a, int device, cudaStream_t stream);

// "" when `device` can run the backward kernels of `head_dim` (sm_80 or newer, enough shared
// memory a CTA: bwd_tiles.h), else why not.
std::string bwd_device_problem(int device, int head_dim);

struct BwdParams {
  const void *q, *k, *v, *dout;
  const float* lse;
  const float* delta;
  float* dq_accum;  // nullptr: the deterministic dq kernel serves dq
  void *dq, *dk, *dv;
  const int *cu_q, *cu_k;
  int64_t q_batch, q_row, q_head;
  int64_t k_batch, k_row, k_head;
  int64_t v_batch, v_row, v_head;
  int64_t do_batch, do_row, do_head;
  int64_t o_batch, o_row;      // dq and dq_accum [.., heads_q, d] contiguous (head stride d)
  int64_t dk_batch, dk_row;    // dk, dv [.., heads_kv, d] contiguous (head stride d)
  int64_t lse_batch, lse_head;  // lse and delta: batched heads_q seqlen_q, seqlen_q; varlen 0, total_q
  int seqlen_q, seqlen_k;       // batched: the lengths; varlen: the longest
  int batch, heads_q, heads_kv, group;
  int n_blocks;                 // key blocks of the main kernel's grid (set by run_bwd)
  int m_blocks;                 // query blocks of the dq kernel's grid (set by run_bwd)
  int64_t diagonal;
  int left, right;
  float factor;      // as FwdParams: exp2 units per score unit
  float tanh_scale;  // softcap: scale / softcap
  float scale;       // d(score) / d(q.k) without softcap; with it, times (1 - t^2)
  bool negate, softcap;
};

template <int HeadDim, int DType>
void run_bwd(const BwdParams& p, int device, cudaStream_t stream);

}  // namespace kp_attention
