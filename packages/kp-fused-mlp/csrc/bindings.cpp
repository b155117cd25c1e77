// kp_fused_mlp._C: the pybind11 face of the kernels. Pointers and streams arrive as Python ints,
// sizes and row strides (in elements) as 64-bit ints (docs/architecture.md). No libtorch.
#include <pybind11/pybind11.h>

#include <cstdint>

#include "decode_gemv.cuh"
#include "decode_table.h"
#include "gated.cuh"
#include "glu.cuh"
#include "kp/py_module.h"
#include "linear_act.cuh"

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
      "decode_plan",
      [](int64_t m_, int64_t n_out, int64_t k, bool gated, int dtype, int splits, int device, int row) {
        const auto p = kp_fused_mlp::decode_plan(m_, n_out, k, gated, dtype, splits, row, device);
        py::dict d;
        d["row"] = kp_fused_mlp::decode_row_names()[p.row];
        d["splits"] = p.splits;
        d["split_steps"] = p.split_steps;
        d["grid"] = py::make_tuple(p.grid_x, p.grid_y, p.grid_z);
        d["ctas_per_sm"] = p.ctas_per_sm;
        d["workspace_bytes"] = kp_fused_mlp::decode_workspace_bytes(p, m_, n_out, gated);
        return d;
      },
      py::arg("m"), py::arg("n_out"), py::arg("k"), py::arg("gated"), py::arg("dtype"), py::arg("splits"),
      py::arg("device"), py::arg("row") = -1,
      "the decode kernel's plan of a call (row, splits, split_steps, grid, ctas_per_sm, workspace_bytes); "
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
  m.def("decode_device_problem", &kp_fused_mlp::decode_device_problem, py::arg("device"),
        "'' when the device can run the decode kernels (sm80+), else why not");
  m.def("gemm_configs", &kp_fused_mlp::gemm_config_names, "the rows of the GEMM table (csrc/gemm_table.h)");
  m.def("gemm_plan", &kp_fused_mlp::gemm_plan, py::arg("m"), py::arg("n"), py::arg("k"),
        "the GEMM table row a call of this shape gets");
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
  m.def("gated_configs", &kp_fused_mlp::gated_config_names, "the rows of the gated GEMM table (csrc/gated_table.h)");
  m.def("gated_plan", &kp_fused_mlp::gated_plan, py::arg("m"), "the gated table row a call of m rows gets");
}
