// kp_norm._C: the pybind11 face of the kernels. Pointers and streams arrive as Python ints, sizes
// and strides (in elements) as 64-bit ints; see docs/architecture.md, "kp-norm _C". No libtorch.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>

#include "kp/py_module.h"
#include "norm.cuh"

namespace py = pybind11;
using kp_norm::BwdArgs;
using kp_norm::FwdArgs;

using kp::py_ptr;
using kp::py_stream;

// Plans (kp_norm.cuda_plan / plan_override): which table row and kernel a call gets, and the
// sweep override of the table's values.
void add_plan_functions(py::module_& m) {
  auto info_dict = [](const kp_norm::PlanInfo& i) {
    py::dict d;
    d["row"] = i.row; d["kernel"] = i.kernel; d["e"] = i.e; d["tpr"] = i.tpr; d["csize"] = i.csize;
    d["threads"] = i.threads; d["stages"] = i.stages; d["nv"] = i.nv; d["wrp"] = i.wrp; d["tile_m"] = i.tile_m;
    d["multipass"] = i.multipass; d["smem"] = i.smem; d["grid"] = i.grid; d["partials"] = i.partials;
    return d;
  };
  m.def(
      "plan_fwd",
      [info_dict](int64_t rows, int64_t cols, int act_dtype, int weight_dtype, int res_dtype, bool vector, bool res,
                  bool is_rms, int n_affine, int device) {
        kp_norm::FwdSig s;
        s.cols = cols; s.act_dtype = act_dtype; s.weight_dtype = weight_dtype; s.res_dtype = res_dtype;
        s.vector = vector; s.res = res; s.rms = is_rms; s.n_affine = n_affine;
        return info_dict(kp_norm::norm_fwd_plan(s, rows, device));
      },
      py::arg("rows"), py::arg("cols"), py::arg("act_dtype"), py::arg("weight_dtype"), py::arg("res_dtype"),
      py::arg("vector"), py::arg("res"), py::arg("is_rms"), py::arg("n_affine"), py::arg("device"),
      "the forward plan of this signature (a dict: row, kernel, geometry, grid)");
  m.def(
      "plan_bwd",
      [info_dict](int64_t rows, int64_t cols, int act_dtype, int x_dtype, int weight_dtype, bool vector, bool db,
                  bool dres, int device) {
        kp_norm::BwdSig s;
        s.cols = cols; s.act_dtype = act_dtype; s.x_dtype = x_dtype; s.weight_dtype = weight_dtype;
        s.vector = vector; s.db = db; s.dres = dres;
        return info_dict(kp_norm::norm_bwd_plan(s, rows, device));
      },
      py::arg("rows"), py::arg("cols"), py::arg("act_dtype"), py::arg("x_dtype"), py::arg("weight_dtype"),
      py::arg("vector"), py::arg("db"), py::arg("dres"), py::arg("device"),
      "the backward plan of this signature (a dict: row, kernel, geometry, partials, grid)");
  m.def("set_plan_override", &kp_norm::set_plan_override, py::arg("values"),
        "replace the plan override: [(name, value), ...]; [] clears it");
  m.def("plan_override_names", [] {
    py::list names;
    for (const char* n : kp_norm::kKnobNames) names.append(n);
    return names;
  });
  m.attr("tuning_build") =
#ifdef KP_NORM_TUNING
      true;
#else
      false;
#endif
}

