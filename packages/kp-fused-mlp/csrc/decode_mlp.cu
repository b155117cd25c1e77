// GatedMLP's decode forward in one persistent kernel (sm90, a few tokens):
//
//   phase A  h = act(x Wg^T + bg) * (x Wu^T + bu)      the gated tma rows (decode_tma.cu), h [m, I]
//   barrier  every CTA's h stored (a grid barrier: the launch is cooperative, all CTAs resident)
//   phase B  partial[s] = h Wd[:, K_s]^T                 the down weight in 128-row blocks x K splits
//   barrier  every partial stored
//   reduce   y = sum_s partial[s] + bd                   in split order (deterministic)
//
// Why one kernel: at 16 tokens GatedMLP is two weight streams (Llama-3-8B: 235 MB gated, 117 MB
// down) and as two kernels it read 80-82% of a same-bytes copy (H200, sessions 29-31): the gated
// kernel's tail and the launch between them cost a few us, and the down projection alone (256
// 16-row tiles against 264 CTAs: one tile a CTA) streams at 77-80% where cuBLAS's split-K reaches
// 87%. Here the producer warp fills the ring with the down weight's first stages as soon as its
// gated loads are issued (they do not depend on h), and only h's boxes wait for the barrier; the
// down weight goes in blocks of 8 tiles (128 rows: the shapes that streamed at 90-97% read >= 64
// rows at once a CTA, session 30) with K split over the grid, the split sums parked in an fp32
// workspace and added after a second barrier (2 x 2 MB at 16 tokens, in L2).
//
// The grid barrier: one 64-bit counter, never reset. Every CTA adds 1 at each barrier and CTA 0 adds
// kQuantum - 2 P + 1 at the second, so a call advances it by exactly kQuantum; a CTA's arrival
// value t gives the call's base (t rounded down to kQuantum), and the barriers wait for base + P
// and base + kQuantum. A CTA's arrivals are ordered (its second waits for its producer's pass of
// the first), and no call can start before the previous one on the counter ends, so the counter
// must be a stream's own (the caller's; launched without programmatic overlap).
//
// Memory order: h is written by the consumers' generic stores and read by other CTAs' TMA (the
// async proxy): stores, CTA barrier, fence + atomic (release) on one side; acquire load, fence,
// proxy fence, then the TMA loads on the other.
#include <algorithm>
#include <cstdint>
#include <string>

#include "decode_gemv.cuh"
#include "decode_mlp.cuh"
#include "decode_ptx.cuh"
#include "decode_table.h"
#include "decode_tma.cuh"
#include "decode_tma_parts.cuh"
#include "kp/dtype.cuh"
#include "kp/error.cuh"
#include "kp/gemm/activation.cuh"
#include "kp/host.cuh"
#include "kp/launch.cuh"
#include "kp/plan_cache.h"

