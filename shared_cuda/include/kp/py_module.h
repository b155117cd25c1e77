// py_ptr / py_stream: pointers and streams as Python ints. The five functions every kp_<pkg>._C
// module exports (docs/architecture.md, "The native boundary"):
//   compiled_archs() -> list[int]   SM versions with machine code in the binary
//   compiled_arch_names() -> list[str]  the same as compiled: "90a" for sm_90a
//   ptx_archs() -> list[int]        virtual archs embedded as PTX (JIT-compiled for newer GPUs)
//   cuda_runtime_version() -> int   CUDART_VERSION at build time (cudart is linked statically)
//   check_device(device) -> str     "" when the kernels can run there, else the reason
// The arch lists come from kp/built_archs.h (the kp/archs.h kp_add_extension() generates).
// Nothing here touches CUDA at import: a module imports on a machine without a GPU or driver.
#pragma once
#include <cuda_runtime_api.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kp/built_archs.h"

namespace kp {

// The native boundary's conversions: device pointers and CUDA streams arrive from Python as ints
// (tensor.data_ptr(), torch.cuda.current_stream().cuda_stream).
template <typename P = const void*>
inline P py_ptr(uintptr_t v) {
  return reinterpret_cast<P>(v);
}
inline cudaStream_t py_stream(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

inline std::string arch_list() {
  std::string s = "SASS for";
  for (int a : compiled_archs()) s += " sm_" + std::to_string(a);
  if (!ptx_archs().empty()) {
    s += ", PTX for";
    for (int a : ptx_archs()) s += " compute_" + std::to_string(a);
  }
  return s;
}

inline std::string version_str(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

// Why the kernels cannot run on `device`, or "". `probe` is one of the module's __global__
// functions: asking the runtime for its attributes loads it, which fails exactly when no machine
// code or PTX in the binary fits the device.
inline std::string check_device(int device, const void* probe) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (e == cudaErrorNoDevice) return "no CUDA device is visible (CUDA_VISIBLE_DEVICES, driver not loaded?)";
    if (e == cudaErrorInsufficientDriver) {
      int drv = 0;
      (void)cudaDriverGetVersion(&drv);
      if (drv == 0) return "no NVIDIA driver found (libcuda could not be loaded)";
      return "the NVIDIA driver supports CUDA " + version_str(drv) + ", older than this build's CUDA runtime " +
             version_str(CUDART_VERSION) + "; update the driver";
    }
    return std::string("CUDA is unavailable: ") + cudaGetErrorString(e);
  }
  if (device < 0 || device >= count)
    return "device " + std::to_string(device) + " does not exist (" + std::to_string(count) + " visible)";
  int major = 0, minor = 0;
  (void)cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  (void)cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  const std::string sm = "sm_" + std::to_string(major * 10 + minor);
  int prev = -1;
  if ((e = cudaGetDevice(&prev)) == cudaSuccess && prev != device) e = cudaSetDevice(device);
  cudaFuncAttributes attr;
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, probe);
  (void)cudaGetLastError();
  if (prev >= 0 && prev != device) (void)cudaSetDevice(prev);
  if (e == cudaSuccess) return "";
  if (e == cudaErrorUnsupportedPtxVersion) {  // PTX (no SASS for this GPU) newer than the driver's JIT
    int drv = 0;
    (void)cudaDriverGetVersion(&drv);
    return "device " + std::to_string(device) + " is " + sm + ": this build has no machine code for it, and its PTX (CUDA " +
           version_str(CUDART_VERSION) + ") is newer than the driver (CUDA " + version_str(drv) +
           "); update the driver, or install a build with machine code for " + sm + " or from an older toolkit";
  }
  if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction || e == cudaErrorInvalidPtx)
    return "device " + std::to_string(device) + " is " + sm + ", but this build has " + arch_list() +
           " (" + cudaGetErrorName(e) + "); rebuild with KP_CUDA_ARCHS including " + std::to_string(major * 10 + minor);
  return "device " + std::to_string(device) + " (" + sm + ") cannot run the kernels: " + cudaGetErrorString(e);
}

// Register the common functions on module `m`.
inline void add_common(pybind11::module_& m, const void* probe) {
  namespace py = pybind11;
  m.def("compiled_archs", &compiled_archs, "SM versions with machine code in this binary");
  m.def("ptx_archs", &ptx_archs, "virtual architectures embedded as PTX");
  m.def("compiled_arch_names", &compiled_arch_names, "machine-code archs as compiled: '90a' for sm_90a");
  m.def("cuda_runtime_version", [] { return static_cast<int>(CUDART_VERSION); },
        "CUDART_VERSION this module was built with (cudart is linked statically)");
  m.def("check_device", [probe](int device) { return check_device(device, probe); }, py::arg("device"),
        "'' when the kernels can run on that CUDA device, else why not");
}

}  // namespace kp
