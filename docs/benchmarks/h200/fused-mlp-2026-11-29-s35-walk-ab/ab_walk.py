"""Session 35 (branch train-walk-large): the walk by size (gemm_walk: swizzle 8 along M from 8192 in
m, n and k) against the old walk (swizzle 1, heuristic raster, forced by gemm_scheduler_override(1, 0))
on whole training steps, one wheel: windows of back-to-back steps (A B B A, clock and power sampled)
and paired rounds; torch's unfused eager step beside them for scale."""
import statistics, sys, time
import torch
import torch.nn.functional as F
import kp_fused_mlp
from kp_fused_mlp import _cuda
sys.path.insert(0, sys.argv[1])  # packages/kp-fused-mlp/tools of the checkout
from gemm_sustained import Sampler, paired_medians, sustained_windows  # the timers as run, moved there after the run
mod = _cuda.NATIVE.module
dev, dt, M = "cuda", torch.bfloat16, 8192


def with_walk(walk, f):
    def g():
        mod.gemm_scheduler_override(*walk)
        return f()
    return g


def report(title, fns, sampler):
    t = paired_medians(fns)
    w = sustained_windows(fns, sampler)
    base = "kp old walk"
    tw = {k: statistics.median(v[0] for v in w[k]) for k in fns}
    print(f"== {title}", flush=True)
    for k in fns:
        clk = statistics.mean(v[1] for v in w[k]); pw = statistics.mean(v[2] for v in w[k])
        print(f"  {k:14s} paired {t[k]:8.3f} ms x{t[base]/t[k]:.3f} | windows {tw[k]:8.3f} ms x{tw[base]/tw[k]:.3f} "
              f"{clk:5.0f} MHz {pw:4.0f} W", flush=True)
    mod.gemm_scheduler_override(0, -1)


sampler = Sampler(); time.sleep(0.5)
print(torch.cuda.get_device_name(), torch.__version__, kp_fused_mlp.__version__, flush=True)
print("walks:", {s: mod.gemm_walk(*s) for s in [(8192, 28672, 8192), (8192, 14336, 4096)]}, flush=True)
for hidden, inter in ((8192, 28672), (4096, 14336)):
    for name, k, n in (("up", hidden, inter), ("down", inter, hidden)):
        x = torch.randn(M, k, device=dev, dtype=dt, requires_grad=True)
        w = (torch.randn(n, k, device=dev, dtype=dt) / k**0.5).requires_grad_(True)
        dy = torch.randn(M, n, device=dev, dtype=dt)
        kp_step = lambda: kp_fused_mlp.linear_act(x, w, None, "silu", backend="cuda").backward(dy)
        torch_step = lambda: F.silu(F.linear(x, w)).backward(dy)
        report(f"linear_act silu {name} {k} -> {n} fwd + bwd",
               {"torch eager": torch_step, "kp old walk": with_walk((1, 0), kp_step), "kp walk": with_walk((0, -1), kp_step)}, sampler)
        del x, w, dy
    mlp = kp_fused_mlp.GatedMLP(hidden, inter).to(dev, dt)
    x = torch.randn(M, hidden, device=dev, dtype=dt, requires_grad=True)
    dy = torch.randn(M, hidden, device=dev, dtype=dt)
    step = lambda: mlp(x).backward(dy)
    fwd = lambda: mlp(x.detach())
    report(f"GatedMLP {hidden}/{inter} fwd + bwd", {"kp old walk": with_walk((1, 0), step), "kp walk": with_walk((0, -1), step)}, sampler)
    report(f"GatedMLP {hidden}/{inter} fwd", {"kp old walk": with_walk((1, 0), fwd), "kp walk": with_walk((0, -1), fwd)}, sampler)
    del mlp, x, dy
sampler.stop()