namespace kp_fused_mlp {
namespace {

using namespace decode_ptx;
using namespace tma_parts;

constexpr unsigned long long kQuantum = 1ull << 24;  // the counter's advance a call (grids < 2^23 CTAs)
constexpr int kHStoredBar = 2;  // named barrier: the consumers' h stores -> the producer
constexpr int kOpenBar = 3;     // named barrier: the producer passed the first grid barrier -> the consumers
constexpr int64_t kMaxSplits = 64;

struct MlpParams {
  TmaParams up;    // x -> h: the gated stream (up.y = h, up.bias = [bg; bu])
  TmaParams down;  // h -> partials: a linear stream of Wd (its x map reads h; y, bias unused)
  float* partials;  // [splits, m, H]
  void* y;          // [m, H]
  const void* b_down;
  unsigned long long* counter;
  int64_t items;  // the down projection's (block, split) pairs: blocks x splits
  int splits;
};

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__device__ __forceinline__ void named_sync(int id) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory"); }
__device__ __forceinline__ void named_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}

__device__ __forceinline__ unsigned long long load_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// One thread of each CTA: arrive at this call's first (second: `last`) grid barrier and wait for
// every CTA's arrival (the header comment's counter).
__device__ __forceinline__ void grid_barrier(unsigned long long* counter, bool last) {
  const unsigned long long grid = gridDim.x;
  __threadfence();
  const unsigned long long add = last && blockIdx.x == 0 ? kQuantum - 2 * grid + 1 : 1;
  const unsigned long long t = atomicAdd(counter, add);
  const unsigned long long base = t / kQuantum * kQuantum;
  const unsigned long long target = last ? base + kQuantum : base + grid;
  // Wrap-safe (the counter wraps after 2^40 calls on a stream): the signed distance to the target.
  while (static_cast<long long>(load_acquire(counter) - target) < 0) {
  }
  __threadfence();
}
#endif

template <typename T, int MT, int SK, int ST, int CT>
__global__ void __launch_bounds__(kThreads, CT) gated_mlp_decode_kernel(const __grid_constant__ MlpParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kStage = stage_bytes(MT, SK);
  constexpr int kAcc = 2 * MT * 4;
  extern __shared__ unsigned char smem_raw[];
  const SmemRing ring = init_ring<ST>(smem_raw, kStage, kConsumers);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const TmaParams& up = p.up;
  const TmaParams& dn = p.down;
  const int64_t ctas = gridDim.x, cta = blockIdx.x;
  const int64_t a_begin = up.tiles * cta / ctas, a_end = up.tiles * (cta + 1) / ctas;
  const int64_t a_passes = (a_end - a_begin + kPassTiles - 1) / kPassTiles;
  // Down item it: block it / splits (tiles 8 b ..), K split it % splits.
  auto item_tiles = [&](int64_t it, int64_t& t0, int& nt, int64_t& k_begin, int64_t& k_end) {
    const int64_t split = it % p.splits;
    t0 = it / p.splits * kPassTiles;
    nt = static_cast<int>(std::min<int64_t>(kPassTiles, dn.tiles - t0));
    k_begin = dn.ksteps * split / p.splits;
    k_end = dn.ksteps * (split + 1) / p.splits;
  };

  if (warp == kConsumers) {  // the producer warp: lane 0 issues, the warp meets the named barriers
    const bool leader = lane == 0;
    uint64_t pol_w = 0, pol_x = 0;
    if (leader) pol_w = evict_first_policy(), pol_x = evict_last_policy();
    RingCursor c;
    for (int64_t ps = 0; ps < a_passes; ++ps) {
      const int64_t t0 = a_begin + kPassTiles * ps;
      const int nt = static_cast<int>(std::min<int64_t>(kPassTiles, a_end - t0));
      for (int64_t s = 0; s < up.ksteps; ++s, c.advance<ST>())
        if (leader) fill_stage<MT, SK>(ring, c, up, t0, nt, s, 0, true, pol_w, pol_x);
    }
    // The down weight's first stages go out before h exists; their h boxes after the barrier.
    int held_stage[ST];
    int64_t held_k[ST];
    int held = 0;
    bool open = false;
    auto open_h = [&] {
      __syncwarp();
      named_sync(kHStoredBar);  // this CTA's h stores are done
      if (leader) {
        grid_barrier(p.counter, false);
        asm volatile("fence.proxy.async.global;\n" ::: "memory");  // TMA reads what generic stores wrote
        for (int d = 0; d < held; ++d) load_x_boxes<MT, SK>(ring, held_stage[d], dn, held_k[d], 0, pol_x);
      }
      __syncwarp();
      named_arrive(kOpenBar);
      open = true;
    };
    for (int64_t it = cta; it < p.items; it += ctas) {
      int64_t t0, k_begin, k_end;
      int nt;
      item_tiles(it, t0, nt, k_begin, k_end);
      for (int64_t s = k_begin; s < k_end; ++s) {
        if (leader) fill_stage<MT, SK>(ring, c, dn, t0, nt, s, 0, open, pol_w, pol_x);
        if (!open) held_stage[held] = c.stage, held_k[held] = s, ++held;
        c.advance<ST>();
        if (!open && held == ST) open_h();
      }
    }
    if (!open) open_h();
    return;
  }

  float acc[2][MT][4];
  float* const flat = &acc[0][0][0];
  RingCursor c;
  for (int64_t ps = 0; ps < a_passes; ++ps) {
    const int64_t t0 = a_begin + kPassTiles * ps;
    const int nt = static_cast<int>(std::min<int64_t>(kPassTiles, a_end - t0));
#pragma unroll
    for (int j = 0; j < kAcc; ++j) flat[j] = 0.f;
    consume_steps<T, MT, SK, ST>(ring, c, 0, up.ksteps, warp, lane, acc);
    store_pass<T, true, MT>(up, t0, nt, 0, threadIdx.x, acc);
  }
  // Each writer orders its h stores before other CTAs' TMA reads of them (the async proxy), as a
  // TMA store after smem writes does; the producer's reader-side fence stays too.
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
  named_arrive(kHStoredBar);

  const int64_t m = dn.m, hidden = dn.n_out, outputs = m * hidden;
  const int g = lane >> 2, t = lane & 3;
  for (int64_t it = cta; it < p.items; it += ctas) {
    int64_t t0, k_begin, k_end;
    int nt;
    item_tiles(it, t0, nt, k_begin, k_end);
#pragma unroll
    for (int j = 0; j < kAcc; ++j) flat[j] = 0.f;
    consume_steps<T, MT, SK, ST>(ring, c, k_begin, k_end, warp, lane, acc);
    float* const part = p.partials + (it % p.splits) * outputs;
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int tile = warp + kConsumers * r;
          const int64_t tok = 8 * mt + 2 * t + (i & 1), col = (t0 + tile) * kTileRows + g + 8 * (i >> 1);
          if (tile < nt && tok < m && col < hidden) part[tok * hidden + col] = acc[r][mt][i];
        }
  }
  named_sync(kOpenBar);  // after the producer's first barrier: this CTA's arrivals stay in order
  if (threadIdx.x == 0) grid_barrier(p.counter, true);
  consumers_sync();
  const T* bias = static_cast<const T*>(p.b_down);
  for (int64_t o = cta * kConsumerThreads + threadIdx.x; o < outputs; o += ctas * kConsumerThreads) {
    float sum = 0.f;
    for (int s = 0; s < p.splits; ++s) sum += __ldcg(p.partials + s * outputs + o);  // L2: other SMs wrote them
    if (bias) sum += kp::to_f(bias[o % hidden]);
    static_cast<T*>(p.y)[o] = kp::from_f<T>(sum);
  }
#endif
}

