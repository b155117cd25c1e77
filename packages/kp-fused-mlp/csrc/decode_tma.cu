// The decode weight stream through shared memory (sm90; decode_table.h's tma rows):
//
//   linear: y[m, n] = act(x[m, k] @ w[n, k]^T + bias[n]);  gated: y = act(x Wg^T + bg) * (x Wu^T + bu)
//
// Why not the register ring of decode_gemv.cu: at 16 tokens it reaches 79-90% of a copy of the
// weight bytes with more bytes in flight than Little's law asks, and its grid of row blocks x K
// splits leaves a wave tail and a ring fill a CTA. Here (H200, tools/decode_stream.cu: 83-98%):
//   - TMA boxes of 64 weight rows x 64 columns (8 KB, 128-byte swizzle) into a ring of `ST` stages
//     of SK columns a CTA, issued by one lane of a producer warp: one instruction per 8 KB instead
//     of one per 16 bytes a thread, no registers held by loads in flight. (One 1-D bulk copy a row
//     was 4x slower: TMA spends ~60 cycles a copy however small.)
//   - Persistent: P = CTAs an SM x SMs CTAs; the work is the sequence of (block of 128 weight
//     rows, k-step of SK columns) pairs, T of them, and CTA c takes steps [T c / P, T (c + 1) / P):
//     every CTA streams the same bytes whatever the shape, and the producer runs ahead across row
//     blocks, so the ring never drains between them.
//   - A block whose steps span CTAs c0 < ... < c1 is summed by the last of them to finish it: each
//     leaves its part in the workspace, then counts itself on the block's arrival counter
//     (threadfence-reduction style: no CTA ever waits for another, so no residency assumption);
//     the one that completes the count adds all parts in CTA order (its own from registers), so
//     the sums are the same whoever arrives last: deterministic for a given grid.
//     Measured against the first design (H200, 2026-11-28, 16 tokens; tools/decode_stream.cu pkg):
//     steps run backwards and c1 spinning on c0 .. c1 - 1's flags at its end cost 5-11 us a call
//     (41 / 46 us against 35 for the same stream without the fix-up at 4096 -> 14336 / 14336 ->
//     4096): c1 waited for the slowest part, then read the parts one flag at a time.
//
// Forced only for now (decode_table.h's pick_decode_row): the fix-up above runs after every CTA's
// stream, a chain of ~5 L2 round trips (part stored, fenced, counted, fenced, parts read).
//
// The smem of a stage, per 64-column box q: the block's two 64-row weight boxes (rows 0-63 and
// 64-127: linear, rows 128 b + 0..127; gated, gate rows 64 b.. and up rows I + 64 b..), then the
// x box (8 MT token rows). Warp w computes rows 64 r + 16 w + (0..15) of each box r: gated, gate
// column 16 w + i (r = 0) and its up row (r = 1) in the same thread. Out-of-bounds rows, columns
// and tokens arrive as zeros (the whole box still counts as transaction bytes).
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>

#include "decode_epilogue.cuh"
#include "decode_ptx.cuh"
#include "decode_table.h"
#include "decode_tma.cuh"
#include "kp/dtype.cuh"
#include "kp/error.cuh"
#include "kp/host.cuh"
#include "kp/launch.cuh"

