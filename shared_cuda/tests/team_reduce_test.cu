// Device test of the team reductions (kp/row.cuh team_reduce / team_sum / team_max / team_absmax,
// kp/reduce.cuh warp_reduce / block_reduce / block_reduce_shfl): standalone CUDA, no torch.
//
//   nvcc -std=c++17 -O3 -arch=native -Ishared_cuda/include shared_cuda/tests/team_reduce_test.cu -o t && ./t
//   (tools/gpu_check.sh shared does this)
//
// Rows of random values (both signs, magnitudes 2^-10 .. 2^10) plus special rows: one with a NaN,
// one with a -inf, one of negatives only, one of +-0 only. For each op (Sum, Max, AbsMax) and team
// size (4, 8, 16, 32: sub-warp and warp teams in 256-thread CTAs; 64, 256, 512: CTA teams) it runs
// the compile-time-geometry path (team_sum/_max/_absmax<FT>), the run-time one (team_reduce<Op>
// with FT = 0) and, for CTA teams, block_reduce<Op, NW>; each thread holds N = 2 values (two rows
// reduced at once) of E = 1 or 7 elements each, and a persistent loop alternates two smem buffers.
// Checks: every lane's result against the host (sum within 1e-5 of the row's absolute sum, max and
// absmax exact, NaN rows NaN: the documented propagation) and all lanes of a team the same bits.
// Exit code 0 when everything passes; 1 with a message otherwise.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "kp/reduce.cuh"
#include "kp/row.cuh"

