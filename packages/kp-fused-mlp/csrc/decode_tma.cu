// The decode weight stream through shared memory (sm90; decode_table.h's tma rows):
//
//   linear: y[m, n] = act(x[m, k] @ w[n, k]^T + bias[n]);  gated: y = act(x Wg^T + bg) * (x Wu^T + bu)
//
// Why not the register ring of decode_gemv.cu: at 16 tokens it reaches 79-90% of a copy of the
// weight bytes with more bytes in flight than Little's law asks. Here (H200, tools/decode_stream.cu):
//   - TMA boxes of whole 16-row tiles x 64 columns (2 KB a tile, 128-byte swizzle) into a ring of
//     `ST` stages of SK columns a CTA, issued by one lane of a producer warp: one instruction per
//     up to 8 KB instead of one per 16 bytes a thread, no registers held by loads in flight. (One
//     1-D bulk copy a row was 4x slower: TMA spends ~60 cycles a copy however small.)
//   - Rows only, all of K: P = CTAs an SM x SMs CTAs; CTA c takes the 16-row tiles [U c / P,
//     U (c + 1) / P) of the U tiles, in passes of at most 8 (the 4 warps x 2 tiles), and runs the
//     epilogue of each pass from its registers. No CTA shares an output with another, so there is
//     no fix-up and no workspace. Balanced where U >= ~4 P (decode_table.h's min_cta_tiles):
//     gated 4096 / 14336 is 1792 tiles, 6 or 7 a CTA at 264 CTAs.
//     Measured against the first design (persistent shares of (row block, k-step), the parts of
//     blocks that straddle CTAs added by the last to arrive; H200, 2026-11-28/29, 16 tokens, % of a
//     same-bytes copy): that fix-up ran after every CTA's stream (~5 L2 round trips a call): 42-46
//     us in the package against 35 for its stream alone. Rows only, tools/decode_stream.cu rows:
//     gated 4096 / 14336 90%, 8192 -> 28672 96%, gated 8192 / 28672 97%; where U < P (the down
//     projections, 14336 -> 4096: 256 tiles, one a CTA) 40-55%: too few bytes in flight a CTA, so
//     those keep the mma rows (K splits summed over a cluster) by default.
//   - Forced (decode_row=), such calls split K over a cluster of S CTAs (decode_gemv.cu's
//     tma_layout): the cluster shares a run of at most 8 tiles (one pass), rank r streams the r-th
//     S-th of the k-steps, then every rank parks its sums in its ring's first stage and adds its
//     share of the accumulator slots over the ranks in rank order (distributed shared memory;
//     deterministic). H200, 2026-11-29, 14336 -> 4096 at 16 tokens: 37.5-39.3 us at S = 4 or 7,
//     the mma rows 39.2, cuBLAS 33.4: not the default.
//
// A tile is 16 weight rows whose outputs one m16n8k16 MMA leaves in a thread: rows g and g + 8 of
// the MMA (g = lane / 4). Linear: rows 16 t .. 16 t + 15. Gated: gate rows 8 t .. 8 t + 7, then up
// rows I + 8 t .. I + 8 t + 7, so a thread holds the gate and up sums of column 8 t + g. Both are
// one 4-D view of the weight, (64 columns, 8 rows, 2 halves, tiles), whose half stride is 8 rows
// (linear) or I rows (gated): a box of (64, 8, 2, 4 | 2 | 1) loads 4, 2 or 1 whole tiles. The last
// tile when it is partial (N % 16, I % 8) comes from a 2-D map of 8-row boxes, whose rows past the
// weight arrive as zeros (gated: its gate half past I reads up rows; those columns are not stored).
//
// The smem of a stage, per 64-column box q: the pass's tiles (2 KB each, 8 at most: 16 KB), then
// the x box (8 MT token rows). Warp w computes tiles w and w + 4 of the pass.
#include <cooperative_groups.h>
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "decode_epilogue.cuh"
#include "decode_ptx.cuh"
#include "decode_table.h"
#include "decode_tma.cuh"
#include "decode_tma_parts.cuh"
#include "kp/dtype.cuh"
#include "kp/error.cuh"
#include "kp/host.cuh"
#include "kp/launch.cuh"

