"""Session 33: the 256 x 192 row's scheduler (max_swizzle x raster) under sustained load, against
torch.mm (ncu at a fixed clock: kp's row read 1.7x cuBLAS's DRAM bytes at 8192 -> 28672, L2 hit 56%
against 71%; DRAM traffic costs power, and power sets the clock back to back)."""
import torch
from kp_core.bench.timing import sustained_ms
from kp_fused_mlp import _cuda
dev, dt = "cuda", torch.bfloat16
mod = _cuda.NATIVE.module
M = 8192
for k, n in [(8192, 28672), (4096, 14336)]:
    x = torch.randn(M, k, device=dev, dtype=dt)
    w = torch.randn(n, k, device=dev, dtype=dt) / k**0.5
    fns = {"torch.mm": lambda: torch.mm(x, w.t())}
    for s in (1, 2, 4, 8):
        for r, rname in ((1, "along_m"), (2, "along_n")):
            def f(s=s, r=r):
                mod.gemm_scheduler_override(s, r)
                _cuda.linear_act_fwd(x, w, None, "none")
            fns[f"kp s{s} {rname}"] = f
    for f in fns.values():
        f()
    torch.cuda.synchronize()
    t = sustained_ms(fns, device=dev, window_ms=150, rounds=2)
    mod.gemm_scheduler_override(0, -1)
    fl = 2 * M * n * k
    print(f"== {M} x {k} -> {n} ({_cuda.gemm_plan(M, n, k)})")
    for kk, v in t.items():
        print(f"  {kk:18s} {v*1e3:8.1f} us {fl/v/1e9:6.1f} TF x{t['torch.mm']/v:.3f} mm", flush=True)
