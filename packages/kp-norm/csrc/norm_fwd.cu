// Forward RMSNorm / LayerNorm (+ fused residual add). One read of x (and res), one write of y (and
// res_out): the row stays in registers between the statistics and the output, so the kernel moves
// the minimum bytes. Rows wider than one CTA's registers are split over a thread-block cluster
// (sm90) whose CTAs combine their partial statistics through distributed shared memory. Without
// clusters, a multi-pass kernel streams such rows twice (the second pass mostly from L2).
#include <algorithm>
#include <string>

#include "kp/error.cuh"
#include "kp/launch.cuh"
#include "norm.cuh"

namespace kp_norm {
namespace {

using kp::Ld;

// ---- register-resident kernel -------------------------------------------------------------------
// Grid: tpr <= 32: ceil(rows / teams-per-CTA) CTAs; else rows * csize CTAs (clusters of csize).
template <typename T, int E, bool VECTOR>
__global__ void __launch_bounds__(kMaxThreads) fwd_kernel(const FwdParams p) {
  using L = Lay<T, E, VECTOR>;
  constexpr int VEC = L::VEC, NV = L::NV;
  __shared__ float red[2][32];  // block_sum buffers (LayerNorm does two reductions)
  __shared__ float slot[3];     // this CTA's partial, read by the cluster's other CTAs

  const int tid = threadIdx.x;
  int lane, crank = 0;
  int64_t row;
  if (p.tpr <= 32) {
    lane = tid & (p.tpr - 1);
    row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / p.tpr) + tid / p.tpr;
  } else {
    lane = tid;
    crank = static_cast<int>(blockIdx.x % p.csize);
    row = blockIdx.x / p.csize;
  }
  // Inactive teams (past the last row) stay to the end: their warp's shuffles need all lanes.
  const bool active = row < p.rows;
  const L lay{crank * p.tpr * E, lane, p.tpr, p.cols};

  // 1. Issue every load of the slice before the first use.
  float v[E];
  const T* xr = row_ptr<T>(p.x, row, p.x_stride);
#pragma unroll
  for (int i = 0; i < NV; ++i) lay.template load<T, Ld::Stream>(xr, i, v + i * VEC, active);
  if (p.has_res) {
    float r[E];
    const void* rr = p.res_f32 ? static_cast<const void*>(row_ptr<float>(p.res, row, p.res_stride))
                               : static_cast<const void*>(row_ptr<T>(p.res, row, p.res_stride));
#pragma unroll
    for (int i = 0; i < NV; ++i) lay.template load_tf<Ld::Stream>(rr, p.res_f32, i, r + i * VEC, active);
    // h = x + res rounded to res_dtype; the rounded h is what torch's unfused code normalizes.
#pragma unroll
    for (int j = 0; j < E; ++j) v[j] = p.res_f32 ? v[j] + r[j] : kp::round_to<T>(v[j] + r[j]);
  }
  if (p.has_res_out) {
    void* ro = p.res_f32 ? static_cast<void*>(row_ptr<float>(p.res_out, row, p.res_out_stride))
                         : static_cast<void*>(row_ptr<T>(p.res_out, row, p.res_out_stride));
#pragma unroll
    for (int i = 0; i < NV; ++i) lay.store_tf(ro, p.res_f32, i, v + i * VEC, active);
  }