namespace kp_fused_mlp {
namespace {

using namespace decode_ptx;
using namespace tma_parts;
namespace cg = cooperative_groups;

template <typename T, int MT, int SK, int ST, int CT, bool GATED>
__global__ void __launch_bounds__(kThreads, CT) decode_tma_kernel(const __grid_constant__ TmaParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kStage = stage_bytes(MT, SK);
  constexpr int kAcc = 2 * MT * 4;   // accumulators a consumer thread
  static_assert(SK % kBox == 0 && kStage % 1024 == 0 && box_bytes(MT) % 1024 == 0, "stages are whole 1 KB-aligned boxes");
  static_assert(kAcc * kConsumers * 32 * 4 <= kStage, "a cluster's sums park in stage 0");
  extern __shared__ unsigned char smem_raw[];
  const SmemRing ring = init_ring<ST>(smem_raw, kStage, kConsumers);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // A programmatic dependent: x may be the previous kernel's output; nothing global before the wait.
  kp::wait_prior_grid();
  // Cluster cl (the splits of a run of tiles) takes tiles [U cl / C, U (cl + 1) / C); its rank r the
  // k-steps [S_k r / splits, S_k (r + 1) / splits) of them.
  const int64_t clusters = gridDim.x / p.splits, cl = blockIdx.x / p.splits;
  const int rank = static_cast<int>(blockIdx.x % p.splits);
  const int x_row0 = static_cast<int>(blockIdx.z) * 8 * MT;
  const int64_t t_begin = p.tiles * cl / clusters, t_end = p.tiles * (cl + 1) / clusters;
  const int64_t k_begin = p.ksteps * rank / p.splits, k_end = p.ksteps * (rank + 1) / p.splits;
  const int64_t passes = (t_end - t_begin + kPassTiles - 1) / kPassTiles;

  if (warp == kConsumers) {  // the producer: lane 0 issues every box of a stage
    if (lane == 0) {
      const uint64_t pol_w = evict_first_policy(), pol_x = evict_last_policy();
      RingCursor c;
      for (int64_t ps = 0; ps < passes; ++ps) {
        const int64_t t0 = t_begin + kPassTiles * ps;
        const int nt = static_cast<int>(std::min<int64_t>(kPassTiles, t_end - t0));
        for (int64_t s = k_begin; s < k_end; ++s, c.advance<ST>())
          fill_stage<MT, SK>(ring, c, p, t0, nt, s, x_row0, true, pol_w, pol_x);
      }
    }
    __syncwarp();
    if (p.splits > 1) {  // the cluster's two barriers below (a CTA's threads all arrive)
      cg::this_cluster().sync();
      cg::this_cluster().sync();
    }
    return;
  }

  float acc[2][MT][4];
  float* const flat = &acc[0][0][0];
  RingCursor c;
  for (int64_t ps = 0; ps < passes; ++ps) {
    const int64_t t0 = t_begin + kPassTiles * ps;
    const int nt = static_cast<int>(std::min<int64_t>(kPassTiles, t_end - t0));
#pragma unroll
    for (int j = 0; j < kAcc; ++j) flat[j] = 0.f;
    consume_steps<T, MT, SK, ST>(ring, c, k_begin, k_end, warp, lane, acc);
    // The weight stream is over: the next kernel may queue. (Triggered at the start instead, with
    // this grid one wave, a dependent of this grid's own dependent (GatedMLP's down projection after
    // its gated one, back to back) took slots that this grid's last CTAs still waited for: 146 us
    // a GatedMLP call at 16 tokens against 98; H200, 2026-11-29.)
    if (ps == passes - 1) kp::allow_dependents();
    if (p.splits == 1) {
      store_pass<T, GATED, MT>(p, t0, nt, x_row0, threadIdx.x, acc);
      continue;
    }
    // K splits (one pass, the plan's promise): every thread parks its sums in stage 0 once all
    // consumers are done with the ring; after the cluster's barrier, rank r adds its share of the
    // accumulator slots (j) over the ranks in rank order (deterministic) through distributed shared
    // memory and stores them; a second barrier keeps every rank's park until all have read it.
    cg::cluster_group cluster = cg::this_cluster();
    float* const park = reinterpret_cast<float*>(ring.stages);
    consumers_sync();
#pragma unroll
    for (int j = 0; j < kAcc; ++j) park[j * kConsumerThreads + threadIdx.x] = flat[j];
    cluster.sync();
    constexpr int kGroups = GATED ? kAcc / 2 : kAcc;  // gated: (i, i + 2) pairs
    for (int grp = kGroups * rank / p.splits; grp < kGroups * (rank + 1) / p.splits; ++grp) {
      const int j = GATED ? (grp >> 1) * 4 + (grp & 1) : grp;  // the first slot of the group
      const int r = j / (MT * 4), mt = (j / 4) % MT, i = j % 4;
      float sum[2] = {0.f, 0.f};
      for (int q = 0; q < p.splits; ++q) {
        const float* theirs = cluster.map_shared_rank(park, q);
        sum[0] += theirs[j * kConsumerThreads + threadIdx.x];
        if (GATED) sum[1] += theirs[(j + 2) * kConsumerThreads + threadIdx.x];
      }
      store_acc<T, GATED>(p, t0, nt, x_row0, threadIdx.x, r, mt, i, [&](int ii) { return sum[ii == i ? 0 : 1]; });
    }
    cluster.sync();
  }
  if (passes == 0) {
    kp::allow_dependents();
    if (p.splits > 1) {  // the producer and the other ranks wait at both barriers
      cg::this_cluster().sync();
      cg::this_cluster().sync();
    }
  }
#endif
}

// ---- host ------------------------------------------------------------------------------------------

template <typename T, int Row, bool GATED>
constexpr auto tma_kernel() {
  using R = DecodeRowT<Row>;
  static_assert(R::kind == DecodeKind::kTma, "a tma row");
  return decode_tma_kernel<T, R::tokens, R::stage_k, R::stages, R::ctas, GATED>;
}

// f(kernel, smem bytes) for the (dtype, tma row, gated) instantiation: 3 rows x 2 dtypes x {linear,
// gated} = 12 kernels.
template <typename F>
void with_tma_kernel(int dtype, int row, bool gated, F&& f) {
  KP_CHECK_ARG(is_tma_row(row), std::string("decode: ") + DecodeTable::rows[row].name + " is not a tma row");
  auto pick = [&](auto t) {
    using T = decltype(t);
    return with_tma_row(row, [&](auto r) {
      using R = DecodeRowT<decltype(r)::value>;
      const size_t smem = smem_of(R::tokens, R::stage_k, R::stages);
      if (gated) return f(tma_kernel<T, decltype(r)::value, true>(), smem);
      return f(tma_kernel<T, decltype(r)::value, false>(), smem);
    });
  };
  if (dtype == kp::kBF16) return pick(__nv_bfloat16{});
  return pick(__half{});
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (the module links no libcuda).
PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || f == nullptr) {
      (void)cudaGetLastError();
      kp::throw_arg("decode: the driver has no cuTensorMapEncodeTiled (the tma rows need CUDA 12 or newer)");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A tensor map of 16-bit elements, `rank` dims (innermost first; byte strides of dims 1..), boxes of
// 64 columns (128 bytes) x box[1..], the 128-byte swizzle, out-of-bounds elements read as zeros.
CUtensorMap encode(const void* base, int dtype, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                   const cuuint32_t* box) {
  CUtensorMap map;
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode_fn()(&map, dtype == kp::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                 rank, const_cast<void*>(base), dims, strides, box, elem_strides,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  std::string shape;
  for (int d = rank - 1; d >= 0; --d) shape += std::to_string(dims[d]) + (d ? ", " : "");
  KP_CHECK_ARG(r == CUDA_SUCCESS, "decode: cuTensorMapEncodeTiled failed (" + std::to_string(static_cast<int>(r)) +
                                      ") for a [" + shape + "] view of an operand");
  return map;
}

}  // namespace

namespace tma_parts {

CUtensorMap make_tile_map(const void* w, int dtype, int64_t k, int64_t stride, int64_t tiles, int64_t tile_step,
                          int64_t half_step, int box_tiles) {
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(k), 8, 2, static_cast<cuuint64_t>(tiles)};
  const cuuint64_t row = static_cast<cuuint64_t>(stride) * 2;
  const cuuint64_t strides[3] = {row, row * half_step, row * tile_step};
  const cuuint32_t box[4] = {kBox, 8, 2, static_cast<cuuint32_t>(box_tiles)};
  return encode(w, dtype, 4, dims, strides, box);
}

CUtensorMap make_map(const void* base, int dtype, int64_t rows, int64_t cols, int64_t stride, int box_rows) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(stride) * 2};
  const cuuint32_t box[2] = {kBox, static_cast<cuuint32_t>(box_rows)};
  return encode(base, dtype, 2, dims, strides, box);
}

TmaParams tma_params(const DecodeArgs& a, int tokens, int stage_k, int splits) {
  const int64_t rows = a.gated ? 2 * a.n_out : a.n_out;
  TmaParams p{};
  p.tiles = decode_tma_tiles(a.n_out, a.gated);
  p.full_tiles = a.gated ? a.n_out / 8 : a.n_out / kTileRows;
  p.tile_step = a.gated ? 8 : kTileRows;
  p.half_step = a.gated ? static_cast<int>(a.n_out) : 8;
  if (p.full_tiles > 0)
    for (int s = 0; s < 3; ++s)
      p.w_tiles[s] = make_tile_map(a.w, a.dtype, a.k, a.w_stride, p.full_tiles, p.tile_step, p.half_step, map_tiles(s));
  p.w_rows = make_map(a.w, a.dtype, rows, a.k, a.w_stride, 8);
  // One token row has no stride to speak of: any legal one (a multiple of 16 bytes).
  const int64_t x_stride = a.m > 1 ? a.x_stride : static_cast<int64_t>(kp::round_up(a.k, 8));
  p.x_map = make_map(a.x, a.dtype, a.m, a.k, x_stride, 8 * tokens);
  p.bias = a.bias;
  p.y = a.y;
  p.m = a.m;
  p.n_out = a.n_out;
  p.k = a.k;
  p.ksteps = kp::cdiv(a.k, static_cast<int64_t>(stage_k));
  p.act = a.act;
  p.splits = splits;
  return p;
}

}  // namespace tma_parts

