"""Session 33: the 256 x 192 row at max_swizzle 8 against the table's setting, paired rounds (every
impl once a round, each call its own events, order rotated: the same heat for all), forward GEMMs
and the dX GEMMs that share the row (gemm_bwd_table.h), against torch.mm."""
import statistics
import torch
from kp_fused_mlp import _cuda
dev, dt = "cuda", torch.bfloat16
mod = _cuda.NATIVE.module
M = 8192


def paired(fns, rounds=40):
    names = list(fns)
    ev = {k: [] for k in names}
    for r in range(rounds):
        for k in names[r % len(names):] + names[: r % len(names)]:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); fns[k](); e.record()
            ev[k].append((s, e))
    torch.cuda.synchronize()
    return {k: statistics.median(s.elapsed_time(e) for s, e in v) for k, v in ev.items()}


def settings(call):
    out = {}
    for tag, s, r in (("table", 0, -1), ("s8 along_m", 8, 1), ("s8 along_n", 8, 2), ("s4 along_m", 4, 1)):
        def f(s=s, r=r):
            mod.gemm_scheduler_override(s, r)
            call()
        out[f"kp {tag}"] = f
    return out


cases = []
for k, n in [(8192, 28672), (4096, 14336)]:  # forward: y = x W^T (row coop_256x192_c1x2)
    x = torch.randn(M, k, device=dev, dtype=dt)
    w = torch.randn(n, k, device=dev, dtype=dt) / k**0.5
    cases.append((f"fwd {k} -> {n}", 2 * M * n * k, lambda x=x, w=w: torch.mm(x, w.t()),
                  lambda x=x, w=w: _cuda.linear_act_fwd(x, w, None, "none")))
for hidden, inter in [(8192, 28672), (4096, 14336)]:  # dX of a down projection: dy [M, H] @ W [H, I]
    dy = torch.randn(M, hidden, device=dev, dtype=dt)
    w = torch.randn(hidden, inter, device=dev, dtype=dt) / hidden**0.5
    cases.append((f"dX down {hidden} <- {inter} ({_cuda.gemm_bwd_plan(M, inter, hidden, 'dx')})", 2 * M * hidden * inter,
                  lambda dy=dy, w=w: torch.mm(dy, w),
                  lambda dy=dy, w=w: _cuda.linear_act_bwd(dy, None, w, None, "none", True, False, False)))
for title, fl, mm, kp in cases:
    fns = {"torch.mm": mm, **settings(kp)}
    for f in fns.values():
        f(); f()
    torch.cuda.synchronize()
    t = paired(fns)
    mod.gemm_scheduler_override(0, -1)
    print(f"== {title}")
    for kk, v in t.items():
        print(f"  {kk:16s} {v*1e3:8.1f} us {fl/v/1e9:6.1f} TF x{t['torch.mm']/v:.3f} mm", flush=True)