// ---- host ------------------------------------------------------------------------------------------

// f(kernel, smem bytes) for the (dtype, tma row): 3 rows x 2 dtypes = 6 kernels.
template <typename F>
void with_mlp_kernel(int dtype, int row, F&& f) {
  KP_CHECK_ARG(is_tma_row(row), std::string("gated_mlp_decode: ") + DecodeTable::rows[row].name + " is not a tma row");
  auto pick = [&](auto t) {
    using T = decltype(t);
    return with_tma_row(row, [&](auto r) {
      using R = DecodeRowT<decltype(r)::value>;
      return f(gated_mlp_decode_kernel<T, R::tokens, R::stage_k, R::stages, R::ctas>,
               smem_of(R::tokens, R::stage_k, R::stages));
    });
  };
  if (dtype == kp::kBF16) return pick(__nv_bfloat16{});
  return pick(__half{});
}

MlpDecodePlan make_plan(int64_t m, int64_t hidden, int64_t inter, int dtype, int row_index, int splits, int device) {
  MlpDecodePlan pl{};
  pl.row = -1;
  const kp::DeviceInfo& info = kp::device_info(device);
  if (info.major < 9) return pl.why = "the fused decode kernel needs sm90 (TMA)", pl;
  if (dtype != kp::kF16 && dtype != kp::kBF16) return pl.why = "the fused decode kernel takes float16 or bfloat16", pl;
  if (m < 1 || hidden < 1 || inter < 1) return pl.why = "an empty call", pl;
  if (hidden % 8 || inter % 8) return pl.why = "hidden and intermediate must be multiples of 8 (TMA's 16-byte rows)", pl;
  if (hidden >= (int64_t{1} << 30) || inter >= (int64_t{1} << 30)) return pl.why = "hidden and intermediate must be below 2^30", pl;
  // The gated projection's own plan decides (a forced row: any size its tokens cover): the fused
  // kernel runs where it takes a tma row.
  if (row_index < 0) {
    const DecodePlan gated = decode_plan(m, inter, hidden, true, dtype, 0, -1, device);
    if (DecodeTable::rows[gated.row].kind != DecodeKind::kTma || gated.splits != 1)
      return pl.why = "the gated projection of this call runs the fma or mma rows (decode_table.h)", pl;
    row_index = gated.row;
  } else if (row_index >= DecodeTable::size || DecodeTable::rows[row_index].kind != DecodeKind::kTma) {
    return pl.why = "a forced row of the fused decode kernel must be a tma row", pl;
  } else if (m > 8 * DecodeTable::rows[row_index].tokens) {
    return pl.why = "more tokens than the forced row's tile", pl;
  }
  int ctas_per_sm = 0;
  with_mlp_kernel(dtype, row_index, [&](auto kernel, size_t smem) {
    kp::DeviceGuard guard(device);
    ctas_per_sm = kp::blocks_per_sm(reinterpret_cast<const void*>(kernel), device, kThreads, smem);
  });
  if (ctas_per_sm < 1) return pl.why = "the fused decode kernel does not fit an SM", pl;
  const DecodeRow& row = DecodeTable::rows[row_index];
  pl.row = row_index;
  pl.grid = ctas_per_sm * info.sms;
  pl.blocks = kp::cdiv(kp::cdiv(hidden, int64_t{kTileRows}), int64_t{kPassTiles});
  const int64_t ksteps = kp::cdiv(inter, static_cast<int64_t>(row.stage_k));
  // The down projection's K splits: as many as fill the grid with (block, split) items (Llama-3-8B:
  // 32 blocks x 8 on 264 CTAs), at most one a k-step and kMaxSplits (the reduce reads them all).
  const int64_t want = splits > 0 ? splits : pl.grid / pl.blocks;
  pl.splits = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({want, ksteps, kMaxSplits})));
  pl.h_bytes = m * inter * 2;
  pl.partial_bytes = static_cast<int64_t>(pl.splits) * m * hidden * 4;
  pl.why = "";
  return pl;
}

}  // namespace

