// TMA's per-call rules, checked on the host before a Hopper kernel (forward or backward) builds its
// descriptors; a call that breaks one runs the sm80-class kernel instead.
#pragma once
#include <cstdint>

namespace kp_attention::hopper {

// TMA's rules for one global tensor: extents 1..2^32, byte strides multiples of 16 below 2^40 (an
// extent-1 dimension's stride is never used: any legal value stands in), a 16-byte aligned start.
struct Dim {
  int64_t extent, stride;  // stride in elements
};

inline bool tma_ok(const void* ptr, int elem_bytes, Dim* dims, int n, int head_dim) {
  if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return false;
  for (int i = 0; i < n; ++i) {
    Dim& d = dims[i];
    if (d.extent < 1 || d.extent > (int64_t{1} << 31) - 1) return false;  // int32 coordinates
    if (d.extent == 1) d.stride = head_dim;                                // unused; legal
    const int64_t bytes = d.stride * elem_bytes;
    if (bytes <= 0 || bytes % 16 != 0 || bytes >= (int64_t{1} << 40)) return false;
  }
  return true;
}

}  // namespace kp_attention::hopper