#define CK(expr)                                                                                    \
  do {                                                                                              \
    const cudaError_t err_ = (expr);                                                                \
    if (err_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(err_)); \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

namespace {

constexpr int N = 2;        // values a thread reduces at once (rows a team reduces at once)
constexpr int ROWS = 389;   // row pairs: not a multiple of any team count (masked last iteration)
constexpr int GRID = 6;     // CTAs: a persistent grid, each team takes several row pairs
constexpr int SUB_CTA = 256;

enum class Path { Named, Runtime, Block };

// Row pair r, value k, lives at x[((r * N + k) * cols]; element e of lane l is column e * tpr + l.
template <class Op, int TPR, Path P>
__global__ void team_kernel(const float* __restrict__ x, float* __restrict__ out, int rows, int cols, int E, int tpr) {
  // tpr == TPR, a kernel argument: the run-time path (FT = 0) does not see it as a constant
  __shared__ float red[2][32 * N];
  const int tid = threadIdx.x;
  const int lane = TPR <= 32 ? (tid & (TPR - 1)) : tid;
  const int team = TPR <= 32 ? tid / TPR : 0;
  const int tpc = TPR <= 32 ? blockDim.x / TPR : 1;
  const int my_team = blockIdx.x * tpc + team;
  const int nteams = gridDim.x * tpc;
  const int iters = (rows + nteams - 1) / nteams;  // uniform: every thread runs every iteration
  for (int it = 0; it < iters; ++it) {
    const int r = my_team + it * nteams;
    const bool active = r < rows;
    float v[N];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      // The thread's own elements: the first as it is (E = 1 tests the op's lift on entry), the rest
      // combined in column order. Inactive teams hold the identity.
      v[k] = Op::identity();
      if (active) {
        const float* row = x + (static_cast<int64_t>(r) * N + k) * cols;
        v[k] = row[lane];
        for (int e = 1; e < E; ++e) v[k] = Op::combine(v[k], row[e * TPR + lane]);
      }
    }
    float* buf = red[it & 1];
    if constexpr (P == Path::Named) {
      if constexpr (std::is_same_v<Op, kp::Sum>) kp::team_sum<TPR>(v, tpr, buf);
      else if constexpr (std::is_same_v<Op, kp::Max>) kp::team_max<TPR>(v, tpr, buf);
      else kp::team_absmax<TPR>(v, tpr, buf);
    } else if constexpr (P == Path::Runtime) {
      kp::team_reduce<Op>(v, tpr, buf);
    } else {
      static_assert(TPR > 32, "block_reduce: CTA teams");
      kp::block_reduce<Op, TPR / 32>(v, buf);
    }
    if (active) {
#pragma unroll
      for (int k = 0; k < N; ++k) out[(static_cast<int64_t>(r) * N + k) * TPR + lane] = v[k];
    }
  }
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Host references. Max orders -0 < +0 (as PTX max does); NaN propagates.
float host_max(const float* a, int n, bool absval) {
  float m = absval ? 0.f : -INFINITY;
  for (int i = 0; i < n; ++i) {
    const float y = absval ? std::fabs(a[i]) : a[i];
    if (std::isnan(y)) return NAN;
    if (y > m || (y == 0.f && m == 0.f && !std::signbit(y))) m = y;
  }
  return m;
}

enum class OpId { Sum, Max, AbsMax };
const char* op_name(OpId o) { return o == OpId::Sum ? "sum" : o == OpId::Max ? "max" : "absmax"; }
const char* path_name(Path p) {
  return p == Path::Named ? "team_<op><FT>" : p == Path::Runtime ? "team_reduce<Op>(FT=0)" : "block_reduce<Op,NW>";
}

int failures = 0;
void fail(const char* what, OpId o, int tpr, Path p, int E, int r, int k, int lane, float got, float want) {
  if (++failures <= 20)
    std::fprintf(stderr, "FAIL %s: op %s, team %d, %s, E %d, row pair %d value %d lane %d: got %.9g (0x%08x), want %.9g\n",
                 what, op_name(o), tpr, path_name(p), E, r, k, lane, got, bits(got), want);
}

template <class Op, int TPR, Path P>
void run(OpId o, int E, std::mt19937& rng) {
  const int cols = TPR * E;
  const size_t nx = static_cast<size_t>(ROWS) * N * cols;
  std::vector<float> hx(nx);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::uniform_int_distribution<int> sc(-10, 10);
  for (int rr = 0; rr < ROWS * N; ++rr) {
    float* row = hx.data() + static_cast<size_t>(rr) * cols;
    const float scale = std::ldexp(1.f, sc(rng));
    for (int c = 0; c < cols; ++c) row[c] = u(rng) * scale;
    const int at = static_cast<int>(rng() % cols);
    switch (rr) {
      case 0: row[at] = NAN; break;                                          // NaN propagates
      case 3: row[at] = -INFINITY; break;                                    // absmax +inf, max finite
      case 5: for (int c = 0; c < cols; ++c) row[c] = -std::fabs(row[c]) - 1e-3f; break;  // max < 0
      case 6: for (int c = 0; c < cols; ++c) row[c] = (rng() & 1) ? 0.f : -0.f; break;   // signed zeros
      default: break;
    }
  }
  const int threads = TPR <= 32 ? SUB_CTA : TPR;
  const size_t nout = static_cast<size_t>(ROWS) * N * TPR;
  float *dx = nullptr, *dout = nullptr;
  CK(cudaMalloc(&dx, nx * sizeof(float)));
  CK(cudaMalloc(&dout, nout * sizeof(float)));
  CK(cudaMemcpy(dx, hx.data(), nx * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemset(dout, 0xff, nout * sizeof(float)));  // NaN bits: an unwritten lane cannot pass
  team_kernel<Op, TPR, P><<<GRID, threads>>>(dx, dout, ROWS, cols, E, TPR);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<float> hout(nout);
  CK(cudaMemcpy(hout.data(), dout, nout * sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaFree(dx));
  CK(cudaFree(dout));

  for (int r = 0; r < ROWS; ++r) {
    for (int k = 0; k < N; ++k) {
      const float* row = hx.data() + (static_cast<size_t>(r) * N + k) * cols;
      const float* res = hout.data() + (static_cast<size_t>(r) * N + k) * TPR;
      bool has_nan = false;
      double s = 0, sabs = 0;
      for (int c = 0; c < cols; ++c) {
        has_nan |= std::isnan(row[c]);
        s += row[c];
        sabs += std::fabs(static_cast<double>(row[c]));
      }
      const float want = o == OpId::Sum ? static_cast<float>(s) : host_max(row, cols, o == OpId::AbsMax);
      for (int l = 0; l < TPR; ++l) {
        const float got = res[l];
        if (bits(got) != bits(res[0])) fail("lanes differ", o, TPR, P, E, r, k, l, got, res[0]);
        bool ok;
        if (has_nan) ok = std::isnan(got);
        else if (std::isinf(want)) ok = got == want;
        else if (o == OpId::Sum) ok = std::fabs(static_cast<double>(got) - s) <= 1e-5 * std::fmax(std::fabs(s), sabs);
        else ok = bits(got) == bits(want);
        if (!ok) fail("wrong value", o, TPR, P, E, r, k, l, got, want);
      }
    }
  }
}

template <class Op, int TPR>
void run_team(OpId o, std::mt19937& rng) {
  for (int E : {1, 7}) {
    run<Op, TPR, Path::Named>(o, E, rng);
    run<Op, TPR, Path::Runtime>(o, E, rng);
    if constexpr (TPR > 32) run<Op, TPR, Path::Block>(o, E, rng);
  }
}

template <class Op>
void run_op(OpId o, std::mt19937& rng) {
  run_team<Op, 4>(o, rng);
  run_team<Op, 8>(o, rng);
  run_team<Op, 16>(o, rng);
  run_team<Op, 32>(o, rng);
  run_team<Op, 64>(o, rng);
  run_team<Op, 256>(o, rng);
  run_team<Op, 512>(o, rng);
}

}  // namespace

int main() {
  int dev = 0;
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("team_reduce_test on %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  std::mt19937 rng(12345);
  run_op<kp::Sum>(OpId::Sum, rng);
  run_op<kp::Max>(OpId::Max, rng);
  run_op<kp::AbsMax>(OpId::AbsMax, rng);
  const int configs = 3 * (4 * 2 * 2 + 3 * 2 * 3);
  if (failures) {
    std::fprintf(stderr, "team_reduce_test: FAILED (%d mismatches)\n", failures);
    return 1;
  }
  std::printf("team_reduce_test: OK (%d configurations: sum, max, absmax x teams 4-512 x paths x E)\n", configs);
  return 0;
}
