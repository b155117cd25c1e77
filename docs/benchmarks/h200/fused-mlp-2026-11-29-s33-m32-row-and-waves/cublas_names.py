"""Session 33: which cuBLAS kernels torch.mm runs at the 8192-token MLP GEMMs (the names carry the
tile, cluster and schedule), and their times beside kp's table rows (torch.profiler, 20 calls each,
back to back)."""
import torch
from torch.profiler import profile, ProfilerActivity
from kp_fused_mlp import _cuda
dev, dt = "cuda", torch.bfloat16
M = 8192
shapes = [(4096, 14336), (14336, 4096), (4096, 28672), (28672, 8192), (8192, 28672), (28672, 4096), (4096, 8192)]
# dW-like (MN-major) GEMMs as torch runs them in a backward: dW = dY^T X
for n, k in shapes:
    x = torch.randn(M, k, device=dev, dtype=dt)
    w = torch.randn(n, k, device=dev, dtype=dt) / k**0.5
    dy = torch.randn(M, n, device=dev, dtype=dt)
    fns = {"mm": lambda: torch.mm(x, w.t()), "kp": lambda: _cuda.linear_act_fwd(x, w, None, "none"),
           "mm_dx": lambda: torch.mm(dy, w), "mm_dw": lambda: torch.mm(dy.t(), x)}
    for f in fns.values():
        for _ in range(5):
            f()
    torch.cuda.synchronize()
    for name, f in fns.items():
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                f()
            torch.cuda.synchronize()
        evs = {}
        for e in prof.events():
            if e.device_type.name == "CUDA":
                evs.setdefault(e.name, []).append(e.device_time)
        for kn, ts in evs.items():
            ts = sorted(ts)
            print(f"M={M} N={n:5d} K={k:5d} {name:6s} {len(ts):3d}x med {ts[len(ts)//2]:8.1f} us  {kn[:230]}", flush=True)
