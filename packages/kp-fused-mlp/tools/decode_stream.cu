// Microbenchmark: the decode weight stream through shared memory (TMA boxes) against the
// register ring of csrc/decode_gemv.cu (tools/decode_variants.cu times that one), and the
// package's tma rows (csrc/decode_tma.cu, included) beside this file's kernel.
//
//   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch=sm_90a -I../../shared_cuda/include \
//        -o decode_stream tools/decode_stream.cu                       (in packages/kp-fused-mlp)
//   ./decode_stream [reps]        every variant below, 1 / 8 / 16 tokens, six shapes
//   ./decode_stream [reps] pkg    this file's m16 kernel and the package's decode_tma_m16, 16 tokens
//   ./decode_stream [reps] rows   rows only (no K split, no fix-up) and the package's tma rows (its design since)
//
// Why: the register ring reaches 84-87% of a read of the same bytes at 16 tokens (H200, session
// 21) with ~100 KB a SM in flight, more than Little's law asks (~40 KB): the bytes in flight are
// not what is missing. What differs in a TMA stream: long runs of a row a request, one instruction
// per box instead of one per 16 bytes a thread, and no registers held by loads in flight.
//
// The kernel: persistent, CT CTAs per SM, 4 consumer warps + 1 producer warp. The work is the
// flattened (block of 128 weight rows, k-step of SK columns) sequence; CTA c takes the steps
// [T c / P, T (c + 1) / P), so every CTA streams the same bytes whatever the shape (no wave tail),
// and the ring never drains between row blocks (the producer runs ahead across them). A stage:
// SK / 64 TMA boxes of 128 weight rows x 64 columns (16 KB, 128-byte swizzle; BOX2: two of 64
// rows) and as many of the 8 MT x rows; out-of-bounds rows and columns arrive as zeros. REV runs a
// CTA's steps backwards. A row block split over CTAs leaves partials in the workspace
// [block][slot][m][128], which the host adds: this kernel has no fix-up (the package's has).
//
// H200, 2026-11-28 (session 28; docs/journal/kp-fused-mlp.md): 83-86% of a same-bytes copy on
// Llama-3-8B's projections at 16 tokens, 91% gated 4096 / 14336, 95-98% on the 8192 / 28672
// shapes; REV and BOX2 change nothing. One 1-D bulk copy a row instead of boxes (144 a stage): the
// time was steps x ~4.8 us whatever the run length (256 or 512 bytes), ~60 cycles a copy of TMA
// issue. `pkg`: the package kernel 41-46 us against this one's 35 (its fix-up then, the journal says).
// `rows` (2026-11-29): 90% gated 4096 / 14336, 96-97% on the 8192 / 28672 shapes, 84% 4096 -> 14336,
// 40-55% where the tiles are fewer than the CTAs (14336 -> 4096): the package's tma rows since.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include "../csrc/decode_ptx.cuh"
#include "decode_bench.cuh"
#include "../csrc/decode_tma.cu"  // the package kernel, timed beside this one

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>


using namespace decode_bench;  // T, CK, the reference, fills, Timer
using namespace kp_fused_mlp::decode_ptx;
namespace pkg = kp_fused_mlp;

constexpr int kConsumers = 4;
constexpr int kThreads = 32 * (kConsumers + 1);
constexpr int kBlockRows = 32 * kConsumers;

struct Params {
  CUtensorMap w_map;  // [n, k], box 128 rows x 64 columns, 128-byte swizzle
  CUtensorMap x_map;  // [m, k], box 8 MT rows x 64 columns
  float* ws;
  int64_t m, n, k;
  int64_t ksteps, total;  // k-steps a row block, row blocks x ksteps
  int maxseg;
};