namespace kp_fused_mlp {
namespace {

using namespace decode_ptx;

constexpr int kConsumers = 4;                      // mma warps, 32 weight rows each
constexpr int kConsumerThreads = 32 * kConsumers;  // the named barrier's count
constexpr int kThreads = kConsumerThreads + 32;    // + the producer warp
constexpr int kBlockRows = 32 * kConsumers;        // weight rows a block (gated: 64 columns)
constexpr int kBox = 64;                           // columns a box: 128 bytes, the swizzle's span
constexpr int kBoxRows = 64;

struct TmaParams {
  CUtensorMap w_map;  // [rows, k]: boxes of 64 rows x 64 columns
  CUtensorMap x_map;  // [m, k]: boxes of 8 MT tokens x 64 columns
  const void* bias;
  void* y;
  float* partials;               // [grid z][grid x][2: a CTA's first block, its last][2 MT 4][kConsumerThreads]
  unsigned long long* counters;  // [grid z][blocks]: the call's nonce << 16 | parts arrived
  int64_t m, n_out, k;           // n_out: output columns (gated: I)
  int64_t blocks, ksteps, total; // row blocks, k-steps a block, blocks x ksteps
  int64_t row_step, second_box;  // weight rows from block b to b + 1, from box 0 to box 1
  int act;
  unsigned long long nonce;
};

__host__ __device__ constexpr int w_box_bytes() { return kBoxRows * kBox * 2; }
__host__ __device__ constexpr int x_box_bytes(int mt) { return 8 * mt * kBox * 2; }
__host__ __device__ constexpr int stage_bytes(int mt, int sk) { return sk / kBox * (2 * w_box_bytes() + x_box_bytes(mt)); }
// Dynamic smem: the stages, full and empty mbarriers, and 1 KB to align the ring (the swizzle's
// pattern repeats every 1024 bytes: a box must start on one).
constexpr size_t smem_of(int mt, int sk, int st) { return static_cast<size_t>(st) * stage_bytes(mt, sk) + 16 * st + 1024; }

// The kernel's helpers: sm90 only (the kernel's body is empty below it).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// The CTA whose share [T c / P, T (c + 1) / P) holds step q.
__host__ __device__ __forceinline__ int64_t cta_of_step(int64_t q, int64_t total, int64_t ctas) {
  return ((q + 1) * ctas - 1) / total;
}

// The 16-byte chunk c of row `row` of a 128-byte-swizzled box: stored at chunk c ^ (row % 8).
__device__ __forceinline__ uint4 ld_swizzled(const unsigned char* box, int row, int c) {
  return *reinterpret_cast<const uint4*>(box + row * 128 + ((c ^ (row & 7)) << 4));
}
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumerThreads) : "memory"); }
// One more part of a shared block has arrived: returns whether it was the last of `parts`. The
// counter holds the call's nonce << 16 | parts so far; any other high bits (a fresh workspace's
// garbage, another call's) count as 0. The last resets it (a replayed CUDA graph repeats the nonce).
__device__ __forceinline__ bool count_arrival(unsigned long long* counter, int parts, unsigned long long nonce) {
  const unsigned long long tag = nonce << 16;
  unsigned long long seen = *reinterpret_cast<volatile unsigned long long*>(counter);
  unsigned long long count;
  while (true) {
    count = (seen & ~0xffffull) == tag ? (seen & 0xffff) : 0;
    const unsigned long long prev = atomicCAS(counter, seen, tag | (count + 1));
    if (prev == seen) break;
    seen = prev;
  }
  if (count + 1 < static_cast<unsigned long long>(parts)) return false;
  *counter = 0;
  return true;
}

// The MMAs of one stage for warp `warp` (thread g = lane / 4, t = lane % 4): rows 16 warp + 0..15
// of both weight boxes of each 64-column box q against its x box, into acc[box][token tile].
template <typename T, int MT, int SK>
__device__ __forceinline__ void consume_stage(const unsigned char* st, int warp, int g, int t, float (&acc)[2][MT][4]) {
#pragma unroll
  for (int q = 0; q < SK / kBox; ++q) {
    const unsigned char* qs = st + q * (2 * w_box_bytes() + x_box_bytes(MT));
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
        for (int h = 0; h < 2; ++h) w[r][h] = ld_swizzled(qs + r * w_box_bytes(), 16 * warp + 8 * h + g, c);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) xb[mt] = ld_swizzled(qs + 2 * w_box_bytes(), 8 * mt + g, c);
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) mma_step<T>(acc[r][mt], w[r][0], w[r][1], xb[mt]);
    }
  }
}

#endif  // sm90

