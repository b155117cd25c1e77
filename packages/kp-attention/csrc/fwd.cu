// The attention forward's launcher: every argument checked again (Python checked them first), the
// call folded into the kernels' parameters, then the kernels of its head dim and dtype.
#include <cstdint>
#include <string>

#include "checks.h"
#include "fwd.h"
#include "fwd_tiles.h"
#include "hopper_fwd.h"
#include "kp/dtype.cuh"
#include "kp/error.cuh"
#include "kp/launch.cuh"

namespace kp_attention {
namespace {

void check(const FwdArgs& a) {
  args::check_problem(a, "forward", fwd_tile(static_cast<int>(a.head_dim)) != nullptr, 0);
  KP_CHECK_ARG(a.out != nullptr && a.lse != nullptr, "kp_attention: out and lse must be allocated");
  args::check_qkv(a);
}

FwdParams params(const FwdArgs& a) {
  FwdParams p{};
  args::fold(a, p);
  p.out = a.out;
  p.o_head = a.head_dim;
  return p;
}

}  // namespace

std::string fwd_device_problem(int device) {
  const kp::DeviceInfo& info = kp::device_info(device);
  if (info.major < 8)
    return "device " + std::to_string(device) + " is sm_" + std::to_string(10 * info.major + info.minor) +
           ": kp-attention's CUDA kernels need sm_80 or newer (mma.sync on bf16, cp.async, ldmatrix)";
  return "";
}

void attention_fwd(const FwdArgs& a, int device, cudaStream_t stream) {
  check(a);
  const std::string why = fwd_device_problem(device);
  KP_CHECK_ARG(why.empty(), "kp_attention: " + why);
  const FwdParams p = params(a);
  if (p.batch == 0 || p.seqlen_q == 0) return;  // no query row
  kp::DeviceGuard guard(device);
  const bool bf16 = a.dtype == kp::kBF16;
  // Hopper (sm_90a in this build, an sm_90 device): the TMA / wgmma kernel at the head dims of its
  // table (hopper_fwd.h: 64, 128); 96, 192, 256, and calls whose strides break TMA's rules
  // (run_hopper_fwd returns false), take the sm80 kernel below.
  if (hopper_fwd_available(device)) {
    const HopperExtra x{a.total_q, a.heads_kv};
    switch (a.head_dim) {
      case 64:
        if (bf16 ? run_hopper_fwd<64, kp::kBF16>(p, x, device, stream)
                 : run_hopper_fwd<64, kp::kF16>(p, x, device, stream))
          return;
        break;
      case 128:
        if (bf16 ? run_hopper_fwd<128, kp::kBF16>(p, x, device, stream)
                 : run_hopper_fwd<128, kp::kF16>(p, x, device, stream))
          return;
        break;
      default: break;
    }
  }
  switch (a.head_dim) {
    case 64: return bf16 ? run_fwd<64, kp::kBF16>(p, device, stream) : run_fwd<64, kp::kF16>(p, device, stream);
    case 96: return bf16 ? run_fwd<96, kp::kBF16>(p, device, stream) : run_fwd<96, kp::kF16>(p, device, stream);
    case 128: return bf16 ? run_fwd<128, kp::kBF16>(p, device, stream) : run_fwd<128, kp::kF16>(p, device, stream);
    case 192: return bf16 ? run_fwd<192, kp::kBF16>(p, device, stream) : run_fwd<192, kp::kF16>(p, device, stream);
    case 256: return bf16 ? run_fwd<256, kp::kBF16>(p, device, stream) : run_fwd<256, kp::kF16>(p, device, stream);
    default: break;  // check() refused it
  }
}

const void* probe_kernel() { return fwd_kernel_ptr<64, kp::kF16>(); }

}  // namespace kp_attention
