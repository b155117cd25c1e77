// A CPU check of the gated GEMM's epilogue (kp/gemm/sm90_gated.h, sm90_gated_epilogue.cuh), no GPU
// needed, for each row of gated_table.h with the kernel's own TiledMma:
// 1. the register pairing: value (e, half, 2b) of every consumer thread's accumulator fragment is
//    a gate column of Wi (column % 16 < 8) and value (e, half, 2b + 1) the up column 8 to its right
//    in the same row; the tile's h columns are covered exactly once.
// 2. the epilogue's own code (thread_coords and store, host-callable) over a whole problem with M,
//    N and row tails: every tile, every thread, accumulators taken from a matrix A = "x Wi^T",
//    bias on; h and P compared bit for bit with act(g + bg) * (u + bu) computed from W's order
//    (gate column c of Wi at 16 (c / 8) + c % 8: the interleave as its definition says), every
//    output element written (NaN-filled before).
// Also prints each kernel's smem (<= 227 KB) and stages.
//
//   nvcc -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -I shared_cuda/include -isystem <cutlass include> \
//        -I packages/kp-fused-mlp/csrc packages/kp-fused-mlp/tools/check_gated_epilogue.cu -o /tmp/check && /tmp/check
#include <cmath>
#include <cstdio>
#include <vector>

#include "gated_table.h"
#include "kp/gemm/sm90_gated.cuh"