  // 2. Statistics. LayerNorm: exact two-pass over the registers (mean, then sum of squared
  //    deviations); across a cluster the CTA partials (sum, M2, n) are merged with Chan's formula.
  const int n_here = max(0, min(p.tpr * E, p.cols - lay.base));  // valid columns of this slice
  float mean = 0.f, m2;
  if (p.is_rms) {
    float a[1] = {0.f};
#pragma unroll
    for (int j = 0; j < E; ++j) a[0] = fmaf(v[j], v[j], a[0]);
    team_sum(a, p.tpr, red[0]);
    m2 = a[0];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (p.csize > 1) {
      if (tid == 0) slot[0] = m2;
      kp::cluster_sync();
      kp::cluster_gather_sum(slot, p.csize, a);
      m2 = a[0];
    }
#endif
  } else {
    float s[1] = {0.f};
#pragma unroll
    for (int j = 0; j < E; ++j) s[0] += v[j];
    team_sum(s, p.tpr, red[0]);
    const float m_loc = n_here > 0 ? s[0] / static_cast<float>(n_here) : 0.f;
    float q[1] = {0.f};
#pragma unroll
    for (int i = 0; i < NV; ++i)
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float d = v[i * VEC + k] - m_loc;
        if (lay.ok(i, k)) q[0] = fmaf(d, d, q[0]);
      }
    team_sum(q, p.tpr, red[1]);
    mean = m_loc;
    m2 = q[0];
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (p.csize > 1) {
      if (tid == 0) {
        slot[0] = s[0];
        slot[1] = q[0];
        slot[2] = static_cast<float>(n_here);
      }
      kp::cluster_sync();
      // Lane r takes rank r's (sum, M2, n); M2 = sum_r M2_r + n_r (mean_r - mean)^2.
      const int l32 = tid & 31;
      const bool has = l32 < p.csize;
      const float sr = has ? kp::ld_dsmem(slot + 0, l32) : 0.f;
      const float qr = has ? kp::ld_dsmem(slot + 1, l32) : 0.f;
      const float nr = has ? kp::ld_dsmem(slot + 2, l32) : 0.f;
      mean = kp::warp_sum(sr) / static_cast<float>(p.cols);
      const float dm = nr > 0.f ? sr / nr - mean : 0.f;
      m2 = kp::warp_sum(fmaf(nr * dm, dm, qr));
    }
#endif
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (p.csize > 1) kp::cluster_arrive();  // done reading the other CTAs' slots; wait before exiting
#endif
  const float rstd = rsqrtf(m2 / static_cast<float>(p.cols) + p.eps);
  if (active && lane == 0 && crank == 0) {
    if (p.rstd) p.rstd[row] = rstd;
    if (p.mean && !p.is_rms) p.mean[row] = mean;
  }

  // 3. y = (h - mean) * rstd * w_eff + b, chunk by chunk (weights come from L1 after the first row).
  T* yr = row_ptr<T>(p.y, row, p.y_stride);
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    float w[VEC], b[VEC], o[VEC];
    if (p.has_w) {
      lay.template load_tf<Ld::RO>(p.w, p.w_f32, i, w, active);
#pragma unroll
      for (int k = 0; k < VEC; ++k) w[k] += p.w_off;
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) w[k] = 1.f;
    }
    if (p.has_b) {
      lay.template load_tf<Ld::RO>(p.b, p.w_f32, i, b, active);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) b[k] = 0.f;
    }
#pragma unroll
    for (int k = 0; k < VEC; ++k) o[k] = fmaf((v[i * VEC + k] - mean) * rstd, w[k], b[k]);
    lay.template store<T>(yr, i, o, active);
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (p.csize > 1) kp::cluster_wait();  // no CTA may exit while another still reads its slot
#endif
}