template <typename T, int MT, int SK, int ST, int CT, bool GATED>
__global__ void __launch_bounds__(kThreads, CT) decode_tma_kernel(const __grid_constant__ TmaParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kStage = stage_bytes(MT, SK);
  constexpr int kBoxes = SK / kBox;  // per stage
  constexpr int kAcc = 2 * MT * 4;
  static_assert(SK % kBox == 0 && kStage % 1024 == 0, "a stage is whole 1 KB-aligned boxes");
  extern __shared__ unsigned char smem_raw[];
  const SmemRing ring = init_ring<ST>(smem_raw, kStage, kConsumers);
  unsigned char* const smem = ring.stages;
  uint64_t* const full = ring.full;
  uint64_t* const empty = ring.empty;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // A programmatic dependent: x (and the workspace's memory) may be the previous kernel's; nothing
  // global before the wait.
  kp::wait_prior_grid();
  const int64_t ctas = gridDim.x, cta = blockIdx.x;
  const int x_row0 = static_cast<int>(blockIdx.z) * 8 * MT;
  const int64_t begin = p.total * cta / ctas, end = p.total * (cta + 1) / ctas;

  if (warp == kConsumers) {  // the producer: lane 0 issues every box of a stage
    if (lane == 0) {
      const uint64_t pol_w = evict_first_policy(), pol_x = evict_last_policy();
      int stage = 0;
      uint32_t phase = 0;
      for (int64_t it = begin; it < end; ++it) {
        const int64_t b = it / p.ksteps;
        const int k0 = static_cast<int>((it - b * p.ksteps) * SK);
        const int row0 = static_cast<int>(b * p.row_step);
        mbar_wait(&empty[stage], phase ^ 1);
        unsigned char* st = smem + stage * kStage;
        mbar_arrive_expect(&full[stage], kStage);
#pragma unroll
        for (int q = 0; q < kBoxes; ++q) {
          unsigned char* qs = st + q * (2 * w_box_bytes() + x_box_bytes(MT));
          tma_load_2d(qs, &p.w_map, k0 + q * kBox, row0, &full[stage], pol_w);
          tma_load_2d(qs + w_box_bytes(), &p.w_map, k0 + q * kBox, static_cast<int>(row0 + p.second_box), &full[stage],
                      pol_w);
          tma_load_2d(qs + 2 * w_box_bytes(), &p.x_map, k0 + q * kBox, x_row0, &full[stage], pol_x);
        }
        if (++stage == ST) stage = 0, phase ^= 1;
      }
    }
    return;
  }

  const int g = lane >> 2, t = lane & 3;
  float acc[2][MT][4];
  float* const flat = &acc[0][0][0];
  auto zero = [&] {
#pragma unroll
    for (int j = 0; j < kAcc; ++j) flat[j] = 0.f;
  };
  // A block's sums are complete here, or this CTA holds a part of a shared block: the fix-up of
  // the header, then the epilogue. Accumulator i of box r, token tile mt: row 64 r + 16 warp + g +
  // 8 (i / 2), token 8 mt + 2t + i % 2.
  __shared__ int last_to_arrive;
  auto part_of = [&](int64_t c, int64_t b) {  // where CTA c leaves its part of block b
    const int role = b == (p.total * c / ctas) / p.ksteps ? 0 : 1;  // its first block, or its last
    return p.partials + ((static_cast<int64_t>(blockIdx.z) * ctas + c) * 2 + role) * kAcc * kConsumerThreads;
  };
  auto finish = [&](int64_t b) {
    const int64_t first = cta_of_step(b * p.ksteps, p.total, ctas);
    const int64_t last = cta_of_step(b * p.ksteps + p.ksteps - 1, p.total, ctas);
    if (first < last) {
      float* mine = part_of(cta, b);
#pragma unroll
      for (int j = 0; j < kAcc; ++j) __stcg(mine + j * kConsumerThreads + threadIdx.x, flat[j]);
      __threadfence();  // the part is visible before the count says so
      consumers_sync();
      if (threadIdx.x == 0)
        last_to_arrive = count_arrival(&p.counters[static_cast<int64_t>(blockIdx.z) * p.blocks + b],
                                       static_cast<int>(last - first + 1), p.nonce);
      consumers_sync();
      if (!last_to_arrive) return;
      __threadfence();  // ... and read after it
      float sum[kAcc];
#pragma unroll
      for (int j = 0; j < kAcc; ++j) sum[j] = 0.f;
      for (int64_t c = first; c <= last; ++c) {  // CTA order, whoever arrived last: the same sums
        if (c == cta) {
#pragma unroll
          for (int j = 0; j < kAcc; ++j) sum[j] += flat[j];
          continue;
        }
        const float* theirs = part_of(c, b);
        float v[kAcc];
#pragma unroll
        for (int j = 0; j < kAcc; ++j) v[j] = __ldcg(theirs + j * kConsumerThreads + threadIdx.x);
#pragma unroll
        for (int j = 0; j < kAcc; ++j) sum[j] += v[j];
      }
#pragma unroll
      for (int j = 0; j < kAcc; ++j) flat[j] = sum[j];
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t tok = x_row0 + 8 * mt + 2 * t + (i & 1);
        if (tok >= p.m) continue;
        const int row = 16 * warp + g + 8 * (i >> 1);  // within box r
        if constexpr (GATED) {
          const int64_t col = b * kBoxRows + row;
          if (col < p.n_out) store_decode_out<T, true>(p.bias, p.y, p.act, p.n_out, tok, col, acc[0][mt][i], acc[1][mt][i]);
        } else {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int64_t col = b * kBlockRows + kBoxRows * r + row;
            if (col < p.n_out) store_decode_out<T, false>(p.bias, p.y, p.act, p.n_out, tok, col, acc[r][mt][i], 0.f);
          }
        }
      }
  };

  zero();
  int stage = 0;
  uint32_t phase = 0;
  int64_t cur = -1;
  for (int64_t it = begin; it < end; ++it) {
    const int64_t b = it / p.ksteps;
    if (b != cur) {
      if (cur >= 0) finish(cur), zero();
      cur = b;
    }
    mbar_wait(&full[stage], phase);
    const unsigned char* st = smem + stage * kStage;
    consume_stage<T, MT, SK>(st, warp, g, t, acc);
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[stage]);  // release: this warp's reads of the stage are done
    if (++stage == ST) stage = 0, phase ^= 1;
  }
  kp::allow_dependents();  // the weight stream is over: the next kernel's CTAs may queue
  if (cur >= 0) finish(cur);
