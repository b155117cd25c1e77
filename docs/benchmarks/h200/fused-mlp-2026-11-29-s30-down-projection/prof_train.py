"""Kernel-level profile (torch.profiler, CUDA activity) of one training step at 8192 tokens:
linear_act (up / down projection, SiLU) and GatedMLP (4096 / 14336), kp-cuda against torch.compile
of the unfused expression. Prints each kernel's device time for one step."""
import torch
import torch.nn.functional as F
from torch.profiler import profile, ProfilerActivity
import kp_fused_mlp

dev, dt = "cuda", torch.bfloat16
torch.manual_seed(0)


def eager_linear(x, w, b):
    return F.silu(F.linear(x, w, b))


compiled_linear = torch.compile(eager_linear)


class Unfused(torch.nn.Module):
    def __init__(self, h, i):
        super().__init__()
        self.gate = torch.nn.Linear(h, i, bias=False)
        self.up = torch.nn.Linear(h, i, bias=False)
        self.down = torch.nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def step_fn(fn, inputs, dy):
    def step():
        for t in inputs:
            t.grad = None
        fn(*inputs).backward(dy)
    return step


def profile_step(name, step):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    evs = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    total = sum(e.device_time for e in evs)
    print(f"== {name}: {len(evs)} kernels, {total:.0f} us of kernel time")
    for e in evs:
        print(f"   {e.device_time:8.1f} us  {e.name[:150]}")
    s, t = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        step()
    t.record()
    torch.cuda.synchronize()
    print(f"   back to back: {s.elapsed_time(t) / 10 * 1e3:.0f} us a step")


M = 8192
for k, n in ((14336, 4096), (4096, 14336)):
    x = torch.randn(M, k, device=dev, dtype=dt, requires_grad=True)
    w = (torch.randn(n, k, device=dev, dtype=dt) * k**-0.5).requires_grad_(True)
    b = torch.randn(n, device=dev, dtype=dt).requires_grad_(True)
    dy = torch.randn(M, n, device=dev, dtype=dt)
    kp = lambda x, w, b: kp_fused_mlp.linear_act(x, w, b, "silu", backend="cuda")
    profile_step(f"kp linear_act silu {k}->{n}", step_fn(kp, (x, w, b), dy))
    profile_step(f"torch.compile linear silu {k}->{n}", step_fn(compiled_linear, (x, w, b), dy))
    profile_step(f"torch eager linear silu {k}->{n}", step_fn(eager_linear, (x, w, b), dy))
    del x, w, b, dy
H, I = 4096, 14336
x = torch.randn(M, H, device=dev, dtype=dt, requires_grad=True)
dy = torch.randn(M, H, device=dev, dtype=dt)
mlp = kp_fused_mlp.GatedMLP(H, I, "silu", device=dev, dtype=dt, backend="cuda")
ref = Unfused(H, I).to(dev, dt)
comp = torch.compile(ref)
profile_step("kp GatedMLP", step_fn(lambda x: mlp(x), (x,), dy))
profile_step("torch.compile GatedMLP", step_fn(lambda x: comp(x), (x,), dy))