// ---- multi-pass fallback: one CTA per row, the row streamed in tiles ----------------------------
// Pass 1 computes the statistics (and writes res_out), pass 2 re-reads (res_out, or x + res) and
// writes y. Pass-1 loads keep their lines in L2 for pass 2. Used for rows beyond a 16-CTA cluster
// and on GPUs without clusters.
template <typename T, bool VECTOR>
__global__ void __launch_bounds__(kMultiThreads) fwd_multipass_kernel(const FwdParams p) {
  constexpr int E = 16;
  using L = Lay<T, E, VECTOR>;
  constexpr int VEC = L::VEC, NV = L::NV;
  __shared__ float red[2][32];
  const int tid = threadIdx.x, tpr = blockDim.x, tile = tpr * E;
  const int64_t row = blockIdx.x;
  const T* xr = row_ptr<T>(p.x, row, p.x_stride);
  const void* rr = p.res_f32 ? static_cast<const void*>(row_ptr<float>(p.res, row, p.res_stride))
                             : static_cast<const void*>(row_ptr<T>(p.res, row, p.res_stride));
  void* ro = p.res_f32 ? static_cast<void*>(row_ptr<float>(p.res_out, row, p.res_out_stride))
                       : static_cast<void*>(row_ptr<T>(p.res_out, row, p.res_out_stride));

  // h for chunk i of the tile at `base`: x (+ res, rounded to res_dtype).
  auto load_h = [&](const L& lay, int i, float* h, bool keep_in_l2) {
    if (keep_in_l2) lay.template load<T, Ld::L2>(xr, i, h, true);
    else lay.template load<T, Ld::Stream>(xr, i, h, true);
    if (p.has_res) {
      float r[VEC];
      if (keep_in_l2) lay.template load_tf<Ld::L2>(rr, p.res_f32, i, r, true);
      else lay.template load_tf<Ld::Stream>(rr, p.res_f32, i, r, true);
#pragma unroll
      for (int k = 0; k < VEC; ++k) h[k] = p.res_f32 ? h[k] + r[k] : kp::round_to<T>(h[k] + r[k]);
    }
  };

  // Pass 1. Per thread: RMS sum of squares, or LayerNorm (n, mean, M2) merged tile by tile (Chan).
  float ss = 0.f, tn = 0.f, tmean = 0.f, tm2 = 0.f;
  for (int base = 0; base < p.cols; base += tile) {
    const L lay{base, tid, tpr, p.cols};
    float v[E];
#pragma unroll
    for (int i = 0; i < NV; ++i) load_h(lay, i, v + i * VEC, true);
    if (p.has_res_out) {
#pragma unroll
      for (int i = 0; i < NV; ++i) lay.store_tf(ro, p.res_f32, i, v + i * VEC, true);
    }
    if (p.is_rms) {
#pragma unroll
      for (int j = 0; j < E; ++j) ss = fmaf(v[j], v[j], ss);
    } else {
      float cnt = 0.f, s = 0.f;
#pragma unroll
      for (int i = 0; i < NV; ++i)
#pragma unroll
        for (int k = 0; k < VEC; ++k)
          if (lay.ok(i, k)) cnt += 1.f, s += v[i * VEC + k];
      if (cnt > 0.f) {
        const float m = s / cnt;
        float q = 0.f;
#pragma unroll
        for (int i = 0; i < NV; ++i)
#pragma unroll
          for (int k = 0; k < VEC; ++k) {
            const float d = v[i * VEC + k] - m;
            if (lay.ok(i, k)) q = fmaf(d, d, q);
          }
        const float n = tn + cnt, delta = m - tmean;
        tmean += delta * (cnt / n);
        tm2 += q + delta * delta * (tn * cnt / n);
        tn = n;
      }
    }
  }
  float mean = 0.f, m2;
  if (p.is_rms) {
    float a[1] = {ss};
    kp::block_sum(a, red[0]);
    m2 = a[0];
  } else {
    float a[1] = {tn * tmean};
    kp::block_sum(a, red[0]);
    mean = a[0] / static_cast<float>(p.cols);
    const float d = tmean - mean;
    float q[1] = {fmaf(tn * d, d, tm2)};
    kp::block_sum(q, red[1]);
    m2 = q[0];
  }
  const float rstd = rsqrtf(m2 / static_cast<float>(p.cols) + p.eps);
  if (tid == 0) {
    if (p.rstd) p.rstd[row] = rstd;
    if (p.mean && !p.is_rms) p.mean[row] = mean;
  }

  // Pass 2. Each thread re-reads only elements it wrote or read itself, in the same order.
  T* yr = row_ptr<T>(p.y, row, p.y_stride);
  for (int base = 0; base < p.cols; base += tile) {
    const L lay{base, tid, tpr, p.cols};
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      float h[VEC], w[VEC], b[VEC], o[VEC];
      if (p.has_res_out) lay.template load_tf<Ld::Stream>(ro, p.res_f32, i, h, true);
      else load_h(lay, i, h, false);
      if (p.has_w) {
        lay.template load_tf<Ld::RO>(p.w, p.w_f32, i, w, true);
#pragma unroll
        for (int k = 0; k < VEC; ++k) w[k] += p.w_off;
      } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) w[k] = 1.f;
      }
      if (p.has_b) {
        lay.template load_tf<Ld::RO>(p.b, p.w_f32, i, b, true);
      } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) b[k] = 0.f;
      }