#endif
}

// ---- host ------------------------------------------------------------------------------------------

template <typename T, int Row, bool GATED>
constexpr auto tma_kernel() {
  using R = DecodeRowT<Row>;
  static_assert(R::kind == DecodeKind::kTma, "a tma row");
  return decode_tma_kernel<T, R::tokens, R::stage_k, R::stages, R::ctas, GATED>;
}

// f(kernel, smem bytes) for the (dtype, tma row, gated) instantiation: 2 rows x 2 dtypes x {linear,
// gated} = 8 kernels.
template <typename F>
void with_tma_kernel(int dtype, int row, bool gated, F&& f) {
  constexpr int kM8 = 2, kM16 = 3;  // decode_table.h's tma rows
  static_assert(DecodeTable::rows[kM8].kind == DecodeKind::kTma && DecodeTable::rows[kM16].kind == DecodeKind::kTma,
                "decode_table.h's tma rows moved: update with_tma_kernel");
  KP_CHECK_ARG(row == kM8 || row == kM16, std::string("decode: ") + DecodeTable::rows[row].name + " is not a tma row");
  auto pick = [&](auto t) {
    using T = decltype(t);
    auto by_row = [&](auto gt) {
      constexpr bool G = decltype(gt)::value;
      using R8 = DecodeRowT<kM8>;
      using R16 = DecodeRowT<kM16>;
      if (row == kM8) return f(tma_kernel<T, kM8, G>(), smem_of(R8::tokens, R8::stage_k, R8::stages));
      return f(tma_kernel<T, kM16, G>(), smem_of(R16::tokens, R16::stage_k, R16::stages));
    };
    if (gated) return by_row(std::true_type{});
    return by_row(std::false_type{});
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

// A [rows, cols] tensor of 16-bit elements, row stride `stride` elements, boxes of box_rows x 64
// columns with the 128-byte swizzle (out-of-bounds elements read as zeros).
CUtensorMap make_map(const void* base, int dtype, int64_t rows, int64_t cols, int64_t stride, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(stride) * 2};
  const cuuint32_t box[2] = {kBox, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode_fn()(&map, dtype == kp::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  KP_CHECK_ARG(r == CUDA_SUCCESS, "decode: cuTensorMapEncodeTiled failed (" + std::to_string(static_cast<int>(r)) +
                                      ") for a [" + std::to_string(rows) + ", " + std::to_string(cols) + "] operand");
  return map;
}

// A different 48-bit nonce every call (a replayed CUDA graph repeats its call's: the counters are
// reset by the last arrival).
unsigned long long next_nonce() {
  static std::atomic<unsigned long long> counter{0};
  unsigned long long z = counter.fetch_add(1, std::memory_order_relaxed) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;  // splitmix64: far from the values memory tends to hold
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return ((z ^ (z >> 31)) & 0xffffffffffffull) | 1ull;  // 48 bits (the counter's high bits), never 0
}

}  // namespace

int64_t decode_tma_blocks(int64_t n_out, bool gated) { return kp::cdiv(n_out, gated ? kBoxRows : kBlockRows); }

int decode_tma_ctas_per_sm(int row, int dtype, bool gated, int device) {
  int n = 0;
  with_tma_kernel(dtype, row, gated, [&](auto kernel, size_t smem) {
    kp::DeviceGuard guard(device);
    n = kp::blocks_per_sm(reinterpret_cast<const void*>(kernel), device, kThreads, smem);
  });
  return n;
}

int64_t decode_tma_workspace_bytes(int row, int64_t grid_x, int64_t grid_z, int64_t blocks) {
  const int64_t acc = 2 * DecodeTable::rows[row].tokens * 4;
  return grid_z * grid_x * 2 * acc * kConsumerThreads * 4 + grid_z * blocks * 8;
}

void decode_tma(const DecodeArgs& a, const DecodePlan& pl, int device, cudaStream_t stream) {
  const DecodeRow& row = DecodeTable::rows[pl.row];
  const int64_t rows = a.gated ? 2 * a.n_out : a.n_out;
  TmaParams p{};
  p.w_map = make_map(a.w, a.dtype, rows, a.k, a.w_stride, kBoxRows);
  // One token row has no stride to speak of: any legal one (a multiple of 16 bytes).
  const int64_t x_stride = a.m > 1 ? a.x_stride : static_cast<int64_t>(kp::round_up(a.k, 8));
  p.x_map = make_map(a.x, a.dtype, a.m, a.k, x_stride, 8 * row.tokens);
  p.bias = a.bias;
  p.y = a.y;
  p.m = a.m;
  p.n_out = a.n_out;
  p.k = a.k;
  p.blocks = decode_tma_blocks(a.n_out, a.gated);
  p.ksteps = kp::cdiv(a.k, static_cast<int64_t>(row.stage_k));
  p.total = p.blocks * p.ksteps;
  p.row_step = a.gated ? kBoxRows : kBlockRows;
  p.second_box = a.gated ? a.n_out : kBoxRows;
  p.act = a.act;
  p.nonce = next_nonce();
  p.partials = a.ws;
  const int64_t parts_bytes = decode_tma_workspace_bytes(pl.row, pl.grid_x, pl.grid_z, 0);
  p.counters = reinterpret_cast<unsigned long long*>(reinterpret_cast<char*>(a.ws) + parts_bytes);
  kp::DeviceGuard guard(device);
  with_tma_kernel(a.dtype, pl.row, a.gated, [&](auto kernel, size_t smem) {
    kp::launch_dependent(kernel, device, dim3(pl.grid_x, 1, pl.grid_z), dim3(kThreads), smem, stream, p);
  });
}

}  // namespace kp_fused_mlp
