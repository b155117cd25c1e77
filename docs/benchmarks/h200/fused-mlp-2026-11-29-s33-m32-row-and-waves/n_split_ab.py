"""Session 33: the N-split rows (forced; identity epilogue from registers) against the table's row
and torch.mm at the 8192-token GEMMs. sustained: windows of back-to-back calls, A B .. B A
(kp_core's sustained_ms, 3 rounds); flushed: do_bench, impls in turn over 3 rounds."""
import statistics
import torch
from kp_core.bench.timing import sustained_ms, do_bench
from kp_fused_mlp import _cuda
dev, dt = "cuda", torch.bfloat16
names = _cuda.NATIVE.module.gemm_configs()


def flushed(fns, rounds=3):
    t = {k: [] for k in fns}
    for r in range(rounds):
        for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            t[k].append(do_bench(fns[k], device=dev, warmup=10, rep=80))
    return {k: statistics.median(v) for k, v in t.items()}


M = 8192
for k, n in [(8192, 28672), (4096, 14336), (14336, 4096), (4096, 28672), (28672, 4096), (28672, 8192)]:
    x = torch.randn(M, k, device=dev, dtype=dt)
    w = torch.randn(n, k, device=dev, dtype=dt) / k**0.5
    table = _cuda.gemm_plan(M, n, k)
    fns = {"torch.mm": lambda: torch.mm(x, w.t()), f"kp table ({table})": lambda: _cuda.linear_act_fwd(x, w, None, "none")}
    for row in ("coopN_192x192_c2x1", "coopN_320x128_c1x2"):
        c = names.index(row)
        fns[row] = lambda c=c: _cuda.linear_act_fwd(x, w, None, "none", config=c)
    y0 = torch.mm(x, w.t()).float()
    for kk, fn in fns.items():
        d = (fn().float() - y0).abs().max().item()
        assert d < 0.05, (kk, d)
    torch.cuda.synchronize()
    s = sustained_ms(fns, device=dev, window_ms=200, rounds=3)
    f = flushed(fns)
    fl = 2 * M * n * k
    print(f"== {M} x {k} -> {n}")
    for kk in fns:
        print(f"  {kk:28s} sustained {s[kk]*1e3:8.1f} us {fl/s[kk]/1e9:6.1f} TF  x{s['torch.mm']/s[kk]:.3f} mm | "
              f"flushed {f[kk]*1e3:8.1f} us {fl/f[kk]/1e9:6.1f} TF  x{f['torch.mm']/f[kk]:.3f}", flush=True)
    del x, w
