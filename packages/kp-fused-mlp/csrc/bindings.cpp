// kp_fused_mlp._C: the pybind11 face of the kernels. Pointers and streams arrive as Python ints,
// sizes and row strides (in elements) as 64-bit ints (docs/architecture.md). No libtorch.
#include <pybind11/pybind11.h>

#include <cstdint>

#include "kp/py_module.h"
#include "swiglu.cuh"

namespace py = pybind11;
using kp_fused_mlp::SwigluArgs;

using kp::py_ptr;
using kp::py_stream;

PYBIND11_MODULE(_C, m) {
  m.doc() = "kp-fused-mlp native CUDA kernels (SwiGLU)";
  kp::add_common(m, kp_fused_mlp::probe_kernel());

  m.def(
      "swiglu_fwd",
      [](uintptr_t gate, int64_t gate_stride, uintptr_t up, int64_t up_stride, uintptr_t y, int64_t rows,
         int64_t cols, int dtype, int device, uintptr_t stream) {
        SwigluArgs a{py_ptr(gate), gate_stride, py_ptr(up), up_stride, nullptr, 0, py_ptr<void*>(y), nullptr, rows, cols, dtype};
        kp_fused_mlp::swiglu_fwd(a, device, py_stream(stream));
      },
      py::arg("gate"), py::arg("gate_stride"), py::arg("up"), py::arg("up_stride"), py::arg("y"), py::arg("rows"),
      py::arg("cols"), py::arg("dtype"), py::arg("device"), py::arg("stream"),
      "y = silu(gate) * up over [rows, cols]; y contiguous");
  m.def(
      "swiglu_bwd",
      [](uintptr_t dy, int64_t dy_stride, uintptr_t gate, int64_t gate_stride, uintptr_t up, int64_t up_stride,
         uintptr_t dgate, uintptr_t dup, int64_t rows, int64_t cols, int dtype, int device, uintptr_t stream) {
        SwigluArgs a{py_ptr(gate), gate_stride, py_ptr(up), up_stride, py_ptr(dy), dy_stride, py_ptr<void*>(dgate), py_ptr<void*>(dup),
                     rows,       cols,        dtype};
        kp_fused_mlp::swiglu_bwd(a, device, py_stream(stream));
      },
      py::arg("dy"), py::arg("dy_stride"), py::arg("gate"), py::arg("gate_stride"), py::arg("up"),
      py::arg("up_stride"), py::arg("dgate"), py::arg("dup"), py::arg("rows"), py::arg("cols"), py::arg("dtype"),
      py::arg("device"), py::arg("stream"), "dgate, dup of y = silu(gate) * up; outputs contiguous");
}
