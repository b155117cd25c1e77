// A CPU check of the gated GEMM's register pairing (kp/gemm/sm90_gated.h), without a GPU: for each
// row of gated_table.h, every consumer thread's accumulator fragment as the kernel's TiledMma
// partitions it, checked against what the epilogue assumes: value (e, half, 2b) is a gate column of
// Wi (column % 16 < 8), value (e, half, 2b + 1) is the up column 8 to its right in the same row, and
// the h tile is covered exactly once. Also prints each kernel's smem (<= 227 KB) and stages.
//
//   nvcc -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -I shared_cuda/include -I <cutlass include> \
//        -I packages/kp-fused-mlp/csrc packages/kp-fused-mlp/tools/check_gated_layout.cu -o /tmp/check && /tmp/check
#include <cstdio>
#include <vector>

#include "gated_table.h"
#include "kp/gemm/sm90_gated.cuh"

template <int Row>
int check_row() {
  using namespace cute;
  using Ty = kp::gemm::detail::Sm90GatedTypes<kp::kBF16, kp_fused_mlp::GatedRow<Row>>;
  using Kernel = typename Ty::Kernel;
  using TiledMma = typename Kernel::CollectiveMainloop::TiledMma;
  constexpr auto c = Ty::c;
  constexpr int threads = size(TiledMma{});
  std::vector<int> seen(c.tile_m * c.tile_n / 2, 0);
  int bad = 0;
  for (int t = 0; t < threads; ++t) {
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
  std::printf("%-24s threads %3d  fragment %3d floats  smem %6d B  stages %d  %s\n", c.name, threads,
              int(size(partition_fragment_C(TiledMma{}, make_shape(Int<c.tile_m>{}, Int<c.tile_n>{})))),
              int(Kernel::SharedStorageSize), int(Kernel::CollectiveMainloop::DispatchPolicy::Stages),
              bad ? "FAILED" : "pairing ok, h tile covered once");
  return bad != 0 || Kernel::SharedStorageSize > 232448;
}

int main() {
  static_assert(kp_fused_mlp::GatedTable::size == 3);
  return check_row<0>() | check_row<1>() | check_row<2>();
}
