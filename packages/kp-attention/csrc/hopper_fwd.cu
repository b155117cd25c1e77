// The Hopper forward's host side that needs no CUTLASS: whether a device takes it (fwd.cu's
// dispatch) and the switch that sends every call to the sm80 kernel instead (tests, benchmarks).
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "hopper_fwd.h"
#include "kp/built_archs.h"
#include "kp/launch.cuh"

namespace kp_attention {
namespace {

// KP_ATTENTION_FWD_KERNEL=sm80 in the environment: the sm80 kernel everywhere (read once).
std::atomic<int>& force_sm80() {
  static std::atomic<int> flag{[] {
    const char* e = std::getenv("KP_ATTENTION_FWD_KERNEL");
    return e != nullptr && std::strcmp(e, "sm80") == 0 ? 1 : 0;
  }()};
  return flag;
}

}  // namespace

bool hopper_fwd_available(int device) {
  if (force_sm80().load(std::memory_order_relaxed)) return false;
  static const bool built = kp::built_for("90a");
  if (!built) return false;
  const kp::DeviceInfo& info = kp::device_info(device);
  return info.major == 9 && info.minor == 0;
}

const char* fwd_kernel_name(int device, int head_dim) {
  return hopper_fwd_available(device) && hopper_tile(head_dim) != nullptr ? "sm90" : "sm80";
}

void set_force_sm80_fwd(bool on) { force_sm80().store(on ? 1 : 0, std::memory_order_relaxed); }

}  // namespace kp_attention
