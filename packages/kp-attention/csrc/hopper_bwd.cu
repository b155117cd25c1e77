// The Hopper backward's host side that needs no CUTLASS: which backward a call takes (bwd.cu's
// dispatch). The switch that sends the forward to the sm80 kernel (set_force_sm80_fwd,
// KP_ATTENTION_FWD_KERNEL=sm80) sends the backward there too: hopper_fwd_available reads it.
#include "hopper_bwd.h"
#include "hopper_fwd.h"

namespace kp_attention {

const char* bwd_kernel_name(int device, int head_dim) {
  return hopper_fwd_available(device) && hopper_bwd_tile(head_dim) != nullptr ? "sm90" : "sm80";
}

}  // namespace kp_attention
