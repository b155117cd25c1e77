// A CPU check of the CUDA forward's pieces that need no GPU to be wrong, on the kernel's own code:
// 1. layouts, for each head dim's traits: the P-as-A register reuse (scores_as_a: the A operand of
//    P V at position i holds the score of the (row, key) the MMA expects there), rows_cols (a row
//    of the scores and of the output accumulator are one query row, shared by the 4 lanes of a
//    quad; output column pairs are neighbours), and V^T (SmemVt(d, n) is SmemKV(n, d));
// 2. the key loop's blocks (key_blocks) and mask (band, sees) against the contract's rule, key by
//    key, over random lengths, diagonals, windows and tiles: every visible key lies in a processed
//    block, every mask-free block is seen whole by every row and lies below seqlen_k, and the mask
//    is the rule.
//
//   nvcc -std=c++17 -arch=sm_80 --expt-relaxed-constexpr -I shared_cuda/include -isystem <cutlass include> \
//        -I packages/kp-attention/csrc packages/kp-attention/tools/check_fwd_host.cu -o /tmp/check && /tmp/check
// (tests/test_cuda_host_checks.py builds and runs it.)
#include <cstdint>
#include <cstdio>
#include <random>

#include "fwd_softmax.cuh"
#include "fwd_traits.cuh"
#include "fwd_work.cuh"

namespace {

using namespace cute;
using namespace kp_attention::fwd;

template <int D, int DType>
int check_layouts() {
  using Tr = Traits<D, DType>;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN;
  typename Tr::TiledMma mma;
  int bad = 0;
  for (int tid = 0; tid < Tr::kThreads; ++tid) {
    auto thr = mma.get_slice(tid);
    Tensor cS = thr.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));  // score registers
    Tensor cA = thr.partition_A(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));  // what P V's A wants
    Tensor pa = make_tensor(cS.data(), scores_as_a(cS.layout()));
    if (size(pa) != size(cA)) {
      printf("d%d: P as A has %d values, A %d: FAILED\n", D, int(size(pa)), int(size(cA)));
      return 1;
    }
    for (int i = 0; i < size(cA); ++i)
      if (get<0>(pa(i)) != get<0>(cA(i)) || get<1>(pa(i)) != get<1>(cA(i))) ++bad;
    Tensor cO = thr.partition_C(make_identity_tensor(Shape<Int<BM>, Int<D>>{}));
    Tensor s = make_tensor(cS.data(), rows_cols(cS.layout()));
    Tensor o = make_tensor(cO.data(), rows_cols(cO.layout()));
    auto lead = mma.get_slice(tid & ~3);  // the quad's first lane
    Tensor cL = lead.partition_C(make_identity_tensor(Shape<Int<BM>, Int<BN>>{}));
    Tensor sl = make_tensor(cL.data(), rows_cols(cL.layout()));
    for (int r = 0; r < size<0>(s); ++r) {
      const int row = get<0>(s(r, 0));
      bad += get<0>(sl(r, 0)) != row;
      for (int c = 0; c < size<1>(s); ++c) bad += get<0>(s(r, c)) != row;
      for (int c = 0; c < size<1>(o); ++c) bad += get<0>(o(r, c)) != row;
      for (int c = 0; c + 1 < size<1>(o); c += 2) bad += get<1>(o(r, c + 1)) != get<1>(o(r, c)) + 1;
    }
  }
  typename Tr::SmemVt vt;
  typename Tr::SmemKV kv;
  for (int d = 0; d < D; ++d)
    for (int n = 0; n < BN; ++n) bad += vt(d, n) != kv(n, d);
  printf("d%d: layouts %s (%d x %d tile, %d threads)\n", D, bad ? "FAILED" : "ok", BM, BN, Tr::kThreads);
  return bad != 0;
}

bool rule(int64_t i, int64_t j, int64_t seqlen_k, int64_t diagonal, bool causal, int left, int right) {
  bool ok = j >= 0 && j < seqlen_k;
  if (causal) ok = ok && j <= i + diagonal;
  if (left >= 0) ok = ok && j >= i + diagonal - left;
  if (right >= 0) ok = ok && j <= i + diagonal + right;
  return ok;
}

template <int BM, int BN>
int check_blocks(std::mt19937& rng, int trials) {
  int bad = 0;
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int t = 0; t < trials; ++t) {
    const int sq = pick(1, 300), sk = pick(0, 300);
    const int64_t diagonal = pick(0, 2) == 0 ? sk - sq : pick(0, 1) ? 0 : pick(-400, 400);
    const bool causal = pick(0, 1);
    const int left = pick(0, 1) ? -1 : pick(0, 100);
    const int right = causal ? 0 : pick(0, 1) ? -1 : pick(0, 100);  // the launcher folds causal into right = 0
    const Band b = band(diagonal, left, right);
    for (int m0 = 0; m0 < sq; m0 += BM) {
      const int last = (m0 + BM < sq ? m0 + BM : sq) - 1;
      const KeyBlocks kb = key_blocks<BN>(m0, last, sk, diagonal, left, right);
      bad += !(kb.lo <= kb.mid_lo && kb.mid_lo <= kb.mid_hi && kb.mid_hi <= kb.hi);
      for (int n = kb.mid_lo; n < kb.mid_hi; ++n) bad += (n + 1) * BN > sk;
      for (int i = m0; i <= last; ++i)
        for (int j = 0; j < sk + BN; ++j) {
          const bool want = rule(i, j, sk, diagonal, causal, left, right);
          const bool got = sees(i, j, sk, b);
          const int n = j / BN;
          bad += got != want;
          bad += want && (n < kb.lo || n >= kb.hi);        // a visible key in a skipped block
          bad += !want && n >= kb.mid_lo && n < kb.mid_hi;  // a hidden key in a mask-free block
        }
    }
  }
  printf("blocks %d x %d: %s (%d cases)\n", BM, BN, bad ? "FAILED" : "ok", trials);
  return bad != 0;
}

}  // namespace

int main() {
  int failed = check_layouts<64, kp::kBF16>() + check_layouts<96, kp::kF16>() + check_layouts<128, kp::kBF16>() +
               check_layouts<192, kp::kF16>() + check_layouts<256, kp::kBF16>();
  std::mt19937 rng(19);
  failed += check_blocks<128, 64>(rng, 3000) + check_blocks<128, 32>(rng, 3000) + check_blocks<64, 64>(rng, 3000);
  printf(failed ? "FAILED\n" : "all ok\n");
  return failed != 0;
}
