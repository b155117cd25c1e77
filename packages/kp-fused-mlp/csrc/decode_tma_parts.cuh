// The pieces of the decode weight stream through shared memory (decode_tma.cu's header comment
// says how it works) that its kernels share: decode_tma.cu's linear and gated rows, and
// decode_mlp.cu's fused GatedMLP decode kernel. Constants of a tile and a stage, the kernel
// parameters of one stream, the consumers' MMAs of a stage, the producer's tile loads, the
// epilogue of an accumulator, and (host) the tensor maps and the parameters of a call.
#pragma once
#include <cuda.h>

#include <algorithm>
#include <cstdint>

#include "decode_epilogue.cuh"
#include "decode_gemv.cuh"
#include "decode_ptx.cuh"
#include "decode_tma.cuh"

namespace kp_fused_mlp {
namespace tma_parts {

using namespace decode_ptx;


constexpr int kConsumers = 4;                      // mma warps, 2 tiles each
constexpr int kConsumerThreads = 32 * kConsumers;  // the named barrier's count
constexpr int kThreads = kConsumerThreads + 32;    // + the producer warp
constexpr int kTileRows = 16;                      // weight rows a tile: one m16n8k16's M side
constexpr int kPassTiles = kDecodeTmaPassTiles;    // tiles a pass: 2 a warp
static_assert(kPassTiles == 2 * kConsumers, "a pass is two tiles a consumer warp");
constexpr int kBox = 64;                           // columns a box: 128 bytes, the swizzle's span
constexpr int kTileBytes = kTileRows * kBox * 2;   // 2 KB
// Tiles a box of 4-D map s (4, 2, 1): a pass of nt tiles is at most one box of each.
__host__ __device__ constexpr int map_tiles(int s) { return 4 >> s; }

struct TmaParams {
  CUtensorMap w_tiles[3];  // the 4-D view (64 columns, 8 rows, 2 halves, full tiles): boxes of map_tiles(s)
  CUtensorMap w_rows;      // [rows, k]: boxes of 8 rows x 64 columns (a partial last tile)
  CUtensorMap x_map;       // [m, k]: boxes of 8 MT tokens x 64 columns
  const void* bias;
  void* y;
  int64_t m, n_out, k;      // n_out: output columns (gated: I)
  int64_t ksteps, tiles, full_tiles;
  int tile_step, half_step;  // weight rows from tile t to t + 1, from a tile's first half to its second
  int act;
  int splits;  // K splits: the CTAs of a cluster (1: rows only); > 1 only with one pass a CTA
};

__host__ __device__ constexpr int x_box_bytes(int mt) { return 8 * mt * kBox * 2; }
__host__ __device__ constexpr int box_bytes(int mt) { return kPassTiles * kTileBytes + x_box_bytes(mt); }
__host__ __device__ constexpr int stage_bytes(int mt, int sk) { return sk / kBox * box_bytes(mt); }
// Dynamic smem: the stages, full and empty mbarriers, and 1 KB to align the ring (the swizzle's
// pattern repeats every 1024 bytes: a box must start on one).
constexpr size_t smem_of(int mt, int sk, int st) { return static_cast<size_t>(st) * stage_bytes(mt, sk) + 16 * st + 1024; }

// The kernel's helpers: sm90 only (the kernel's body is empty below it).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// The 16-byte chunk c of row `row` of a 128-byte-swizzled box: stored at chunk c ^ (row % 8).
__device__ __forceinline__ uint4 ld_swizzled(const unsigned char* box, int row, int c) {
  return *reinterpret_cast<const uint4*>(box + row * 128 + ((c ^ (row & 7)) << 4));
}

__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerThreads) : "memory"); }