// The CTA whose share [T c / P, T (c + 1) / P) holds step q.
__host__ __device__ __forceinline__ int64_t cta_of_step(int64_t q, int64_t total, int64_t ctas) {
  return ((q + 1) * ctas - 1) / total;
}
constexpr int kBox = 64;  // columns a TMA box (128 bytes: the swizzle span)
// A stage, per 64-column box q: 128 weight rows (16 KB), then 8 MT x rows: the package's layout
// (its two 64-row boxes back to back), so that its consume_stage computes it.
__host__ __device__ constexpr int w_box_bytes() { return kBlockRows * kBox * 2; }
__host__ __device__ constexpr int x_box_bytes(int mt) { return 8 * mt * kBox * 2; }
__host__ __device__ constexpr int stage_bytes(int mt, int sk) { return sk / kBox * (w_box_bytes() + x_box_bytes(mt)); }

// f(token, row, value) for each of a thread's accumulators: consume_stage's layout (row within the
// 128-row block: 64 r + 16 warp + g + 8 (i / 2); token 8 mt + 2t + i % 2).
template <int MT, typename F>
__device__ __forceinline__ void for_each_acc(const float (&acc)[2][MT][4], int warp, int g, int t, F&& f) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int r = 0; r < 2; ++r) f(8 * mt + 2 * t + (i & 1), 64 * r + 16 * warp + g + 8 * (i >> 1), acc[r][mt][i]);
}

template <int MT, int SK, int ST, int CT, bool REV = false, bool BOX2 = false>
__global__ void __launch_bounds__(kThreads, CT) stream_kernel(const __grid_constant__ Params p) {
  constexpr int kStage = stage_bytes(MT, SK);
  constexpr int kBoxes = SK / kBox;
  static_assert(SK % kBox == 0 && kStage % 1024 == 0, "stages are whole 1 KB-aligned boxes");
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const SmemRing ring = init_ring<ST>(smem_raw, kStage, kConsumers);
  unsigned char* const smem = ring.stages;
  uint64_t* const full = ring.full;
  uint64_t* const empty = ring.empty;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t begin = p.total * blockIdx.x / gridDim.x, end = p.total * (blockIdx.x + 1) / gridDim.x;

  if (warp == kConsumers) {  // the producer: one lane issues the boxes
    if (lane != 0) return;
    const uint64_t pol_w = evict_first_policy(), pol_x = evict_last_policy();
    int stage = 0;
    uint32_t phase = 0;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t it = REV ? begin + end - 1 - i : i;
      const int64_t b = it / p.ksteps;
      const int k0 = static_cast<int>((it - b * p.ksteps) * SK);
      const int row0 = static_cast<int>(b * kBlockRows);
      mbar_wait(&empty[stage], phase ^ 1);
      unsigned char* st = smem + stage * kStage;
      mbar_arrive_expect(&full[stage], kStage);
#pragma unroll
      for (int q = 0; q < kBoxes; ++q) {
        unsigned char* qs = st + q * (w_box_bytes() + x_box_bytes(MT));
        if constexpr (BOX2) {
          tma_load_2d(qs, &p.w_map, k0 + q * kBox, row0, &full[stage], pol_w);
          tma_load_2d(qs + w_box_bytes() / 2, &p.w_map, k0 + q * kBox, row0 + 64, &full[stage], pol_w);
        } else {
          tma_load_2d(qs, &p.w_map, k0 + q * kBox, row0, &full[stage], pol_w);
        }
        tma_load_2d(qs + w_box_bytes(), &p.x_map, k0 + q * kBox, 0, &full[stage], pol_x);
      }
      if (++stage == ST) stage = 0, phase ^= 1;
    }
    return;
  }

  const int g = lane >> 2, t = lane & 3;
  float acc[2][MT][4];
  auto zero = [&] {
#pragma unroll
    for (int j = 0; j < 2 * MT * 4; ++j) (&acc[0][0][0])[j] = 0.f;
  };
  auto flush = [&](int64_t b) {
    const int64_t slot = blockIdx.x - cta_of_step(b * p.ksteps, p.total, gridDim.x);
    float* ws = p.ws + (b * p.maxseg + slot) * p.m * kBlockRows;
    for_each_acc(acc, warp, g, t, [&](int tok, int row, float v) {
      if (tok < p.m && b * kBlockRows + row < p.n) ws[tok * kBlockRows + row] = v;
    });
  };
  zero();
  int stage = 0;
  uint32_t phase = 0;
  int64_t cur = -1;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t it = REV ? begin + end - 1 - i : i;
    const int64_t b = it / p.ksteps;
    if (b != cur) {
      if (cur >= 0) flush(cur), zero();
      cur = b;
    }
    mbar_wait(&full[stage], phase);
    const unsigned char* st = smem + stage * kStage;
    pkg::consume_stage<T, MT, SK>(st, warp, g, t, acc);
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[stage]);
    if (++stage == ST) stage = 0, phase ^= 1;
  }
  if (cur >= 0) flush(cur);
}

