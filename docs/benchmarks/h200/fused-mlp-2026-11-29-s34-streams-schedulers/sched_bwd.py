"""Session 34: the scheduler (swizzle, raster) of linear_act's training GEMMs, dX = dP W and
dW = dP^T X, under sustained load (windows of back-to-back calls, A..F F..A, SM clock and board
power sampled) and in paired rounds, against torch.mm. The table's rows run swizzle 1 with the
heuristic raster (gemm_table.h); the gated GEMM's sweep had found swizzle 8 along N worth 3-5%.

    python sched_bwd.py <kp-fused-mlp/tools>

The sampler and the two timers are packages/kp-fused-mlp/tools/gemm_sustained.py's (moved there
after the run)."""
import statistics, sys, time
import torch
from kp_fused_mlp import _cuda
sys.path.insert(0, sys.argv[1])
from gemm_sustained import Sampler, paired_medians, sustained_windows  # noqa: E402
dev, dt = "cuda", torch.bfloat16
mod = _cuda.NATIVE.module
M = 8192
SETTINGS = {"table": (0, -1), "s8 along M": (8, 1), "s8 along N": (8, 2), "s4 along M": (4, 1), "s4 along N": (4, 2)}


def impls(torch_fn, kp_fn):
    out = {"torch.mm": torch_fn}
    for name, (s, r) in SETTINGS.items():
        def f(s=s, r=r):
            mod.gemm_scheduler_override(s, r)
            return kp_fn()
        out[f"kp {name}"] = f
    return out


sampler = Sampler()
time.sleep(0.5)
print(torch.cuda.get_device_name(), torch.__version__, flush=True)
for hidden, inter in ((4096, 14336), (8192, 28672)):
    x_h = torch.randn(M, hidden, device=dev, dtype=dt)
    x_i = torch.randn(M, inter, device=dev, dtype=dt)
    for proj, n, k, x in (("gate_up", 2 * inter, hidden, x_h), ("down", hidden, inter, x_i)):
        w = torch.randn(n, k, device=dev, dtype=dt) / k**0.5
        dy = torch.randn(M, n, device=dev, dtype=dt)
        jobs = {
            f"dX {proj} [{M}, {k}] K={n} ({_cuda.gemm_bwd_plan(M, k, n, 'dx')})":
                (lambda dy=dy, w=w: torch.mm(dy, w), lambda dy=dy, w=w: _cuda.linear_act_bwd(dy, None, w, None, "none", True, False, False)),
            f"dW {proj} [{n}, {k}] K={M} ({_cuda.gemm_bwd_plan(n, k, M, 'dw')})":
                (lambda dy=dy, x=x: torch.mm(dy.t(), x), lambda dy=dy, x=x: _cuda.linear_act_bwd(dy, x, None, None, "none", False, True, False)),
        }
        for title, (tf, kf) in jobs.items():
            fns = impls(tf, kf)
            ref = tf(); mod.gemm_scheduler_override(8, 1); got = kf()[0 if title.startswith("dX") else 1]
            mod.gemm_scheduler_override(0, -1)
            torch.cuda.synchronize()
            err = float((ref.float() - got.float()).abs().max() / ref.float().abs().max())
            fl = 2 * M * n * k
            t = paired_medians(fns)
            w_ = sustained_windows(fns, sampler, calls=40)
            mod.gemm_scheduler_override(0, -1)
            print(f"== {title}  (max rel diff vs torch.mm {err:.2e})", flush=True)
            tw = {kk: statistics.median(v[0] for v in vv) for kk, vv in w_.items()}
            for kk in fns:
                clk = statistics.mean(v[1] for v in w_[kk]); pw = statistics.mean(v[2] for v in w_[kk])
                spread = max(v[0] for v in w_[kk]) / min(v[0] for v in w_[kk]) - 1
                print(f"  {kk:14s} paired {t[kk]*1e3:8.1f} us x{t['torch.mm']/t[kk]:.3f} mm | windows {tw[kk]*1e3:8.1f} us "
                      f"x{tw['torch.mm']/tw[kk]:.3f} mm (spread {spread*100:4.1f}%) {clk:5.0f} MHz {pw:5.0f} W "
                      f"{fl/tw[kk]/1e9/clk*1e3:6.1f} GF/clk", flush=True)
        del w, dy
sampler.stop()