// The MMAs of one stage for warp `warp` (thread g = lane / 4, t = lane % 4): tiles warp and warp +
// 4 of each 64-column box q (acc[0], acc[1]) against its x box, into acc[tile][token tile].
template <typename T, int MT, int SK>
__device__ __forceinline__ void consume_stage(const unsigned char* st, int warp, int g, int t, float (&acc)[2][MT][4]) {
#pragma unroll
  for (int q = 0; q < SK / kBox; ++q) {
    const unsigned char* qs = st + q * box_bytes(MT);
    // Thread t takes chunks 2t + j of each row (k values 16t + 8j ..; the MMA's k order is free as
    // long as x's match): rows g and g + 1 of a quarter-warp's LDS.128 then hit disjoint banks
    // under the swizzle (chunks {0, 2, 4, 6} ^ g against ^ (g + 1)).
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int c = 2 * t + j;
      uint4 w[2][2], xb[MT];
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) w[r][h] = ld_swizzled(qs, kTileRows * (warp + kConsumers * r) + 8 * h + g, c);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) xb[mt] = ld_swizzled(qs + kPassTiles * kTileBytes, 8 * mt + g, c);
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma_step<T>(acc[r][mt], w[r][0], w[r][1], xb[mt]);
    }
  }
}

// The producer's copies of tiles [t0, t0 + nt) x columns k0 .. k0 + 63 into `dst` (2 KB a tile):
// whole tiles through the 4-D maps, a partial last one as two 8-row boxes.
__device__ __forceinline__ void load_tiles(unsigned char* dst, const TmaParams& p, int64_t t0, int nt, int k0,
                                           uint64_t* bar, uint64_t pol) {
  const int whole = static_cast<int>(std::min<int64_t>(nt, std::max<int64_t>(0, p.full_tiles - t0)));
  int i = 0;
#pragma unroll
  for (int s = 0; s < 3; ++s)
    for (; whole - i >= map_tiles(s); i += map_tiles(s))
      tma_load_4d(dst + i * kTileBytes, &p.w_tiles[s], k0, 0, 0, static_cast<int>(t0 + i), bar, pol);
  if (whole < nt) {  // the partial last tile
    const int row = static_cast<int>((t0 + whole) * p.tile_step);
    tma_load_2d(dst + whole * kTileBytes, &p.w_rows, k0, row, bar, pol);
    tma_load_2d(dst + whole * kTileBytes + kTileBytes / 2, &p.w_rows, k0, row + p.half_step, bar, pol);
  }
}

// A position in the ring: the stage, and the parity its barriers are in this round of the ring.
struct RingCursor {
  int stage = 0;
  uint32_t phase = 0;
  template <int ST>
  __device__ __forceinline__ void advance() {
    if (++stage == ST) stage = 0, phase ^= 1;
  }
};

// x's boxes of k-step s (columns s SK ..), token rows x_row0 .., into stage `stage`.
template <int MT, int SK>
__device__ __forceinline__ void load_x_boxes(const SmemRing& ring, int stage, const TmaParams& p, int64_t s, int x_row0,
                                             uint64_t pol) {
#pragma unroll
  for (int q = 0; q < SK / kBox; ++q)
    tma_load_2d(ring.stages + stage * stage_bytes(MT, SK) + q * box_bytes(MT) + kPassTiles * kTileBytes, &p.x_map,
                static_cast<int>(s * SK + q * kBox), x_row0, &ring.full[stage], pol);
}

// The producer's stage for k-step s of tiles [t0, t0 + nt): wait until the consumers freed it,
// count all of its bytes (every box whole, zeros past the tensor included; x's too when `with_x` is
// false and they come later, load_x_boxes), then issue the weight tiles and, with_x, x's boxes.
template <int MT, int SK>
__device__ __forceinline__ void fill_stage(const SmemRing& ring, const RingCursor& c, const TmaParams& p, int64_t t0,
                                           int nt, int64_t s, int x_row0, bool with_x, uint64_t pol_w, uint64_t pol_x) {
  mbar_wait(&ring.empty[c.stage], c.phase ^ 1);
  unsigned char* st = ring.stages + c.stage * stage_bytes(MT, SK);
  mbar_arrive_expect(&ring.full[c.stage], SK / kBox * (nt * kTileBytes + x_box_bytes(MT)));
#pragma unroll
  for (int q = 0; q < SK / kBox; ++q)
    load_tiles(st + q * box_bytes(MT), p, t0, nt, static_cast<int>(s * SK + q * kBox), &ring.full[c.stage], pol_w);
  if (with_x) load_x_boxes<MT, SK>(ring, c.stage, p, s, x_row0, pol_x);
}