PYBIND11_MODULE(_C, m) {
  m.doc() = "kp-norm native CUDA kernels (RMSNorm / LayerNorm, fused residual)";
  kp::add_common(m, kp_norm::probe_kernel());

  m.def(
      "norm_fwd",
      [](uintptr_t x, int64_t x_stride, uintptr_t res, int64_t res_stride, uintptr_t w, uintptr_t b, uintptr_t y,
         int64_t y_stride, uintptr_t res_out, int64_t res_out_stride, uintptr_t mean, uintptr_t rstd, int64_t rows,
         int64_t cols, int act_dtype, int weight_dtype, int res_dtype, double eps, double weight_offset, bool is_rms,
         int device, uintptr_t stream) {
        FwdArgs a{py_ptr<const void*>(x), x_stride, py_ptr<const void*>(res), res_stride, py_ptr<const void*>(w),
                  py_ptr<const void*>(b), py_ptr<void*>(y), y_stride, py_ptr<void*>(res_out), res_out_stride,
                  py_ptr<float*>(mean), py_ptr<float*>(rstd), rows, cols, act_dtype, weight_dtype, res_dtype,
                  static_cast<float>(eps), static_cast<float>(weight_offset), is_rms};
        kp_norm::norm_fwd(a, device, py_stream(stream));
      },
      py::arg("x"), py::arg("x_stride"), py::arg("res"), py::arg("res_stride"), py::arg("w"), py::arg("b"),
      py::arg("y"), py::arg("y_stride"), py::arg("res_out"), py::arg("res_out_stride"), py::arg("mean"),
      py::arg("rstd"), py::arg("rows"), py::arg("cols"), py::arg("act_dtype"), py::arg("weight_dtype"),
      py::arg("res_dtype"), py::arg("eps"), py::arg("weight_offset"), py::arg("is_rms"), py::arg("device"),
      py::arg("stream"),
      "y = norm(x [+ res]) * (w + weight_offset) [+ b]; optional res_out, mean, rstd");

  // The eager inference fast path (kp_norm._cuda.inference_fwd): contiguous rows, no residual, no
  // statistics. 13 arguments instead of 22: pybind11 converts each one (~20 ns), and a 4-row call
  // is host-bound at ~10 us.
  m.def(
      "norm_fwd_rows",
      [](uintptr_t x, uintptr_t w, uintptr_t b, uintptr_t y, int64_t rows, int64_t cols, int act_dtype,
         int weight_dtype, double eps, double weight_offset, bool is_rms, int device, uintptr_t stream) {
        FwdArgs a{py_ptr<const void*>(x), cols, nullptr, 0, py_ptr<const void*>(w), py_ptr<const void*>(b), py_ptr<void*>(y), cols,
                  nullptr, 0, nullptr, nullptr, rows, cols, act_dtype, weight_dtype, act_dtype,
                  static_cast<float>(eps), static_cast<float>(weight_offset), is_rms};
        kp_norm::norm_fwd(a, device, py_stream(stream));
      },
      "norm_fwd for contiguous (rows, cols) x and y, without residual or saved statistics");

  m.def("norm_bwd_partials", &kp_norm::norm_bwd_partials, py::arg("rows"), py::arg("cols"), py::arg("act_dtype"),
        py::arg("x_dtype"), py::arg("with_db"), py::arg("device"),
        "rows of the fp32 dw/db partials norm_bwd writes for this shape and db_partial (0 when rows == 0)");

  m.def(
      "norm_bwd",
      [](uintptr_t dy, int64_t dy_stride, uintptr_t x, int64_t x_stride, uintptr_t dres, int64_t dres_stride,
         uintptr_t w, uintptr_t mean, uintptr_t rstd, uintptr_t dx, int64_t dx_stride, uintptr_t dw_partial,
         uintptr_t db_partial, int64_t num_partials, int64_t rows, int64_t cols, int act_dtype, int x_dtype,
         int weight_dtype, double weight_offset, bool is_rms, int device, uintptr_t stream) {
        BwdArgs a{py_ptr<const void*>(dy), dy_stride, py_ptr<const void*>(x), x_stride, py_ptr<const void*>(dres),
                  dres_stride, py_ptr<const void*>(w), py_ptr<const float*>(mean), py_ptr<const float*>(rstd),
                  py_ptr<void*>(dx), dx_stride, py_ptr<float*>(dw_partial), py_ptr<float*>(db_partial), num_partials,
                  rows, cols, act_dtype, x_dtype, weight_dtype, static_cast<float>(weight_offset), is_rms};
        kp_norm::norm_bwd(a, device, py_stream(stream));
      },
      py::arg("dy"), py::arg("dy_stride"), py::arg("x"), py::arg("x_stride"), py::arg("dres"),
      py::arg("dres_stride"), py::arg("w"), py::arg("mean"), py::arg("rstd"), py::arg("dx"), py::arg("dx_stride"),
      py::arg("dw_partial"), py::arg("db_partial"), py::arg("num_partials"), py::arg("rows"), py::arg("cols"),
      py::arg("act_dtype"), py::arg("x_dtype"), py::arg("weight_dtype"), py::arg("weight_offset"),
      py::arg("is_rms"), py::arg("device"), py::arg("stream"),
      "dx (+ dres) and the fp32 dw/db partial rows of the norm backward");

  add_plan_functions(m);

  m.def(
      "col_sum",
      [](uintptr_t partial, int64_t num_partials, int64_t cols, uintptr_t out, int out_dtype, int device,
         uintptr_t stream, uintptr_t partial2, uintptr_t out2) {
        kp_norm::col_sum(py_ptr<const float*>(partial), num_partials, cols, py_ptr<void*>(out), out_dtype, device,
                         py_stream(stream), py_ptr<const float*>(partial2), py_ptr<void*>(out2));
      },
      py::arg("partial"), py::arg("num_partials"), py::arg("cols"), py::arg("out"), py::arg("out_dtype"),
      py::arg("device"), py::arg("stream"), py::arg("partial2") = 0, py::arg("out2") = 0,
      "out[j] = sum_p partial[p, j] (fp32, fixed order), as out_dtype; also out2 from partial2 (same launch)");
}
