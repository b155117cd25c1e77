// kp_fused_mlp._C: the pybind11 face of the kernels. Pointers and streams arrive as Python ints,
// sizes and row strides (in elements) as 64-bit ints (docs/architecture.md). No libtorch.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "decode_gemv.cuh"
#include "decode_mlp.cuh"
#include "decode_table.h"
#include "gated.cuh"
#include "glu.cuh"
#include "kp/py_module.h"
#include "kp/gemm/scheduler.h"
#include "linear_act.cuh"
#include "linear_act_bwd.cuh"

namespace py = pybind11;
using kp_fused_mlp::GluArgs;

using kp::py_ptr;
using kp::py_stream;

PYBIND11_MODULE(_C, m) {
  m.doc() = "kp-fused-mlp native CUDA kernels (SwiGLU, GeGLU; linear + bias + activation and the gated linear on an "
            "sm90a GEMM; the decode kernels of linear_act and gated_linear)";
  kp::add_common(m, kp_fused_mlp::probe_kernel());

  m.def(
      "glu_fwd",
      [](uintptr_t gate, int64_t gate_stride, uintptr_t up, int64_t up_stride, uintptr_t y, int64_t rows,
         int64_t cols, int act, int dtype, int device, uintptr_t stream) {
        GluArgs a{py_ptr(gate), gate_stride, py_ptr(up), up_stride, nullptr, 0, py_ptr<void*>(y), nullptr, cols,
                  rows,         cols,        dtype,      act};
        kp_fused_mlp::glu_fwd(a, device, py_stream(stream));
      },
      py::arg("gate"), py::arg("gate_stride"), py::arg("up"), py::arg("up_stride"), py::arg("y"), py::arg("rows"),
      py::arg("cols"), py::arg("act"), py::arg("dtype"), py::arg("device"), py::arg("stream"),
      "y = act(gate) * up over [rows, cols] (act: kp::gemm::Act code, silu, gelu or gelu_tanh); y contiguous");
  m.def(
      "glu_bwd",
      [](uintptr_t dy, int64_t dy_stride, uintptr_t gate, int64_t gate_stride, uintptr_t up, int64_t up_stride,
         uintptr_t dgate, uintptr_t dup, int64_t out_stride, int64_t rows, int64_t cols, int act, int dtype,
         int device, uintptr_t stream) {
        GluArgs a{py_ptr(gate),         gate_stride, py_ptr(up), up_stride, py_ptr(dy), dy_stride,
                  py_ptr<void*>(dgate), py_ptr<void*>(dup), out_stride, rows, cols, dtype, act};
        kp_fused_mlp::glu_bwd(a, device, py_stream(stream));
      },
      py::arg("dy"), py::arg("dy_stride"), py::arg("gate"), py::arg("gate_stride"), py::arg("up"),
      py::arg("up_stride"), py::arg("dgate"), py::arg("dup"), py::arg("out_stride"), py::arg("rows"),
      py::arg("cols"), py::arg("act"), py::arg("dtype"), py::arg("device"), py::arg("stream"),
      "dgate, dup of y = act(gate) * up; both with row stride out_stride (the halves of one packed gradient: "
      "2 * cols)");

  m.def(
      "linear_act",
      [](uintptr_t x, int64_t x_stride, uintptr_t w, int64_t w_stride, uintptr_t bias, uintptr_t y, int64_t m_,
         int64_t n, int64_t k, int dtype, int act, int config, int device, uintptr_t stream, uintptr_t ws,
         int splits, int decode_row) {
        kp_fused_mlp::LinearActArgs a{py_ptr(x), x_stride, py_ptr(w), w_stride, py_ptr(bias), py_ptr<void*>(y),
                                      m_, n, k, dtype, act, py_ptr<float*>(ws), splits, decode_row};
        kp_fused_mlp::linear_act(a, config, device, py_stream(stream));
      },
      py::arg("x"), py::arg("x_stride"), py::arg("w"), py::arg("w_stride"), py::arg("bias"), py::arg("y"),
      py::arg("m"), py::arg("n"), py::arg("k"), py::arg("dtype"), py::arg("act"), py::arg("config"),
      py::arg("device"), py::arg("stream"), py::arg("ws") = 0, py::arg("splits") = 0, py::arg("decode_row") = -1,
      "y[m, n] = act(x[m, k] @ w[n, k]^T + bias[n]) (bias 0: none; act: kp::gemm::Act code; config: a GEMM "
      "table row or the decode config, -1: gemm_plan's pick); y contiguous. The decode config's K splits: "
      "splits (0: its table's), with an fp32 workspace ws of decode_plan's bytes when they are > 1; its "
      "table row: decode_row (-1: by M)");
  m.def(
      "gated_decode",
      [](uintptr_t x, int64_t x_stride, uintptr_t w, int64_t w_stride, uintptr_t bias, uintptr_t y, int64_t m_,
         int64_t inter, int64_t k, int dtype, int act, uintptr_t ws, int splits, int device, uintptr_t stream,
         int decode_row) {
        kp_fused_mlp::DecodeArgs a{py_ptr(x), x_stride, py_ptr(w), w_stride, py_ptr(bias), py_ptr<void*>(y),
                                   py_ptr<float*>(ws), m_, inter, k, dtype, act, true};
        kp_fused_mlp::decode_gemv(a, splits, decode_row, device, py_stream(stream));
      },
      py::arg("x"), py::arg("x_stride"), py::arg("w"), py::arg("w_stride"), py::arg("bias"), py::arg("y"),
      py::arg("m"), py::arg("inter"), py::arg("k"), py::arg("dtype"), py::arg("act"), py::arg("ws"),
      py::arg("splits"), py::arg("device"), py::arg("stream"), py::arg("decode_row") = -1,
      "y[m, inter] = act(x Wg^T + bg) * (x Wu^T + bu) with w = [Wg; Wu] [2 inter, k], bias [2 inter] or 0 "
      "(act: silu or gelu_tanh); the decode kernel (splits 0: its table's; ws as for linear_act; decode_row "
      "-1: by M)");
  m.def(
      "gated_mlp_decode",
      [](uintptr_t x, int64_t x_stride, uintptr_t w_gate_up, int64_t w_gate_up_stride, uintptr_t b_gate_up,
         uintptr_t w_down, int64_t w_down_stride, uintptr_t b_down, uintptr_t y, uintptr_t h, uintptr_t partials,
         uintptr_t counter, int64_t m_, int64_t hidden, int64_t inter, int dtype, int act, int device,
         uintptr_t stream, int row, int splits) {
        const kp_fused_mlp::MlpDecodeArgs a{py_ptr(x), x_stride, py_ptr(w_gate_up), w_gate_up_stride, py_ptr(b_gate_up),
                                            py_ptr(w_down), w_down_stride, py_ptr(b_down), py_ptr<void*>(y),
                                            py_ptr<void*>(h), py_ptr<float*>(partials),
                                            py_ptr<unsigned long long*>(counter), m_, hidden, inter, dtype, act};
        kp_fused_mlp::gated_mlp_decode(a, row, splits, device, py_stream(stream));
      },
      py::arg("x"), py::arg("x_stride"), py::arg("w_gate_up"), py::arg("w_gate_up_stride"), py::arg("b_gate_up"),
      py::arg("w_down"), py::arg("w_down_stride"), py::arg("b_down"), py::arg("y"), py::arg("h"), py::arg("partials"),
      py::arg("counter"), py::arg("m"), py::arg("hidden"), py::arg("inter"), py::arg("dtype"), py::arg("act"),
      py::arg("device"), py::arg("stream"), py::arg("row") = -1, py::arg("splits") = 0,
      "y[m, hidden] = (act(x Wg^T + bg) * (x Wu^T + bu)) Wd^T + bd in one persistent kernel (sm90; csrc/decode_mlp.cu): "
      "h [m, inter] and partials (gated_mlp_decode_plan's bytes) are workspaces, counter an 8-byte grid-barrier "
      "counter of the stream, zero before its first call; row >= 0 forces a tma row of the decode table, splits > 0 the down projection's K "
      "splits");
  m.def(
      "gated_mlp_decode_plan",
      [](int64_t m_, int64_t hidden, int64_t inter, int dtype, int device, int row, int splits) {
        const auto p = kp_fused_mlp::gated_mlp_decode_plan(m_, hidden, inter, dtype, row, splits, device);
        py::dict d;
        d["row"] = p.row >= 0 ? kp_fused_mlp::decode_row_names()[p.row] : std::string();
        d["why"] = std::string(p.why ? p.why : "");
        d["grid"] = p.grid;
        d["blocks"] = p.blocks;
        d["splits"] = p.splits;
        d["h_bytes"] = p.h_bytes;
        d["partial_bytes"] = p.partial_bytes;
        return d;
      },
      py::arg("m"), py::arg("hidden"), py::arg("inter"), py::arg("dtype"), py::arg("device"), py::arg("row") = -1,
      py::arg("splits") = 0,
      "the fused GatedMLP decode kernel's plan (row: '' when it does not serve the call, why says why; grid, "
      "blocks and splits of the down projection, workspace bytes)");
  m.def(
      "decode_plan",
      [](int64_t m_, int64_t n_out, int64_t k, bool gated, int dtype, int splits, int device, int row) {
        const auto p = kp_fused_mlp::decode_plan(m_, n_out, k, gated, dtype, splits, row, device);
        py::dict d;
        d["row"] = kp_fused_mlp::decode_row_names()[p.row];
        d["splits"] = p.splits;
        d["split_steps"] = p.split_steps;
        d["step_k"] = p.step_k;
        d["cluster"] = p.cluster;
        d["grid"] = py::make_tuple(p.grid_x, p.grid_y, p.grid_z);
        d["ctas_per_sm"] = p.ctas_per_sm;
        d["workspace_bytes"] = kp_fused_mlp::decode_workspace_bytes(p, m_, n_out, gated);
        return d;
      },
      py::arg("m"), py::arg("n_out"), py::arg("k"), py::arg("gated"), py::arg("dtype"), py::arg("splits"),
      py::arg("device"), py::arg("row") = -1,
      "the decode kernel's plan of a call (row, splits, split_steps, step_k, cluster, grid, ctas_per_sm, workspace_bytes); "
      "splits > 0 forces that many, row >= 0 that table row");
  m.def("decode_serves_linear", &kp_fused_mlp::decode_serves, py::arg("m"), py::arg("n"), py::arg("k"),
        "whether linear_act's plan runs a call of this shape on the decode kernels (else the GEMM)");
  m.def(
      "decode_cuts",
      [] {
        py::list out;
        for (const auto& c : kp_fused_mlp::DecodeCutTable::rows) out.append(py::make_tuple(c.max_n_per_k_pct, c.max_m));
        return out;
      },
      "decode_table.h's DecodeCut rows, (max_n_per_k_pct, max_m): the first with 100 N / K <= max_n_per_k_pct "
      "gives the most tokens linear_act runs on the decode kernels");
  m.def("decode_configs", &kp_fused_mlp::decode_row_names, "the rows of the decode table (csrc/decode_table.h)");
  m.def("decode_max_m", &kp_fused_mlp::decode_max_m, "the most tokens the decode kernel takes by default");
  m.def("decode_gated_max_m", &kp_fused_mlp::decode_gated_max_m,
        "the most tokens gated_linear runs on the decode kernels (decode_table.h's gated cut)");
  m.def("decode_device_problem", &kp_fused_mlp::decode_device_problem, py::arg("device"),
        "'' when the device can run the decode kernels (sm80+), else why not");
  m.def("gemm_configs", &kp_fused_mlp::gemm_config_names, "the rows of the GEMM table (csrc/gemm_table.h)");
  m.def("gemm_plan", &kp_fused_mlp::gemm_plan, py::arg("m"), py::arg("n"), py::arg("k"),
        "the GEMM table row a call of this shape gets");
  m.def(
      "linear_act_save",
      [](uintptr_t x, int64_t x_stride, uintptr_t w, int64_t w_stride, uintptr_t bias, uintptr_t y, uintptr_t z,
         int64_t m_, int64_t n, int64_t k, int dtype, int act, int config, int device, uintptr_t stream) {
        kp_fused_mlp::LinearActArgs a{py_ptr(x), x_stride, py_ptr(w), w_stride, py_ptr(bias), py_ptr<void*>(y),
                                      m_, n, k, dtype, act};
        kp_fused_mlp::linear_act_save(a, py_ptr<void*>(z), config, device, py_stream(stream));
      },
      py::arg("x"), py::arg("x_stride"), py::arg("w"), py::arg("w_stride"), py::arg("bias"), py::arg("y"),
      py::arg("z"), py::arg("m"), py::arg("n"), py::arg("k"), py::arg("dtype"), py::arg("act"), py::arg("config"),
      py::arg("device"), py::arg("stream"),
      "linear_act's training forward: y as linear_act, and z[m, n] = x @ w^T + bias (contiguous) saved for the "
      "backward (config: a training row, -1: the pick)");
  auto grad_gemm = [](auto fn) {
    return [fn](uintptr_t dp, int64_t dp_stride, uintptr_t other, int64_t other_stride, uintptr_t out, int64_t m_,
                int64_t n, int64_t k, int dtype, int config, int device, uintptr_t stream) {
      kp_fused_mlp::GradGemmArgs a{py_ptr(dp), dp_stride, py_ptr(other), other_stride, py_ptr<void*>(out), m_, n, k,
                                   dtype};
      fn(a, config, device, py_stream(stream));
    };
  };
  m.def("linear_act_dgrad", grad_gemm(&kp_fused_mlp::linear_act_dgrad), py::arg("dp"), py::arg("dp_stride"),
        py::arg("w"), py::arg("w_stride"), py::arg("dx"), py::arg("m"), py::arg("n"), py::arg("k"), py::arg("dtype"),
        py::arg("config"), py::arg("device"), py::arg("stream"),
        "dx[m, k] = dp[m, n] @ w[n, k] (w read in place, MN-major); dx contiguous");
  m.def("linear_act_wgrad", grad_gemm(&kp_fused_mlp::linear_act_wgrad), py::arg("dp"), py::arg("dp_stride"),
        py::arg("x"), py::arg("x_stride"), py::arg("dw"), py::arg("m"), py::arg("n"), py::arg("k"), py::arg("dtype"),
        py::arg("config"), py::arg("device"), py::arg("stream"),
        "dw[n, k] = dp[m, n]^T @ x[m, k] (both read in place, MN-major; fp32 accumulation, one rounding); dw "
        "contiguous");
  m.def(
      "linear_act_dpre",
      [](uintptr_t dy, int64_t dy_stride, uintptr_t pre, int64_t pre_stride, uintptr_t dp, uintptr_t partial,
         uintptr_t db, int64_t m_, int64_t n, int dtype, int act, int device, uintptr_t stream) {
        kp_fused_mlp::DpreArgs a{py_ptr(dy),         dy_stride,          py_ptr(pre), pre_stride, py_ptr<void*>(dp),
                                 py_ptr<float*>(partial), py_ptr<void*>(db), m_,          n,          dtype,
                                 act};
        kp_fused_mlp::linear_act_dpre(a, device, py_stream(stream));
      },
      py::arg("dy"), py::arg("dy_stride"), py::arg("pre"), py::arg("pre_stride"), py::arg("dp"), py::arg("partial"),
      py::arg("db"), py::arg("m"), py::arg("n"), py::arg("dtype"), py::arg("act"), py::arg("device"),
      py::arg("stream"),
      "dp = dy * act'(pre) (0: not written) and db = column sums of it in fp32 through partial (fp32 "
      "[dpre_partial_rows(m, n), n]), rounded once (0: none)");
  m.def("dpre_partial_rows", &kp_fused_mlp::dpre_partial_rows, py::arg("m"), py::arg("n"), py::arg("device"),
        "rows of the fp32 scratch linear_act_dpre needs for the bias gradient");
  m.def("gemm_bwd_configs", &kp_fused_mlp::gemm_bwd_configs, "the GEMM table rows that have training kernels");
  m.def("gemm_bwd_plan", &kp_fused_mlp::gemm_bwd_plan, py::arg("m"), py::arg("n") = 0, py::arg("k") = 0,
        py::arg("job") = 0,
        "the training row a GEMM with an m x n output reducing over k gets (n, k 0: among the rows for any width or "
        "depth); job 0 the saving forward, 1 dX, 2 dW (each its own rule)");
  m.def(
      "gemm_scheduler_override",
      [](int max_swizzle, int raster) { kp::gemm::set_scheduler_override(max_swizzle, raster); },
      py::arg("max_swizzle"), py::arg("raster"),
      "every GEMM of this module from now on: the persistent scheduler's max_swizzle (0: the table row's; 1, 2, 4, "
      "8) and raster order (-1: the row's; 0 heuristic, 1 along M, 2 along N)");
  m.def(
      "gemm_scheduler",
      []() { return py::make_tuple(kp::gemm::scheduler_swizzle_override(), kp::gemm::scheduler_raster_override()); },
      "(max_swizzle, raster) as overridden: (0, -1) when the table rows' own apply");
  m.def("gemm_device_problem", &kp_fused_mlp::gemm_device_problem, py::arg("device"),
        "'' when the device can run linear_act's sm90a GEMM, else why not");

  m.def(
      "gated_linear_fwd",
      [](uintptr_t x, int64_t x_stride, uintptr_t w, int64_t w_stride, uintptr_t bias, uintptr_t h, int64_t h_stride,
         uintptr_t pre, int64_t pre_stride, int64_t m_, int64_t inter, int64_t k, int dtype, int act, int config,
         int device, uintptr_t stream, int swizzle, int raster) {
        const kp::gemm::GatedProblem p{py_ptr(x), x_stride, py_ptr(w), w_stride, py_ptr(bias), py_ptr<void*>(h),
                                       h_stride, py_ptr<void*>(pre), pre_stride, m_, inter, k, dtype, act};
        kp_fused_mlp::gated_linear_fwd(p, config, device, py_stream(stream), {swizzle, raster});
      },
      py::arg("x"), py::arg("x_stride"), py::arg("w"), py::arg("w_stride"), py::arg("bias"), py::arg("h"),
      py::arg("h_stride"), py::arg("pre"), py::arg("pre_stride"), py::arg("m"), py::arg("inter"), py::arg("k"),
      py::arg("dtype"), py::arg("act"), py::arg("config"), py::arg("device"), py::arg("stream"),
      py::arg("swizzle") = 0, py::arg("raster") = -1,
      "h[m, inter] = act(x @ Wg^T + bg) * (x @ Wu^T + bu), w: [Wg; Wu] interleaved in 8-row blocks "
      "(kp/gemm/sm90_gated.h), bias [2 * inter] in [bg; bu] order or 0; pre (or 0): [gate_pre | up_pre] [m, 2 * inter]; "
      "config: a gated table row, -1: the table's pick; swizzle (1/2/4/8) and raster (0 heuristic, 1 along M, 2 "
      "along N) override the row's scheduler for sweeps (0 / -1: the row's)");
  m.def(
      "gated_down_grad",
      [](uintptr_t dy, int64_t dy_stride, uintptr_t wd, int64_t wd_stride, uintptr_t pre, int64_t pre_stride,
         uintptr_t dpre, int64_t dpre_stride, int64_t m_, int64_t inter, int64_t k, int dtype, int act, int config,
         int device, uintptr_t stream, int swizzle, int raster) {
        const kp::gemm::DGatedProblem p{py_ptr(dy), dy_stride, py_ptr(wd), wd_stride, py_ptr(pre), pre_stride,
                                        py_ptr<void*>(dpre), dpre_stride, m_, inter, k, dtype, act};
        kp_fused_mlp::gated_down_grad(p, config, device, py_stream(stream), {swizzle, raster});
      },
      py::arg("dy"), py::arg("dy_stride"), py::arg("wd"), py::arg("wd_stride"), py::arg("pre"), py::arg("pre_stride"),
      py::arg("dpre"), py::arg("dpre_stride"), py::arg("m"), py::arg("inter"), py::arg("k"), py::arg("dtype"),
      py::arg("act"), py::arg("config"), py::arg("device"), py::arg("stream"), py::arg("swizzle") = 0,
      py::arg("raster") = -1,
      "dpre[m, 2 * inter] = [dh * up * act'(gate) | dh * act(gate)] with dh = dy[m, k] @ wd[k, inter] and [gate | up] "
      "= pre[m, 2 * inter] (kp/gemm/sm90_dgated.h); config: a gated table row of DGatedRows, -1: its first; "
      "swizzle / raster as gated_linear_fwd's");
  m.def("dgated_plan", &kp_fused_mlp::dgated_plan, py::arg("m"), py::arg("hidden"),
        "the gated table row GatedMLP's fused backward of m tokens and this hidden size takes, -1: not fused");
  m.def("gated_configs", &kp_fused_mlp::gated_config_names, "the rows of the gated GEMM table (csrc/gated_table.h)");
  m.def("gated_plan", &kp_fused_mlp::gated_plan, py::arg("m"), py::arg("inter") = 0, py::arg("k") = 0,
        "the gated table row a call of m rows, `inter` outputs and k = hidden gets (inter, k 0: the rows for any "
        "width or depth)");
}