// A bf16 [rows, cols] tensor map, boxes of box_rows x 64 columns, 128-byte swizzle: the package's.
CUtensorMap make_map(const void* base, int64_t rows, int64_t cols, int64_t stride, int box_rows) {
  return pkg::make_map(base, kp::kBF16, rows, cols, stride, box_rows);
}


// ---- rows only (`rows` mode): no K split, so no fix-up ------------------------------------------
// CTA c takes the 16-row tiles [U c / P, U (c + 1) / P) of the weight with all of K, in passes of at
// most 8 tiles (the 4 warps' 128 rows). Balance where N is large: gated 4096 / 14336 (28672 rows)
// is 1792 tiles, 6 or 7 a CTA at 264 CTAs. A pass loads exactly its tiles: boxes of 64, 32 and 16
// rows (one tensor map each); x is re-read every pass.
struct RowsParams {
  CUtensorMap w64, w32, w16;  // [n, k]: boxes of 64 / 32 / 16 rows x 64 columns
  CUtensorMap x_map;          // [m, k]: 8 MT rows x 64 columns
  float* y;                   // [m, n] fp32
  int64_t m, n, k, ksteps, tiles;
};

template <int MT, int SK, int ST, int CT>
__global__ void __launch_bounds__(kThreads, CT) rows_kernel(const __grid_constant__ RowsParams p) {
  constexpr int kStage = stage_bytes(MT, SK);
  constexpr int kBoxes = SK / kBox;
  constexpr int kTileBytes = 16 * 128;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const SmemRing ring = init_ring<ST>(smem_raw, kStage, kConsumers);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t0 = p.tiles * blockIdx.x / gridDim.x, t1 = p.tiles * (blockIdx.x + 1) / gridDim.x;
  const int64_t passes = (t1 - t0 + 7) / 8;
  if (warp == kConsumers) {
    if (lane != 0) return;
    const uint64_t pol_w = evict_first_policy(), pol_x = evict_last_policy();
    int stage = 0;
    uint32_t phase = 0;
    for (int64_t ps = 0; ps < passes; ++ps) {
      const int64_t pt0 = t0 + 8 * ps;
      const int nt = static_cast<int>(std::min<int64_t>(8, t1 - pt0));
      const uint32_t bytes = kBoxes * (nt * kTileBytes + x_box_bytes(MT));
      for (int64_t s = 0; s < p.ksteps; ++s) {
        mbar_wait(&ring.empty[stage], phase ^ 1);
        unsigned char* st = ring.stages + stage * kStage;
        mbar_arrive_expect(&ring.full[stage], bytes);
        for (int q = 0; q < kBoxes; ++q) {
          unsigned char* qs = st + q * (w_box_bytes() + x_box_bytes(MT));
          const int k0 = static_cast<int>(s * SK + q * kBox);
          int tile = 0;
          for (; nt - tile >= 4; tile += 4)
            tma_load_2d(qs + tile * kTileBytes, &p.w64, k0, static_cast<int>(16 * (pt0 + tile)), &ring.full[stage], pol_w);
          if (nt - tile >= 2) {
            tma_load_2d(qs + tile * kTileBytes, &p.w32, k0, static_cast<int>(16 * (pt0 + tile)), &ring.full[stage], pol_w);
            tile += 2;
          }
          if (nt - tile >= 1)
            tma_load_2d(qs + tile * kTileBytes, &p.w16, k0, static_cast<int>(16 * (pt0 + tile)), &ring.full[stage], pol_w);
          tma_load_2d(qs + w_box_bytes(), &p.x_map, k0, 0, &ring.full[stage], pol_x);
        }
        if (++stage == ST) stage = 0, phase ^= 1;
      }
    }
    return;
  }
  const int g = lane >> 2, t = lane & 3;
  float acc[2][MT][4];
  int stage = 0;
  uint32_t phase = 0;
  for (int64_t ps = 0; ps < passes; ++ps) {
    const int64_t pt0 = t0 + 8 * ps;
    const int nt = static_cast<int>(std::min<int64_t>(8, t1 - pt0));
#pragma unroll
    for (int j = 0; j < 2 * MT * 4; ++j) (&acc[0][0][0])[j] = 0.f;
    for (int64_t s = 0; s < p.ksteps; ++s) {
      mbar_wait(&ring.full[stage], phase);
      pkg::consume_stage<T, MT, SK>(ring.stages + stage * kStage, warp, g, t, acc);  // tiles warp, warp + 4
      __syncwarp();
      if (lane == 0) mbar_arrive(&ring.empty[stage]);
      if (++stage == ST) stage = 0, phase ^= 1;
    }
    for_each_acc(acc, warp, g, t, [&](int tok, int row, float v) {  // rows past the pass's tiles: stale
      if (tok < p.m && row < 16 * nt && 16 * pt0 + row < p.n) p.y[tok * p.n + 16 * pt0 + row] = v;
    });
  }
}

