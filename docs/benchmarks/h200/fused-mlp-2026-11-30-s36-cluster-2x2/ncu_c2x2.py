"""Session 36: the gated GEMM at Llama-3-8B's gated shape (8192 x 4096 -> 2 x 14336, no P), rows
pingpong_128x128_c2x1 and pingpong_128x128_c2x2 forced, one call each between cudaProfilerStart /
Stop, for ncu: L2 -> SM operand bytes, DRAM bytes, clock."""
import torch
from kp_fused_mlp import _cuda
dev, dt = "cuda", torch.bfloat16
x = torch.randn(8192, 4096, device=dev, dtype=dt)
w = torch.randn(2 * 14336, 4096, device=dev, dtype=dt) / 4096**0.5
rows = list(_cuda.NATIVE.module.gated_configs())
calls = [lambda c=rows.index(r): _cuda.gated_linear_fwd(x, w, None, "silu", False, config=c)
         for r in ("pingpong_128x128_c2x1", "pingpong_128x128_c2x2")]
for f in calls:
    f(); f()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for f in calls:
    f()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
