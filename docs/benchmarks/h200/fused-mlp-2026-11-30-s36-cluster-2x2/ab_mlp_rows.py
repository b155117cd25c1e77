"""Session 36: GatedMLP (Llama-3-8B, 8192 tokens, bf16) with the gated GEMM's new default past 4096
tokens (pingpong_128x192_c2x1) against the same module forced onto the old one
(pingpong_128x128_c2x1, the native call's config patched) and torch.compile of the unfused module
(three nn.Linear as Hugging Face writes it): forward (no gradient) and the training step (forward +
backward of x and every weight). Paired rounds, windows of back-to-back calls (A B B A, clock and
power), spaced calls (L2 flushed, the GPU idle 30 ms before each).

    python ab_mlp_rows.py <kp-fused-mlp/tools>"""
import sys
import time
import torch
import torch.nn.functional as F
from torch import nn
import kp_fused_mlp
from kp_fused_mlp import _cuda
sys.path.insert(0, sys.argv[1])
from gemm_sustained import Sampler, three_regimes  # noqa: E402

dev, dt, M, H, I = "cuda", torch.bfloat16, 8192, 4096, 14336
mod = _cuda.NATIVE.module
rows = list(mod.gated_configs())
print(rows, torch.cuda.get_device_name(), torch.__version__, flush=True)
print("plan:", _cuda.gated_plan(M, I, H), flush=True)
FORCE = [-1]
native = mod.gated_linear_fwd


def patched(*a):
    a = list(a)
    if FORCE[0] >= 0 and a[14] == -1:
        a[14] = FORCE[0]
    return native(*a)


mod.gated_linear_fwd = patched


class Unfused(nn.Module):
    def __init__(self):
        super().__init__()
        kw = {"bias": False, "device": dev, "dtype": dt}
        self.gate_proj, self.up_proj, self.down_proj = nn.Linear(H, I, **kw), nn.Linear(H, I, **kw), nn.Linear(I, H, **kw)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


torch.manual_seed(0)
ref = Unfused()
comp = torch.compile(ref, dynamic=False)
kp = kp_fused_mlp.GatedMLP(H, I, device=dev, dtype=dt, backend="cuda")
kp.load_state_dict(ref.state_dict())
x = torch.randn(M, H, device=dev, dtype=dt)
dy = torch.randn(M, H, device=dev, dtype=dt)
xg = x.clone().requires_grad_(True)


def forced(row, fn):
    def run():
        FORCE[0] = row
        try:
            return fn()
        finally:
            FORCE[0] = -1
    return run


def fwd(m):
    def run():
        with torch.no_grad():
            return m(x)
    return run


def step(m):
    return lambda: torch.autograd.grad(m(xg), (xg, *m.parameters()), dy)


old = rows.index("pingpong_128x128_c2x1")
with torch.no_grad():
    a, b = kp(x), forced(old, lambda: kp(x))()
print("new vs old row, GatedMLP forward bit-identical:", torch.equal(a, b), flush=True)
sampler = Sampler()
time.sleep(0.5)  # its first samples
for name, make in (("forward", fwd), ("fwd + bwd", step)):
    fns = {"torch.compile": make(comp), "kp 128x128 (old)": forced(old, make(kp)), "kp 128x192 (new)": make(kp)}
    for f in fns.values():
        f(); f()
    torch.cuda.synchronize()
    print(f"== GatedMLP {name}, {M} x {H} -> {I} (x: speed over torch.compile)", flush=True)
    three_regimes(fns, sampler, "torch.compile", width=18)
sampler.stop()
