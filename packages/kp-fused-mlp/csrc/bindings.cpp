// kp_fused_mlp._C: the pybind11 face of the kernels. Pointers and streams arrive as Python ints,
// sizes and row strides (in elements) as 64-bit ints (docs/architecture.md). No libtorch.
#include <pybind11/pybind11.h>

#include <cstdint>

#include "kp/py_module.h"
#include "swiglu.cuh"

namespace py = pybind11;
using kp_fused_mlp::SwigluArgs;

static const void* cptr(uintptr_t v) { return reinterpret_cast<const void*>(v); }
static void* mptr(uintptr_t v) { return reinterpret_cast<void*>(v); }
static cudaStream_t stream_of(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

PYBIND11_MODULE(_C, m) {
  m.doc() = "kp-fused-mlp native CUDA kernels (SwiGLU)";
  kp::add_common(m, kp_fused_mlp::probe_kernel());

  m.def(
      "swiglu_fwd",
      [](uintptr_t gate, int64_t gate_stride, uintptr_t up, int64_t up_stride, uintptr_t y, int64_t rows,
         int64_t cols, int dtype, int device, uintptr_t stream) {
        SwigluArgs a{cptr(gate), gate_stride, cptr(up), up_stride, nullptr, 0, mptr(y), nullptr, rows, cols, dtype};
        kp_fused_mlp::swiglu_fwd(a, device, stream_of(stream));
      },
      py::arg("gate"), py::arg("gate_stride"), py::arg("up"), py::arg("up_stride"), py::arg("y"), py::arg("rows"),
      py::arg("cols"), py::arg("dtype"), py::arg("device"), py::arg("stream"),
      "y = silu(gate) * up over [rows, cols]; y contiguous");
  m.def(
      "swiglu_bwd",
      [](uintptr_t dy, int64_t dy_stride, uintptr_t gate, int64_t gate_stride, uintptr_t up, int64_t up_stride,
         uintptr_t dgate, uintptr_t dup, int64_t rows, int64_t cols, int dtype, int device, uintptr_t stream) {
        SwigluArgs a{cptr(gate), gate_stride, cptr(up), up_stride, cptr(dy), dy_stride, mptr(dgate), mptr(dup),
                     rows,       cols,        dtype};
        kp_fused_mlp::swiglu_bwd(a, device, stream_of(stream));
      },
      py::arg("dy"), py::arg("dy_stride"), py::arg("gate"), py::arg("gate_stride"), py::arg("up"),
      py::arg("up_stride"), py::arg("dgate"), py::arg("dup"), py::arg("rows"), py::arg("cols"), py::arg("dtype"),
      py::arg("device"), py::arg("stream"), "dgate, dup of y = silu(gate) * up; outputs contiguous");
}