struct Variant {
  std::string name;
  int mt, sk, ct, wbox;
  const void* fn;
  size_t smem;
  void (*launch)(dim3, size_t, const Params&);
};

template <int MT, int SK, int ST, int CT, bool REV = false, bool BOX2 = false>
Variant make() {
  auto fn = stream_kernel<MT, SK, ST, CT, REV, BOX2>;
  char name[64];
  std::snprintf(name, sizeof name, "stream m%d sk%d st%d ct%d%s%s", 8 * MT, SK, ST, CT, REV ? " rev" : "", BOX2 ? " box64" : "");
  const size_t smem = static_cast<size_t>(ST) * stage_bytes(MT, SK) + 2 * ST * 8 + 1024;  // + alignment slack
  return {name, MT, SK, CT, BOX2 ? 64 : kBlockRows, reinterpret_cast<const void*>(fn), smem,
          [](dim3 grid, size_t smem, const Params& p) { stream_kernel<MT, SK, ST, CT, REV, BOX2><<<grid, kThreads, smem>>>(p); }};
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 30;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("device %s, %d SMs\n", prop.name, sms);
  std::vector<Variant> vars = {
      make<1, 128, 3, 2>(), make<1, 128, 3, 2, true, false>(), make<1, 128, 3, 2, false, true>(), make<1, 128, 3, 2, true, true>(),
      make<2, 128, 3, 2>(), make<2, 128, 3, 2, true, false>(), make<2, 128, 3, 2, false, true>(), make<2, 128, 3, 2, true, true>(),
  };
  for (auto& v : vars) {
    CK(cudaFuncSetAttribute(v.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(v.smem)));
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, v.fn));
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, v.fn, kThreads, v.smem));
    std::printf("  %-28s regs %3d  local %4zu B  smem %6zu B  CTAs/SM %d\n", v.name.c_str(), fa.numRegs,
                fa.localSizeBytes, v.smem, occ);
    if (occ < v.ct) std::printf("    (fewer CTAs an SM than the variant asks: its grid oversubscribes)\n");
  }

  const Shape shapes[] = {{"4096->14336", 14336, 4096},      {"14336->4096", 4096, 14336},
                          {"gated 4096/14336", 28672, 4096}, {"8192->28672", 28672, 8192},
                          {"28672->8192", 8192, 28672},      {"gated 8192/28672", 57344, 8192},
                          {"odd 1000->3000", 3000, 1000}};
  const int64_t max_w = 57344LL * 8192, max_x = 16LL * 28672;
  T *w, *x;
  float *ws, *ref;
  const int64_t ws_floats = 64LL << 20;
  CK(cudaMalloc(&w, max_w * sizeof(T)));
  CK(cudaMalloc(&x, max_x * sizeof(T)));
  CK(cudaMalloc(&ws, ws_floats * sizeof(float)));
  CK(cudaMalloc(&ref, 16LL * 57344 * sizeof(float)));
  fill(w, max_w, 1u);
  fill(x, max_x, 7u);
  Timer timer(sms);
  auto time_one = [&](const std::function<void()>& f) { return timer.time_one(f); };

  if (argc > 2 && std::string(argv[2]) == "clusters") {  // the tma rows' resident clusters of 2..8 CTAs
    for (int row : {2, 3})
      for (int gated = 0; gated < 2; ++gated)
        for (int s : {2, 3, 4, 5, 6, 7, 8})
          std::printf("%s%s: clusters of %d CTAs resident at once: %d (%d CTAs; %d slots)\n",
                      pkg::DecodeTable::rows[row].name, gated ? " gated" : "", s,
                      pkg::decode_tma_max_clusters(row, kp::kBF16, gated, s, 0),
                      s * pkg::decode_tma_max_clusters(row, kp::kBF16, gated, s, 0),
                      pkg::decode_tma_ctas_per_sm(row, kp::kBF16, gated, 0) * sms);
    return 0;
  }
  if (argc > 2 && std::string(argv[2]) == "rows") {  // rows only, against the stream's m16 kernel
    float* yr;
    T* yp;
    CK(cudaMalloc(&yr, 16LL * 57344 * sizeof(float)));
    CK(cudaMalloc(&yp, 16LL * 57344 * sizeof(T)));
    struct RowsVariant {
      const char* name;
      int mt, ct;
      const void* fn;
      size_t smem;
      void (*launch)(dim3, size_t, const RowsParams&);
    };
    auto rows_variant = [](auto mt_c, auto ct_c, auto st_c, const char* name) {
      constexpr int MT = decltype(mt_c)::value, CT = decltype(ct_c)::value, ST = decltype(st_c)::value;
      const size_t smem = static_cast<size_t>(ST) * stage_bytes(MT, 128) + 16 * ST + 1024;
      auto fn = rows_kernel<MT, 128, ST, CT>;
      CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      return RowsVariant{name, MT, CT, reinterpret_cast<const void*>(fn), smem,
                         [](dim3 grid, size_t smem, const RowsParams& p) { rows_kernel<MT, 128, ST, CT><<<grid, kThreads, smem>>>(p); }};
    };
    using I = std::integral_constant<int, 1>;
    using II = std::integral_constant<int, 2>;
    using III = std::integral_constant<int, 3>;
    using VI = std::integral_constant<int, 6>;
    const RowsVariant rvars[] = {rows_variant(I{}, I{}, VI{}, "rows m8 sk128 st6 ct1"),
                                 rows_variant(I{}, II{}, III{}, "rows m8 sk128 st3 ct2"),
                                 rows_variant(II{}, I{}, VI{}, "rows m16 sk128 st6 ct1"),
                                 rows_variant(II{}, II{}, III{}, "rows m16 sk128 st3 ct2")};
    for_each_case(shapes, {1, 8, 16}, timer, x, w, ref, reps, [&](const Shape& s, int64_t m,
                                                                   const std::vector<float>& h_ref, float read_us,
                                                                   float copy_us) {
        std::vector<float> h_y(m * s.n);
        Runs runs;
        for (const RowsVariant& v : rvars) {
          if (8 * v.mt < m || (v.mt == 2 && m <= 8)) continue;
          const int64_t tiles = (s.n + 15) / 16, ctas = static_cast<int64_t>(sms) * v.ct;
          const RowsParams p{make_map(w, s.n, s.k, s.k, 64), make_map(w, s.n, s.k, s.k, 32), make_map(w, s.n, s.k, s.k, 16),
                             make_map(x, m, s.k, s.k, 8 * v.mt), yr, m, s.n, s.k, (s.k + 127) / 128, tiles};
          CK(cudaMemset(yr, 0xff, m * s.n * 4));  // NaN-poisoned
          v.launch(dim3(static_cast<unsigned>(ctas)), v.smem, p);
          CK(cudaGetLastError());
          CK(cudaMemcpy(h_y.data(), yr, h_y.size() * 4, cudaMemcpyDeviceToHost));
          MaxError e;
          for (size_t i = 0; i < h_y.size(); ++i) e.add(h_y[i], h_ref[i]);
          const double balance = static_cast<double>(tiles) / (ctas * ((tiles + ctas - 1) / ctas));
          char label[160];
          std::snprintf(label, sizeof label, "%-24s balance %3.0f%% %s", v.name, 100 * balance, e.text().c_str());
          runs.add(label, [&v, ctas, p, &time_one] {
            return time_one([&] { v.launch(dim3(static_cast<unsigned>(ctas)), v.smem, p); });
          });
        }
        {  // the package's tma row (csrc/decode_tma.cu): bf16 out, the plan decode_gemv.cu makes
          const int row = m <= 8 ? 2 : 3;
          pkg::DecodeArgs a{x, s.k, w, s.k, nullptr, yp, nullptr, m, s.n, s.k, kp::kBF16, 0, false};
          pkg::DecodePlan pl{};
          pl.row = row, pl.splits = 1, pl.split_steps = static_cast<int>((s.k + 127) / 128), pl.step_k = 128;
          pl.cluster = 1, pl.grid_y = 1, pl.grid_z = 1, pl.ctas_per_sm = 2;
          pl.grid_x = static_cast<int>(std::min<int64_t>(2 * sms, pkg::decode_tma_tiles(s.n, false)));
          CK(cudaMemset(yp, 0xff, m * s.n * 2));
          pkg::decode_tma(a, pl, 0, 0);
          CK(cudaGetLastError());
          std::vector<T> h_p(m * s.n);
          CK(cudaMemcpy(h_p.data(), yp, h_p.size() * 2, cudaMemcpyDeviceToHost));
          MaxError e;
          for (size_t i = 0; i < h_p.size(); ++i) e.add(__bfloat162float(h_p[i]), h_ref[i]);
          char label[160];
          std::snprintf(label, sizeof label, "%-24s              %s", row == 2 ? "package decode_tma_m8" : "package decode_tma_m16",
                        e.text().c_str());
          runs.add(label, [a, pl, &time_one] { return time_one([&] { pkg::decode_tma(a, pl, 0, 0); }); });
        }
        runs.report(m, reps, read_us, copy_us);
    });
    return 0;
  }
  if (argc > 2 && std::string(argv[2]) == "pkg") {  // the package kernel beside this one, tidy and noisy data
    T* y;
    CK(cudaMalloc(&y, 16LL * 57344 * sizeof(T)));
    for (int noisy = 0; noisy < 2; ++noisy) {
      if (noisy) fill(w, max_w, 1u, true);
      for (const Shape& s : {shapes[0], shapes[1]}) {
        const int64_t m = 16;
        const Variant& v = vars[4];  // m16 sk128 st3 ct2
        const int64_t ksteps = (s.k + v.sk - 1) / v.sk, blocks = (s.n + kBlockRows - 1) / kBlockRows;
        const int64_t ctas = static_cast<int64_t>(sms) * v.ct;
        const Params p{make_map(w, s.n, s.k, s.k, v.wbox), make_map(x, m, s.k, s.k, 8 * v.mt), ws, m, s.n, s.k,
                       ksteps, blocks * ksteps, 8};
        pkg::DecodeArgs a{x, s.k, w, s.k, nullptr, y, nullptr, m, s.n, s.k, kp::kBF16, 0, false};
        pkg::DecodePlan pl{};
        pl.row = 3, pl.splits = 1, pl.split_steps = static_cast<int>(ksteps), pl.step_k = 128, pl.cluster = 1;
        pl.grid_x = static_cast<int>(std::min<int64_t>(2 * sms, pkg::decode_tma_tiles(s.n, false)));
        pl.grid_y = 1, pl.grid_z = 1, pl.ctas_per_sm = 2;
        std::vector<float> t0, t1;
        for (int r = 0; r < reps; ++r) {
          t0.push_back(time_one([&] { v.launch(dim3(static_cast<unsigned>(ctas)), v.smem, p); }));
          t1.push_back(time_one([&] { pkg::decode_tma(a, pl, 0, 0); }));
        }
        std::printf("%s %s M=16: tool %.1f us, package %.1f us\n", noisy ? "noisy" : "tidy ", s.name, median(t0), median(t1));
      }
    }
    return 0;
  }
  for_each_case(shapes, {1, 8, 16}, timer, x, w, ref, reps, [&](const Shape& s, int64_t m,
                                                                 const std::vector<float>& h_ref, float read_us,
                                                                 float copy_us) {
      Runs runs;
      for (const Variant& v : vars) {
        if (8 * v.mt < m || (v.mt == 2 && m <= 8)) continue;
        const int64_t ksteps = (s.k + v.sk - 1) / v.sk;
        const int64_t blocks = (s.n + kBlockRows - 1) / kBlockRows;
        const int64_t ctas = static_cast<int64_t>(sms) * v.ct;
        const int64_t total = blocks * ksteps;
        int maxseg = 1;
        for (int64_t b = 0; b < blocks; ++b)
          maxseg = std::max<int64_t>(maxseg, cta_of_step(b * ksteps + ksteps - 1, total, ctas) -
                                                 cta_of_step(b * ksteps, total, ctas) + 1);
        const int64_t need = blocks * maxseg * m * kBlockRows;
        if (need > ws_floats) {
          std::printf("    %s: workspace too small\n", v.name.c_str());
          continue;
        }
        const Params p{make_map(w, s.n, s.k, s.k, v.wbox), make_map(x, m, s.k, s.k, 8 * v.mt), ws, m, s.n, s.k,
                       ksteps, total, maxseg};
        CK(cudaMemset(ws, 0, need * 4));  // slots a block does not use stay 0
        v.launch(dim3(static_cast<unsigned>(ctas)), v.smem, p);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        std::vector<float> h_ws(need);
        CK(cudaMemcpy(h_ws.data(), ws, need * 4, cudaMemcpyDeviceToHost));
        MaxError e;
        for (int64_t tok = 0; tok < m; ++tok)
          for (int64_t row = 0; row < s.n; ++row) {
            const int64_t b = row / kBlockRows, rr = row % kBlockRows;
            double a = 0;
            for (int sl = 0; sl < maxseg; ++sl) a += h_ws[((b * maxseg + sl) * m + tok) * kBlockRows + rr];
            e.add(a, h_ref[tok * s.n + row]);
          }
        char label[160];
        std::snprintf(label, sizeof label, "%-28s segs %d %s", v.name.c_str(), maxseg, e.text().c_str());
        runs.add(label, [&v, ctas, p, &time_one] {
          return time_one([&] { v.launch(dim3(static_cast<unsigned>(ctas)), v.smem, p); });
        });
      }
      runs.report(m, reps, read_us, copy_us);
  });
  return 0;
}
