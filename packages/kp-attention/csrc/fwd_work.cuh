// Where a forward CTA works: its (sequence, query head, query block), the offsets of its rows in
// q, k, v, out and lse (64-bit), and the key blocks its rows may see, split into the blocks that
// need a mask and those that do not.
#pragma once
#include <cstdint>

#include "fwd.h"

namespace kp_attention::fwd {

struct Work {
  int64_t q, k, v, out, lse;  // element offsets of row 0 of the sequence, at this CTA's head
  int64_t diagonal;
  int seqlen_q, seqlen_k;
  int m0;  // the CTA's first query row
};

// One grid axis (x: up to 2^31 - 1 CTAs; y and z stop at 65535, which batch x heads passes), query
// blocks fastest so a head's blocks run together and share its k, v in L2; the last query block
// first, as under a causal mask it sees the most keys (the long CTAs start early, not in the tail).
// False when the block lies past its sequence's end (varlen: the grid covers the longest).
// `cta`: blockIdx.x, or cta_again() for the epilogue.
template <int kBlockM>
__device__ __forceinline__ bool locate(const FwdParams& p, Work& w, int64_t cta) {
  const int m_block = p.m_blocks - 1 - static_cast<int>(cta % p.m_blocks);
  const int64_t bh = cta / p.m_blocks;
  const int64_t b = bh / p.heads_q;
  const int h = static_cast<int>(bh % p.heads_q);
  const int hk = h / p.group;  // GQA: the kv head of this query head's group, read in place
  w.m0 = m_block * kBlockM;
  if (p.cu_q != nullptr) {  // varlen: the sequence's own rows, lengths and bottom-right diagonal
    const int q0 = p.cu_q[b], k0 = p.cu_k[b];
    w.seqlen_q = p.cu_q[b + 1] - q0;
    w.seqlen_k = p.cu_k[b + 1] - k0;
    w.diagonal = static_cast<int64_t>(w.seqlen_k) - w.seqlen_q;
    w.q = q0 * p.q_row;
    w.k = k0 * p.k_row;
    w.v = k0 * p.v_row;
    w.out = q0 * p.o_row;
    w.lse = h * p.lse_head + q0;
  } else {
    w.seqlen_q = p.seqlen_q;
    w.seqlen_k = p.seqlen_k;
    w.diagonal = p.diagonal;
    w.q = b * p.q_batch;
    w.k = b * p.k_batch;
    w.v = b * p.v_batch;
    w.out = b * p.o_batch;
    w.lse = b * p.lse_batch + h * p.lse_head;
  }
  w.q += h * p.q_head;
  w.k += hk * p.k_head;
  w.v += hk * p.v_head;
  w.out += h * p.o_head;
  return w.m0 < w.seqlen_q;
}

// blockIdx.x read again (asm volatile: the compiler cannot reuse the first read). The epilogue
// recomputes its offsets from it, so the out / lse offsets, worked out before the key loop, are not
// kept live across it: at 255 registers ptxas spilled them (sm_80, d128 with softcap and a window).
__device__ __forceinline__ int64_t cta_again() {
  unsigned x;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(x));
  return x;
}

// Key blocks [lo, hi) that rows first..last may see; of them [mid_lo, mid_hi) are seen whole by
// every row (no mask: all keys < seqlen_k and inside each row's causal / window span), the others
// need the mask. lo = hi when no row sees any key. Rows past seqlen_q are not counted: they are
// never stored, and their zero-filled q gives finite scores. Host-callable: tools/check_fwd_host.cu
// checks it against the visibility rule, key by key.
struct KeyBlocks {
  int lo, mid_lo, mid_hi, hi;
};

template <int kBlockN>
__host__ __device__ __forceinline__ KeyBlocks key_blocks(int64_t first, int64_t last, int seqlen_k,
                                                         int64_t diagonal, int left, int right) {
  int64_t lo = 0, hi = seqlen_k;
  int64_t full_lo = 0, full_hi = seqlen_k;  // the last row's first key; one past the first row's last key
  if (left >= 0) {
    lo = first + diagonal - left > 0 ? first + diagonal - left : 0;
    full_lo = last + diagonal - left;
  }
  if (right >= 0) {
    hi = last + diagonal + right + 1 < hi ? last + diagonal + right + 1 : hi;
    full_hi = first + diagonal + right + 1 < full_hi ? first + diagonal + right + 1 : full_hi;
  }
  if (hi <= lo) return {0, 0, 0, 0};
  const int b_lo = static_cast<int>(lo / kBlockN);
  const int b_hi = static_cast<int>((hi + kBlockN - 1) / kBlockN);
  const int64_t f_lo = full_lo > 0 ? (full_lo + kBlockN - 1) / kBlockN : 0;  // first whole block
  const int64_t f_hi = full_hi > 0 ? full_hi / kBlockN : 0;                  // one past the last
  const int mid_lo = static_cast<int>(f_lo < b_lo ? b_lo : f_lo > b_hi ? b_hi : f_lo);
  const int mid_hi = static_cast<int>(f_hi < mid_lo ? mid_lo : f_hi > b_hi ? b_hi : f_hi);
  return {b_lo, mid_lo, mid_hi, b_hi};
}

}  // namespace kp_attention::fwd