#pragma unroll
      for (int k = 0; k < VEC; ++k) o[k] = fmaf((h[k] - mean) * rstd, w[k], b[k]);
      lay.template store<T>(yr, i, o, true);
    }
  }
}

// ---- host ---------------------------------------------------------------------------------------
using FwdKernel = void (*)(const FwdParams);

template <typename T>
FwdKernel fwd_kernel_for(int e, bool vector) {
  if (!vector) return fwd_kernel<T, 8, false>;
  return e == 8 ? fwd_kernel<T, 8, true> : e == 16 ? fwd_kernel<T, 16, true> : fwd_kernel<T, 32, true>;
}

inline int next_pow2(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}
inline int round_up(int64_t v, int m) { return static_cast<int>((v + m - 1) / m * m); }
inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Config table (NOTES.md). Vector path: E=32 (~64 B of loads in flight a thread) with the fewest
// threads that cover the row; narrow rows use warp or sub-warp teams so no CTA barrier is needed.
// Scalar path: E=8.
template <typename T>
Team pick_fwd(int64_t cols, bool vector, int device) {
  Team t;
  const int emax = vector ? 32 : 8;
  if (cols <= 32 * emax) {  // warp / sub-warp teams, several rows per CTA
    t.e = !vector || cols <= 256 ? 8 : cols <= 512 ? 16 : 32;
    t.tpr = next_pow2(static_cast<int>(cdiv(cols, t.e)));
    t.threads = kWarpTeamCTA;
    return t;
  }
  t.e = emax;
  const int64_t per_cta = static_cast<int64_t>(kMaxThreads) * t.e;
  t.csize = static_cast<int>(cdiv(cols, per_cta));
  if (t.csize > 1) {
    const auto& dev = kp::device_info(device);
    if (dev.major < 9 || t.csize > kMaxCluster) {
      t.multipass = true;
    }
  }
  if (!t.multipass) {
    t.tpr = round_up(cdiv(cols, static_cast<int64_t>(t.csize) * t.e), 32);
    t.threads = t.tpr;
    if (t.csize > 1 &&
        kp::max_active_clusters(reinterpret_cast<const void*>(fwd_kernel_for<T>(t.e, vector)), device, t.threads, 0,
                                t.csize) < 1)
      t.multipass = true;
  }
  if (t.multipass) {
    t = Team{};
    t.multipass = true;
    t.threads = kMultiThreads;
  }
  return t;
}