int decode_tma_ctas_per_sm(int row, int dtype, bool gated, int device) {
  int n = 0;
  with_tma_kernel(dtype, row, gated, [&](auto kernel, size_t smem) {
    kp::DeviceGuard guard(device);
    n = kp::blocks_per_sm(reinterpret_cast<const void*>(kernel), device, kThreads, smem);
  });
  return n;
}

int64_t decode_tma_tiles(int64_t n_out, bool gated) { return kp::cdiv(n_out, gated ? 8 : kTileRows); }

int decode_tma_max_clusters(int row, int dtype, bool gated, int splits, int device) {
  int n = 0;
  with_tma_kernel(dtype, row, gated, [&](auto kernel, size_t smem) {
    kp::DeviceGuard guard(device);
    n = kp::max_active_clusters(reinterpret_cast<const void*>(kernel), device, kThreads, smem, splits);
  });
  return n;
}

void decode_tma(const DecodeArgs& a, const DecodePlan& pl, int device, cudaStream_t stream) {
  const DecodeRow& row = DecodeTable::rows[pl.row];
  const TmaParams p = tma_params(a, row.tokens, row.stage_k, pl.splits);
  KP_CHECK_ARG(pl.splits >= 1 && pl.splits <= 8 && pl.grid_x % pl.splits == 0 &&
                   (pl.splits == 1 || kp::cdiv(p.tiles, pl.grid_x / pl.splits) <= kPassTiles),
               "decode: a tma plan's K splits are a cluster of at most 8 CTAs with one pass of tiles each");
  kp::DeviceGuard guard(device);
  with_tma_kernel(a.dtype, pl.row, a.gated, [&](auto kernel, size_t smem) {
    const dim3 grid(pl.grid_x, 1, pl.grid_z);
    // Clusters launch plainly, as the mma rows' (decode_gemv.cu): as a programmatic dependent of
    // the gated tma kernel, the down projection's 7-split clusters made GatedMLP at 16 tokens 144
    // us a call back to back against 98 (H200, 2026-11-29).
    if (pl.splits > 1)
      kp::launch_cluster_shape(kernel, device, grid, dim3(kThreads), smem, stream, dim3(pl.splits, 1, 1), p);
    else
      kp::launch_dependent(kernel, device, grid, dim3(kThreads), smem, stream, p);
  });
}

}  // namespace kp_fused_mlp