namespace {

using namespace cute;
using BF16 = cutlass::bfloat16_t;

float host_silu(float x) { return x / (1.f + std::exp(-x)); }

template <class Kernel, class Config>
int check_pairing() {
  using TiledMma = typename Kernel::CollectiveMainloop::TiledMma;
  constexpr auto c = Config::value;
  std::vector<int> seen(c.tile_m * c.tile_n / 2, 0);
  int bad = 0;
  for (int t = 0; t < int(size(TiledMma{})); ++t) {
    Tensor tc = TiledMma{}.get_thread_slice(t).partition_C(make_identity_tensor(make_shape(c.tile_m, c.tile_n)));
    Tensor frag = partition_fragment_C(TiledMma{}, make_shape(Int<c.tile_m>{}, Int<c.tile_n>{}));
    static_assert(decltype(size<0, 0>(frag))::value == 2 && decltype(size<0, 1>(frag))::value == 2);
    for (int mn = 0; mn < size<2>(frag); ++mn)
      for (int mm = 0; mm < size<1>(frag); ++mm)
        for (int b = 0; b < size<0, 2>(frag) / 2; ++b)
          for (int half = 0; half < 2; ++half)
            for (int e = 0; e < 2; ++e) {
              auto g = tc(make_coord(make_coord(e, half, 2 * b), mm, mn));
              auto u = tc(make_coord(make_coord(e, half, 2 * b + 1), mm, mn));
              auto g0 = tc(make_coord(make_coord(0, half, 2 * b), mm, mn));
              const int row = get<0>(g), col = get<1>(g);
              bool ok = get<0>(u) == row && get<1>(u) == col + 8 && col % 16 < 8 && col == get<1>(g0) + e &&
                        get<1>(g0) % 2 == 0;
              if (ok) ++seen[row * (c.tile_n / 2) + (col / 16) * 8 + col % 8];
              if (!ok && bad++ < 5)
                std::printf("  thread %d value (%d,%d,%d) mm %d mn %d: gate (%d,%d) up (%d,%d)\n", t, e, half, 2 * b,
                            mm, mn, row, col, int(get<0>(u)), int(get<1>(u)));
            }
  }
  for (int v : seen) bad += v != 1;
  return bad;
}

// The epilogue over an m x 2I problem, tile by tile, thread by thread, on the host.
template <class Kernel, class Config>
int check_epilogue(int m, int inter) {
  using TiledMma = typename Kernel::CollectiveMainloop::TiledMma;
  using Epi = kp::gemm::Sm90GatedEpilogue<BF16>;
  constexpr auto c = Config::value;
  const int n = 2 * inter, ldh = inter + 8, ldp = 2 * inter + 8;  // padded rows: a stray write shows
  std::vector<float> acc_all(size_t(m) * n);
  for (size_t i = 0; i < acc_all.size(); ++i) acc_all[i] = std::sin(0.37f * float(i)) * 3.f;
  std::vector<BF16> bias(n), h(size_t(m) * ldh, BF16(NAN)), pre(size_t(m) * ldp, BF16(NAN));
  for (int i = 0; i < n; ++i) bias[i] = BF16(std::cos(0.11f * float(i)));
  Epi epi(kp::gemm::GatedEpilogueArgs{h.data(), ldh, pre.data(), ldp, bias.data(), inter, 4});
  auto shape = make_shape(m, n, 64, 1);
  auto tile = Shape<Int<c.tile_m>, Int<c.tile_n>, Int<c.tile_k>>{};
  for (int tm = 0; tm < (m + c.tile_m - 1) / c.tile_m; ++tm)
    for (int tn = 0; tn < (n + c.tile_n - 1) / c.tile_n; ++tn)
      for (int t = 0; t < int(size(TiledMma{})); ++t) {
        auto tc = Epi::thread_coords(shape, tile, make_coord(tm, tn, 0, 0), TiledMma{}, t);
        Tensor acc = partition_fragment_C(TiledMma{}, make_shape(Int<c.tile_m>{}, Int<c.tile_n>{}));
        for (int i = 0; i < size(acc); ++i) {
          const int r = get<0>(tc(i)), col = get<1>(tc(i));
          acc(i) = r < m && col < n ? acc_all[size_t(r) * n + col] : 1e30f;  // out of the problem: never stored
        }
        epi.store(acc, tc, m, n, host_silu);
      }
  int bad = 0;
  for (int r = 0; r < m; ++r)
    for (int col = 0; col < inter; ++col) {
      const int wi_gate = 16 * (col / 8) + col % 8;  // Wi's column holding gate column col
      const float g = acc_all[size_t(r) * n + wi_gate] + float(bias[col]);
      const float u = acc_all[size_t(r) * n + wi_gate + 8] + float(bias[inter + col]);
      const float want[3] = {float(BF16(host_silu(g) * u)), float(BF16(g)), float(BF16(u))};
      const float got[3] = {float(h[size_t(r) * ldh + col]), float(pre[size_t(r) * ldp + col]),
                            float(pre[size_t(r) * ldp + inter + col])};
      for (int k = 0; k < 3; ++k)
        if (!(got[k] == want[k]) && bad++ < 5)
          std::printf("  %s[%d, %d] = %g, want %g\n", k ? "pre" : "h", r, col + (k == 2 ? inter : 0), got[k], want[k]);
    }
  for (int r = 0; r < m; ++r)  // the padding stays NaN
    for (int col = inter; col < ldh; ++col) bad += !std::isnan(float(h[size_t(r) * ldh + col]));
  return bad;
}

template <int Row>
int check_row() {
  using Config = kp_fused_mlp::GatedRow<Row>;
  using Kernel = typename kp::gemm::detail::Sm90GatedTypes<kp::kBF16, Config>::Kernel;
  constexpr auto c = Config::value;
  const int pairing = check_pairing<Kernel, Config>();
  // M and 2I off the tile (the last tile row/column partial), and a one-row problem.
  const int epilogue = check_epilogue<Kernel, Config>(130, 136) + check_epilogue<Kernel, Config>(1, 264);
  std::printf("%-24s threads %3d  smem %6d B  stages %d  pairing %s  epilogue %s\n", c.name,
              int(size(typename Kernel::CollectiveMainloop::TiledMma{})), int(Kernel::SharedStorageSize),
              int(Kernel::CollectiveMainloop::DispatchPolicy::Stages), pairing ? "FAILED" : "ok",
              epilogue ? "FAILED" : "ok (h and P bit-exact, all written)");
  return pairing != 0 || epilogue != 0 || Kernel::SharedStorageSize > 232448;
}

}  // namespace

int main() {
  static_assert(kp_fused_mlp::GatedTable::size == 5);
  return check_row<0>() | check_row<1>() | check_row<2>() | check_row<3>() | check_row<4>();
}