template <typename T>
void launch_fwd(const FwdArgs& a, int device, cudaStream_t stream) {
  constexpr int VEC = 16 / sizeof(T);
  const int ws = kp::dtype_size(a.weight_dtype), rs = kp::dtype_size(a.res_dtype);
  const bool vector = a.cols % VEC == 0 && kp::rows_aligned16(a.x, a.x_stride, sizeof(T)) &&
                      kp::rows_aligned16(a.y, a.y_stride, sizeof(T)) && kp::rows_aligned16(a.res, a.res_stride, rs) &&
                      kp::rows_aligned16(a.res_out, a.res_out_stride, rs) && kp::rows_aligned16(a.w, 0, ws) &&
                      kp::rows_aligned16(a.b, 0, ws);
  const Team t = pick_fwd<T>(a.cols, vector, device);

  FwdParams p;
  p.x = a.x; p.res = a.res; p.w = a.w; p.b = a.b;
  p.y = a.y; p.res_out = a.res_out; p.mean = a.mean; p.rstd = a.rstd;
  p.x_stride = a.x_stride; p.res_stride = a.res_stride; p.y_stride = a.y_stride; p.res_out_stride = a.res_out_stride;
  p.rows = a.rows; p.cols = static_cast<int>(a.cols);
  p.tpr = t.tpr; p.csize = t.csize;
  p.eps = a.eps; p.w_off = a.weight_offset;
  p.is_rms = a.is_rms;
  p.w_f32 = a.weight_dtype == kp::kF32;
  p.res_f32 = a.res_dtype == kp::kF32;
  p.has_w = a.w != nullptr; p.has_b = a.b != nullptr;
  p.has_res = a.res != nullptr; p.has_res_out = a.res_out != nullptr;

  if (t.multipass) {
    KP_CHECK_ARG(a.rows <= INT32_MAX, "too many rows for one launch");
    auto k = vector ? fwd_multipass_kernel<T, true> : fwd_multipass_kernel<T, false>;
    p.tpr = t.threads;
    kp::launch(k, device, dim3(static_cast<unsigned>(a.rows)), dim3(t.threads), 0, stream, 1, p);
    return;
  }
  const int64_t grid = t.tpr <= 32 ? cdiv(a.rows, t.tpc()) : a.rows * t.csize;
  KP_CHECK_ARG(grid <= INT32_MAX, "too many rows for one launch");
  kp::launch(fwd_kernel_for<T>(t.e, vector), device, dim3(static_cast<unsigned>(grid)), dim3(t.threads), 0, stream,
             t.csize, p);
}

void check_rows(const char* name, const void* ptr, int64_t stride, int64_t rows, int64_t cols) {
  KP_CHECK_ARG(ptr != nullptr, std::string(name) + " must not be null");
  KP_CHECK_ARG(rows <= 1 || stride >= cols,
               std::string(name) + "_stride (" + std::to_string(stride) + ") must be >= cols (" +
                   std::to_string(cols) + ")");
}

}  // namespace

void norm_fwd(const FwdArgs& a, int device, cudaStream_t stream) {
  KP_CHECK_ARG(kp::valid_dtype(a.act_dtype), "act_dtype: unsupported dtype code " + std::to_string(a.act_dtype));
  KP_CHECK_ARG(a.weight_dtype == a.act_dtype || a.weight_dtype == kp::kF32,
               "weight_dtype must be act_dtype or float32 (code " + std::to_string(a.weight_dtype) + ")");
  KP_CHECK_ARG(a.res_dtype == a.act_dtype || a.res_dtype == kp::kF32,
               "res_dtype must be act_dtype or float32 (code " + std::to_string(a.res_dtype) + ")");
  KP_CHECK_ARG(a.rows >= 0, "rows must be >= 0");
  KP_CHECK_ARG(a.cols >= 1 && a.cols <= (int64_t{1} << 30), "cols must be in [1, 2^30]");
  check_rows("x", a.x, a.x_stride, a.rows, a.cols);
  check_rows("y", a.y, a.y_stride, a.rows, a.cols);
  if (a.res) check_rows("res", a.res, a.res_stride, a.rows, a.cols);
  if (a.res_out) check_rows("res_out", a.res_out, a.res_out_stride, a.rows, a.cols);
  if (a.rows == 0) return;
  kp::DeviceGuard guard(device);
  KP_DISPATCH_DTYPE(a.act_dtype, T, launch_fwd<T>(a, device, stream));
}

const void* probe_kernel() { return reinterpret_cast<const void*>(fwd_kernel<float, 8, false>); }

}  // namespace kp_norm
