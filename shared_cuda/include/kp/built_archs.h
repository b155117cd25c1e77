// The archs this module was compiled for, from the kp/archs.h that kp_add_extension() generates
// (KP_SASS_ARCHS and KP_PTX_ARCHS: comma lists of numbers; KP_SASS_ARCH_NAMES: of strings, "90a"
// for sm_90a), and the two questions host code asks of them before it launches arch-specific
// kernels. No CUDA call: a module asks them at import on a machine without a GPU.
#pragma once
#include <cstdlib>
#include <string>
#include <vector>

#if __has_include("kp/archs.h")
#include "kp/archs.h"
#endif
#ifndef KP_SASS_ARCHS  // a module built without kp_add_extension(): no list
#define KP_SASS_ARCHS
#endif
#ifndef KP_SASS_ARCH_NAMES
#define KP_SASS_ARCH_NAMES
#endif
#ifndef KP_PTX_ARCHS
#define KP_PTX_ARCHS
#endif

namespace kp {

// SM versions with machine code in the binary, and the virtual archs embedded as PTX.
inline std::vector<int> compiled_archs() { return std::vector<int>{KP_SASS_ARCHS}; }
inline std::vector<int> ptx_archs() { return std::vector<int>{KP_PTX_ARCHS}; }
// The machine-code archs as compiled ("90a": sm_90a, with the arch-specific features wgmma/setmaxnreg).
// Empty in a PTX-only build.
inline std::vector<std::string> compiled_arch_names() { return std::vector<std::string>{KP_SASS_ARCH_NAMES}; }

// Whether the module carries machine code compiled for exactly `name`. "90a": only a module with
// SM90A_SOURCES has it (KpExtension.cmake); its other kernels are compiled for sm_90.
inline bool built_for(const std::string& name) {
  for (const std::string& n : compiled_arch_names())
    if (n == name) return true;
  return false;
}

// Whether some machine code of the module runs on an sm_<major><minor> device: a base arch on its
// own major version and an equal or newer minor ("80" on an sm_86 GPU), an arch-specific one
// ("90a") on its own GPU only.
inline bool has_sass_for(int major, int minor) {
  for (const std::string& n : compiled_arch_names()) {
    const int v = std::atoi(n.c_str());
    const bool specific = !n.empty() && n.back() == 'a';
    if (v / 10 == major && (specific ? v % 10 == minor : v % 10 <= minor)) return true;
  }
  return false;
}

}  // namespace kp
