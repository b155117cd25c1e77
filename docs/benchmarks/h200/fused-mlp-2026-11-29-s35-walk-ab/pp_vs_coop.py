"""Session 35: the gated GEMM at 8192 x 8192 -> 2 x 28672 (no P), rows pingpong_128x128_c2x1 and
coop_256x192_c1x2 forced, one call each between cudaProfilerStart / Stop, for ncu: where does the
pingpong schedule's power go (DRAM, L2, shared memory)?"""
import torch
from kp_fused_mlp import _cuda
dev, dt = "cuda", torch.bfloat16
x = torch.randn(8192, 8192, device=dev, dtype=dt)
w = torch.randn(2 * 28672, 8192, device=dev, dtype=dt) / 8192**0.5
rows = list(_cuda.NATIVE.module.gated_configs())
calls = [lambda c=rows.index(r): _cuda.gated_linear_fwd(x, w, None, "silu", False, config=c)
         for r in ("pingpong_128x128_c2x1", "coop_256x192_c1x2")]
for f in calls:
    f(); f()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for f in calls:
    f()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
