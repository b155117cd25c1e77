"""Session 37: GatedMLP's fused backward (gated_mlp: dh = dy Wd and the gated activation's backward in
one GEMM, kp/gemm/sm90_dgated.h) at 8192 tokens, bf16, Llama-3-8B (4096 -> 14336) and 8192 -> 28672.

Part 1, the GEMM alone: each gated-gradient row against what the unfused backward runs for the same
result (cuBLAS dy @ Wd, then the Triton elementwise pass gated_pre_grad): bit-level agreement is not
expected (dh is rounded once on the unfused path), so the max difference is printed.
Part 2, the training step (forward + backward of x and every weight): GatedMLP fused against the same
module with fused_backward False and torch.compile of the unfused module (three nn.Linear, as
Hugging Face writes it).
Each in three regimes: paired rounds, windows of back-to-back calls (A B B A, clock and power),
spaced calls (L2 flushed, the GPU idle 30 ms before each).

    python ab_fused_backward.py <kp-fused-mlp/tools> [--rows-only | --steps-only]

Calls 3 and 4 ran part 1 on three rows (pingpong_128x128_c2x1, pingpong_128x192_c2x1,
coop_256x192_c1x2; wheels whl51 / whl52, which instantiated all three) and part 2 with the first
rule (128 x 192 past 4096 tokens, every hidden size); the table kept one row (DGATED below) and a
hidden-size cut, which call 5 ran with --steps-only."""
import copy
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

import kp_fused_mlp
from kp_fused_mlp import _cuda
from kp_fused_mlp.triton.gated import gated_pre_grad

sys.path.insert(0, sys.argv[1])
from gemm_sustained import Sampler, three_regimes  # noqa: E402

dev, dt, M = "cuda", torch.bfloat16, 8192
ROWS_ONLY, STEPS_ONLY = "--rows-only" in sys.argv, "--steps-only" in sys.argv
configs = list(_cuda.NATIVE.module.gated_configs())
DGATED = ["pingpong_128x128_c2x1"]  # gated_table.h's DGatedRows
print(torch.cuda.get_device_name(), torch.__version__, "dgated plan at 8192:",
      [_cuda.dgated_plan(M, h) or "not fused" for h in (4096, 8192)], flush=True)


class Unfused(nn.Module):
    def __init__(self, h, i):
        super().__init__()
        kw = {"bias": False, "device": dev, "dtype": dt}
        self.gate_proj, self.up_proj, self.down_proj = nn.Linear(h, i, **kw), nn.Linear(h, i, **kw), nn.Linear(i, h, **kw)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


sampler = Sampler()
time.sleep(0.5)  # its first samples
for H, I in ((4096, 14336), (8192, 28672)):
    torch.manual_seed(0)
    if not STEPS_ONLY:
        dy = torch.randn(M, H, device=dev, dtype=dt)
        wd = torch.randn(H, I, device=dev, dtype=dt) / H**0.5
        pre = torch.randn(M, 2 * I, device=dev, dtype=dt)
        unfused = lambda: gated_pre_grad(torch.mm(dy, wd), pre, "silu")
        base = unfused()
        fns = {"cublas mm + triton pass": unfused}
        for r in DGATED:
            fns[r] = lambda r=r: _cuda.gated_down_grad(dy, wd, pre, "silu", config=configs.index(r))
            diff = (fns[r]().float() - base.float()).abs().max().item()
            print(f"  {r}: max |fused - unfused| {diff:.3g} (max |dP| {base.float().abs().max().item():.3g})", flush=True)
        print(f"== gated gradient, dy [{M}, {H}] @ Wd [{H}, {I}] -> dP [{M}, {2 * I}] (x: speed over the unfused)", flush=True)
        three_regimes(fns, sampler, "cublas mm + triton pass", width=26, calls=40 if H == 4096 else 15)
        del dy, wd, pre, base
    if not ROWS_ONLY:
        ref = Unfused(H, I)
        comp = torch.compile(ref, dynamic=False)
        kp = kp_fused_mlp.GatedMLP(H, I, device=dev, dtype=dt, backend="cuda")
        kp.load_state_dict(ref.state_dict())
        kp_old = copy.deepcopy(kp)
        kp_old.fused_backward = False
        x = torch.randn(M, H, device=dev, dtype=dt, requires_grad=True)
        g = torch.randn(M, H, device=dev, dtype=dt)
        step = lambda m: (lambda: torch.autograd.grad(m(x), (x, *m.parameters()), g))
        a, b = step(kp)(), step(kp_old)()
        print("  fused vs unfused step, max |d| per gradient:",
              [f"{(u.float() - v.float()).abs().max().item():.3g}" for u, v in zip(a, b)], flush=True)
        fns = {"torch.compile": step(comp), "kp unfused bwd": step(kp_old), "kp fused bwd": step(kp)}
        for f in fns.values():
            f(), f()
        torch.cuda.synchronize()
        print(f"== GatedMLP fwd + bwd, {M} x {H} -> {I} (x: speed over torch.compile)", flush=True)
        three_regimes(fns, sampler, "torch.compile", width=18, calls=20 if H == 4096 else 8)
        del ref, comp, kp, kp_old, x, g, a, b
    torch.cuda.empty_cache()
sampler.stop()