MlpDecodePlan gated_mlp_decode_plan(int64_t m, int64_t hidden, int64_t inter, int dtype, int row, int splits,
                                    int device) {
  static kp::PlanCache<MlpDecodePlan, 7> cache;
  return cache.get({m, hidden, inter, dtype, row, splits, device},
                   [&] { return make_plan(m, hidden, inter, dtype, row, splits, device); });
}

void gated_mlp_decode(const MlpDecodeArgs& a, int row, int splits, int device, cudaStream_t stream) {
  KP_CHECK_ARG(splits >= 0, "gated_mlp_decode: splits must be >= 0 (0: the plan's rule)");
  KP_CHECK_ARG(a.act == static_cast<int>(kp::gemm::Act::kSilu) || a.act == static_cast<int>(kp::gemm::Act::kGeluTanh),
               "gated_mlp_decode: the gated activation is silu or gelu_tanh (kp::gemm::Act 4 or 3)");
  const MlpDecodePlan pl = gated_mlp_decode_plan(a.m, a.hidden, a.inter, a.dtype, row, splits, device);
  KP_CHECK_ARG(pl.row >= 0, std::string("gated_mlp_decode: ") + pl.why);
  KP_CHECK_ARG(a.m <= 8 * DecodeTable::rows[pl.row].tokens, "gated_mlp_decode: more tokens than the row's tile");
  KP_CHECK_ARG(a.x && a.w_gate_up && a.w_down && a.y && a.h && a.partials && a.counter,
               "gated_mlp_decode: x, the weights, y, the workspaces and the counter must not be null");
  auto rows16 = [](const void* ptr, int64_t stride, int64_t rows, int64_t cols) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && (rows <= 1 || (stride % 8 == 0 && stride >= cols));
  };
  KP_CHECK_ARG(rows16(a.x, a.x_stride, a.m, a.hidden) && rows16(a.w_gate_up, a.w_gate_up_stride, 2 * a.inter, a.hidden) &&
                   rows16(a.w_down, a.w_down_stride, a.hidden, a.inter) && rows16(a.h, a.inter, a.m, a.inter),
               "gated_mlp_decode: x, the weights and h must be 16-byte aligned, their row strides multiples of 8 "
               "elements and at least a row");
  const DecodeRow& tma_row = DecodeTable::rows[pl.row];
  MlpParams p{};
  const DecodeArgs gated{a.x, a.x_stride, a.w_gate_up, a.w_gate_up_stride, a.b_gate_up, a.h, nullptr,
                         a.m, a.inter, a.hidden, a.dtype, a.act, true};
  const DecodeArgs down{a.h, a.inter, a.w_down, a.w_down_stride, nullptr, nullptr, nullptr,
                        a.m, a.hidden, a.inter, a.dtype, static_cast<int>(kp::gemm::Act::kNone), false};
  p.up = tma_params(gated, tma_row.tokens, tma_row.stage_k, 1);
  p.down = tma_params(down, tma_row.tokens, tma_row.stage_k, 1);
  p.partials = a.partials;
  p.y = a.y;
  p.b_down = a.b_down;
  p.counter = a.counter;
  p.splits = pl.splits;
  p.items = pl.blocks * pl.splits;
  kp::DeviceGuard guard(device);
  with_mlp_kernel(a.dtype, pl.row, [&](auto kernel, size_t smem) {
    kp::launch_cooperative(kernel, device, dim3(pl.grid), dim3(kThreads), smem, stream, p);
  });
}

}  // namespace kp_fused_mlp
