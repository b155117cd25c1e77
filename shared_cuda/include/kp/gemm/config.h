// One row of a package's sm90 GEMM table: the compile-time shape of a kernel (tile, cluster,
// schedule) and the run-time knobs of its persistent tile scheduler. Plain data (no CUTLASS), so a
// package's table reads as a table and its host dispatch compiles without the CUTLASS headers.
//
// A package lists its rows in a struct with `static constexpr Sm90TileConfig rows[]` and names a
// row as a type, `TableRow<Table, i>` (C++17 has no class-type template parameters): each row it
// instantiates is a kernel per dtype and epilogue, on purpose (kp-fused-mlp: csrc/gemm_table.h).
#pragma once

namespace kp::gemm {

enum class Sm90Schedule : int {
  // Two consumer warpgroups share one tile (each 64 of its rows): tile_m >= 128. The epilogue
  // runs after the mainloop of each tile (TMA warp-specialized cooperative).
  kCooperative = 0,
  // Two consumer warpgroups on two tiles, alternating: one's epilogue overlaps the other's
  // mainloop (tile_m = 64 a warpgroup). Small tiles and small M.
  kPingpong = 1,
};

enum class Sm90Raster : int { kHeuristic = 0, kAlongM = 1, kAlongN = 2 };

struct Sm90TileConfig {
  const char* name;
  // CTA tile in elements. wgmma: tile_m a multiple of 64 a consumer warpgroup; tile_n a multiple
  // of 8 up to 256; tile_k = 64 16-bit elements is one 128-byte TMA swizzle row.
  int tile_m, tile_n, tile_k;
  // Thread-block cluster: the CTAs of a cluster share A (along n) or W (along m) tiles through TMA
  // multicast. cluster_m * cluster_n <= 2 keeps every SM of an H100/H200 GPC usable.
  int cluster_m, cluster_n;
  Sm90Schedule schedule;
  // Run time: the persistent scheduler walks tiles in swizzled groups (1, 2, 4 or 8 tiles) for L2
  // reuse, along M or N (heuristic: along the longer side).
  int max_swizzle;
  Sm90Raster raster;
  // Selection: the first row whose max_m is 0 or >= M and whose min_n <= N serves a call (the
  // package's pick()). min_n: a tile that pays only on wide outputs (its wave quantization at
  // small N costs more than it gains); 0 for any N.
  long long max_m;
  long long min_n = 0;
};

// The swizzle a launch of row `c` uses on a grid of tiles_m x tiles_n tiles: the largest up to the
// row's whose padding is at most 1/16 of the tiles. CUTLASS's persistent scheduler rounds the tile
// grid up to a multiple of swizzle x cluster in both dimensions and computes the padding tiles
// (clipped, but not free): H200, 2026-11-26, the gated GEMM at M = 1024 (8 tile rows, cluster 2,
// swizzle 8: padded to 16) ran 2x slower than with swizzle 1.
inline int fitted_swizzle(const Sm90TileConfig& c, long long tiles_m, long long tiles_n) {
  auto up = [](long long v, long long to) { return (v + to - 1) / to * to; };
  const long long tiles = tiles_m * tiles_n;
  for (int s = c.max_swizzle; s > 1; s /= 2)
    if ((up(tiles_m, s * c.cluster_m) * up(tiles_n, s * c.cluster_n) - tiles) * 16 <= tiles) return s;
  return 1;
}

// Row `Row` of `Table::rows` as a type: what the kernel templates take.
template <class Table, int Row>
struct TableRow {
  static constexpr int index = Row;
  static constexpr Sm90TileConfig value = Table::rows[Row];
};

// The row of `Table` a call of M rows and N output columns gets: the first whose max_m is 0 or
// >= M and whose min_n <= N (n = 0: only rows for any N).
template <class Table>
constexpr int pick_row(long long m, long long n = 0) {
  for (int i = 0; i < Table::size; ++i)
    if ((Table::rows[i].max_m == 0 || m <= Table::rows[i].max_m) && n >= Table::rows[i].min_n) return i;
  return Table::size - 1;
}

}  // namespace kp::gemm
