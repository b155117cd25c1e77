"""What compute-sanitizer (memcheck, racecheck) runs over kp-fused-mlp's CUDA kernels: every dtype,
odd and real sizes, strided rows and packed halves, forward and backward, each checked against
float64 (tools/gpu_check.sh sanitize)."""
import torch
import torch.nn.functional as F
from kp_core import testing as kt

import kp_fused_mlp

SHAPES = [(1, 1), (3, 5), (7, 130), (1, 4096), (65, 11008), (3, 14336)]

for dtype in (torch.float32, torch.float16, torch.bfloat16):
    for rows, cols in SHAPES:
        for packed in (False, True):
            base = kt.randn((rows, 2 * cols + 3), dtype=dtype, device="cuda", seed=rows * cols)
            gate_up = base[:, : 2 * cols].detach().requires_grad_(True)  # row stride 2 * cols + 3
            gate, up = gate_up[:, :cols], gate_up[:, cols:]
            y = kp_fused_mlp.swiglu(gate_up, backend="cuda") if packed else kp_fused_mlp.swiglu(gate, up, backend="cuda")
            dy = kt.randn((rows, cols), dtype=dtype, device="cuda", seed=7)
            y.backward(dy)
            g64, u64 = gate.detach().double(), up.detach().double()
            kt.assert_matches_oracle(y, F.silu(g64) * u64, name="y")
            s = torch.sigmoid(g64)
            want = torch.cat([dy.double() * u64 * s * (1 + g64 * (1 - s)), dy.double() * g64 * s], dim=1)
            kt.assert_matches_oracle(gate_up.grad, want, name="dgate_up")
torch.cuda.synchronize()
print("sanitize_fused-mlp: all paths ran")
