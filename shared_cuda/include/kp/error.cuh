// Error checks for the host side of every kp extension. They throw, never abort: pybind11 turns
// std::runtime_error into RuntimeError and std::invalid_argument into ValueError, so a bad call or a
// failed launch surfaces in Python as an exception and the process lives on.
#pragma once
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace kp {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();  // reset the (non-sticky) error, so a later check doesn't report it again
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + expr + " failed: " +
                           cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

[[noreturn]] inline void throw_arg(const std::string& msg) { throw std::invalid_argument(msg); }

}  // namespace kp

// Check a CUDA runtime call.
#define KP_CHECK_CUDA(expr)                                                   \
  do {                                                                        \
    const cudaError_t kp_err_ = (expr);                                       \
    if (kp_err_ != cudaSuccess) ::kp::throw_cuda(kp_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// Check the launch just made (bad configuration, missing kernel image, sticky fault).
#define KP_CHECK_LAUNCH() KP_CHECK_CUDA(cudaGetLastError())

// Validate a caller-supplied argument; `msg` is anything std::string can be built from.
#define KP_CHECK_ARG(cond, msg)                          \
  do {                                                   \
    if (!(cond)) ::kp::throw_arg(std::string(msg));      \
  } while (0)
