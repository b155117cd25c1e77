// The forward's per-thread math on MMA accumulator fragments: fragment views by rows, the masks,
// the online softmax in exp2 units (fp32), and the 16-bit packing of P and of the output.
//
// An m16n8k16 accumulator holds, per thread, 2 adjacent columns in 2 rows 8 apart; a fragment of
// several MMA tiles is ((2 cols, 2 rows), tiles along M, tiles along N). The 4 threads of a quad
// (lanes 4g .. 4g + 3) share their rows, so a row's max and sum are a quad shuffle away.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include <cstdint>

namespace kp_attention::fwd {

// ((2, 2), M, N) -> ((2 rows, M), (2 cols, N)): the accumulator indexed by (row, column).
template <class L>
__device__ __forceinline__ constexpr auto rows_cols(L const& l) {
  using cute::get;
  return cute::make_layout(cute::make_layout(get<0, 1>(l), get<1>(l)), cute::make_layout(get<0, 0>(l), get<2>(l)));
}

// ((2, 2), M, N) scores -> ((2, 2, 2), M, N / 2): the A operand of P V. An A fragment of k16 is
// the values of two neighbouring n8 score tiles, in the order (cols, rows, which tile), so the
// same registers serve as they are: no data moves.
template <class L>
__device__ __forceinline__ constexpr auto scores_as_a(L const& l) {
  using cute::get;
  static_assert(decltype(cute::size<2>(l))::value % 2 == 0, "two 8-key score tiles a k16 step");
  auto split = cute::logical_divide(l, cute::Shape<cute::Underscore, cute::Underscore, cute::_2>{});
  return cute::make_layout(cute::make_layout(get<0>(split), get<2, 0>(split)), get<1>(split), get<2, 1>(split));
}

__device__ __forceinline__ float exp2_fast(float x) {  // ex2.approx: 2^-22 relative error, -inf -> 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// tanh with an absolute error of a few ulp of 1 (the softcapped score's error is what the softmax
// sees): e = 2^(-2|x| log2 e) in (0, 1] never overflows; tanh.approx (2^-11) would be too coarse.
__device__ __forceinline__ float tanh_accurate(float x) {
  const float e = exp2_fast(fabsf(x) * -2.8853900817779268f);  // -2 log2(e)
  return copysignf(__fdividef(1.0f - e, 1.0f + e), x);
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Two fp32 values as one register of two 16-bit ones (one cvt.rn.*x2 instruction), the first low.
template <class T> __device__ __forceinline__ uint32_t pack2(float a, float b);
template <> __device__ __forceinline__ uint32_t pack2<cutlass::half_t>(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}
template <> __device__ __forceinline__ uint32_t pack2<cutlass::bfloat16_t>(float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// An fp32 fragment rounded to T once, in a register fragment of the same layout.
template <class T, class Frag>
__device__ __forceinline__ auto to_16bit(Frag const& f) {
  auto out = cute::make_tensor<T>(f.layout());
  uint32_t* o = reinterpret_cast<uint32_t*>(cute::raw_pointer_cast(out.data()));
  CUTE_UNROLL
  for (int i = 0; i < cute::size(f) / 2; ++i) o[i] = pack2<T>(f(2 * i), f(2 * i + 1));
  return out;
}

// Which keys a query row sees, as a band of key - row differences [lo, hi]: causal / window
// (d = diagonal) j - i in [d - left, d + right], a side of -1 unbounded. Clamped to int: every
// key - row of a sequence (lengths < 2^31) lies strictly inside, so the comparisons keep their
// answers, and a difference is one 32-bit subtraction (no per-row 64-bit spans in registers).
struct Band {
  int lo, hi;
};
__host__ __device__ __forceinline__ Band band(int64_t diagonal, int left, int right) {
  constexpr int64_t kMax = 0x7fffffff;
  const int64_t lo = left >= 0 ? diagonal - left : -kMax;
  const int64_t hi = right >= 0 ? diagonal + right : kMax;
  return {static_cast<int>(lo < -kMax ? -kMax : lo > kMax ? kMax : lo),
          static_cast<int>(hi < -kMax ? -kMax : hi > kMax ? kMax : hi)};
}

// Whether query row `row` sees key `col`: below seqlen_k and inside the band (a call without causal
// or window has the widest band, which every key - row passes). Host-callable:
// tools/check_fwd_host.cu checks it against the contract's rule.
__host__ __device__ __forceinline__ bool sees(int row, int col, int seqlen_k, Band b) {
  return col < seqlen_k && col - row >= b.lo && col - row <= b.hi;
}

// Scores of keys a row may not see become -inf. `coords` is the identity tensor partitioned like
// the scores (row, col in the tile).
template <class S, class C>
__device__ __forceinline__ void mask_scores(S& s, C const& coords, int m0, int n0, int seqlen_k, Band b) {
  CUTE_UNROLL
  for (int r = 0; r < cute::size<0>(s); ++r) {
    const int row = m0 + cute::get<0>(coords(r, 0));
    CUTE_UNROLL
    for (int c = 0; c < cute::size<1>(s); ++c)
      if (!sees(row, n0 + cute::get<1>(coords(r, c)), seqlen_k, b)) s(r, c) = -INFINITY;
  }
}

// One key block of the online softmax, rows of `s` (the scores, in score units) and `o` (the
// output accumulator): the running max m (exp2 units) and this thread's share of the row sum l.
// On return s holds p = 2^(s factor - m), unnormalized. kMask: the block may hold -inf scores,
// so a row that has seen nothing yet keeps a finite shift (no -inf - -inf = NaN).
template <bool kMask, class S, class O, class Stat>
__device__ __forceinline__ void softmax_block(S& s, O& o, Stat& m, Stat& l, float factor) {
  CUTE_UNROLL
  for (int r = 0; r < cute::size<0>(s); ++r) {
    float mx = -INFINITY;
    CUTE_UNROLL
    for (int c = 0; c < cute::size<1>(s); ++c) mx = fmaxf(mx, s(r, c));
    const float m_new = fmaxf(m(r), quad_max(mx) * factor);  // factor > 0: the max commutes
    const float shift = kMask && m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = exp2_fast(m(r) - shift);  // first block: m = -inf, alpha = 0
    m(r) = m_new;
    float sum = 0.0f;
    CUTE_UNROLL
    for (int c = 0; c < cute::size<1>(s); ++c) {
      s(r, c) = exp2_fast(fmaf(s(r, c), factor, -shift));  // one FFMA: the scale waits for the exponent
      sum += s(r, c);
    }
    l(r) = l(r) * alpha + sum;
    CUTE_UNROLL
    for (int c = 0; c < cute::size<1>(o); ++c) o(r, c) *= alpha;
  }
}

}  // namespace kp_attention::fwd