// The consumers' k-steps [k_begin, k_end), added onto acc; each stage is released once this warp's
// reads of it are done.
template <typename T, int MT, int SK, int ST>
__device__ __forceinline__ void consume_steps(const SmemRing& ring, RingCursor& c, int64_t k_begin, int64_t k_end,
                                              int warp, int lane, float (&acc)[2][MT][4]) {
  for (int64_t s = k_begin; s < k_end; ++s) {
    mbar_wait(&ring.full[c.stage], c.phase);
    consume_stage<T, MT, SK>(ring.stages + c.stage * stage_bytes(MT, SK), warp, lane >> 2, lane & 3, acc);
    __syncwarp();
    if (lane == 0) mbar_arrive(&ring.empty[c.stage]);
    c.advance<ST>();
  }
}
#endif  // sm90

// The epilogue of accumulator i of tile slot r, token tile mt of consumer thread `tid` (warp w,
// g = lane / 4, t = lane % 4): the tile's row g + 8 (i / 2), token 8 mt + 2t + i % 2; gated: i < 2,
// its up sum at i + 2. `a(i)` reads a sum.
template <typename T, bool GATED, typename Sum>
__device__ __forceinline__ void store_acc(const TmaParams& p, int64_t t0, int nt, int x_row0, int tid, int r, int mt,
                                          int i, Sum&& a) {
  const int warp = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
  const int tile = warp + kConsumers * r;
  const int64_t tok = x_row0 + 8 * mt + 2 * t + (i & 1);
  if (tile >= nt || tok >= p.m) return;  // tiles past the pass's nt computed stale smem
  if constexpr (GATED) {
    const int64_t col = (t0 + tile) * 8 + g;
    if (col < p.n_out) store_decode_out<T, true>(p.bias, p.y, p.act, p.n_out, tok, col, a(i), a(i + 2));
  } else {
    const int64_t col = (t0 + tile) * kTileRows + g + 8 * (i >> 1);
    if (col < p.n_out) store_decode_out<T, false>(p.bias, p.y, p.act, p.n_out, tok, col, a(i), 0.f);
  }
}

// The epilogue of a whole pass: every accumulator of the thread's two tile slots and MT token tiles
// (acc[r][mt][i], as consume_steps leaves them), stored through store_acc.
template <typename T, bool GATED, int MT>
__device__ __forceinline__ void store_pass(const TmaParams& p, int64_t t0, int nt, int x_row0, int tid,
                                           const float (&acc)[2][MT][4]) {
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < (GATED ? 2 : 4); ++i)
        store_acc<T, GATED>(p, t0, nt, x_row0, tid, r, mt, i, [&](int ii) { return acc[r][mt][ii]; });
}

// ---- host (decode_tma.cu) --------------------------------------------------------------------------

// The weight's tiles as a 4-D view (64 columns, 8 rows, 2 halves, `tiles` tiles): row r of half h
// of tile t is weight row tile_step t + half_step h + r; boxes of `box_tiles` whole tiles.
CUtensorMap make_tile_map(const void* w, int dtype, int64_t k, int64_t stride, int64_t tiles, int64_t tile_step,
                          int64_t half_step, int box_tiles);
// A [rows, cols] tensor of 16-bit elements, row stride `stride` elements, boxes of box_rows x 64
// columns with the 128-byte swizzle (out-of-bounds elements read as zeros).
CUtensorMap make_map(const void* base, int dtype, int64_t rows, int64_t cols, int64_t stride, int box_rows);
// The parameters of one stream of call `a` on a tma row of `tokens` 8-token tiles and `stage_k`
// columns a stage, K split `splits` ways (tensor maps included).
TmaParams tma_params(const DecodeArgs& a, int tokens, int stage_k, int splits);

}  // namespace tma_parts
}  // namespace kp_fused_mlp
