"""Training steps at 8192 tokens under sustained load, interleaved: windows of back-to-back steps
(forward + backward), implementations alternated A B .. B A per round. linear_act SiLU (up and
down projections) and GatedMLP 4096 / 14336: kp-cuda against torch.compile and torch eager."""
import statistics
import torch
import torch.nn.functional as F
import kp_fused_mlp

dev, dt = "cuda", torch.bfloat16
M = 8192
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


def window(step, n):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        step()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / n * 1e3


def compare(title, impls, n=25, rounds=3):
    for f in impls.values():
        for _ in range(3):
            f()
    torch.cuda.synchronize()
    times = {k: [] for k in impls}
    names = list(impls)
    for _ in range(rounds):
        for k in names + names[::-1]:
            times[k].append(window(impls[k], n))
    base = statistics.median(times["torch.compile"])
    print(f"-- {title}")
    for k in names:
        t = statistics.median(times[k])
        print(f"   {k:14s} {t:7.0f} us a step  ({base / t:.3f}x torch.compile)  windows {' '.join(f'{v:.0f}' for v in times[k])}", flush=True)


for k, n in ((4096, 14336), (14336, 4096)):
    x = torch.randn(M, k, device=dev, dtype=dt, requires_grad=True)
    w = (torch.randn(n, k, device=dev, dtype=dt) * k**-0.5).requires_grad_(True)
    b = torch.randn(n, device=dev, dtype=dt).requires_grad_(True)
    dy = torch.randn(M, n, device=dev, dtype=dt)
    kp = lambda x, w, b: kp_fused_mlp.linear_act(x, w, b, "silu", backend="cuda")
    compare(f"linear_act silu {k} -> {n}, fwd + bwd", {"kp-cuda": step_fn(kp, (x, w, b), dy),
                                                        "torch.compile": step_fn(compiled_linear, (x, w, b), dy),
                                                        "torch": step_fn(eager_linear, (x, w, b), dy)})
    del x, w, b, dy
H, I = 4096, 14336
x = torch.randn(M, H, device=dev, dtype=dt, requires_grad=True)
dy = torch.randn(M, H, device=dev, dtype=dt)
mlp = kp_fused_mlp.GatedMLP(H, I, "silu", device=dev, dtype=dt, backend="cuda")
ref = Unfused(H, I).to(dev, dt)
comp = torch.compile(ref)
compare("GatedMLP 4096 / 14336, fwd + bwd", {"kp-cuda": step_fn(lambda x: mlp(x), (x,), dy),
                                              "torch.compile": step_fn(lambda x: comp(x), (x,), dy)}, n=10)
with torch.no_grad():
    compare("GatedMLP 4096 / 14336, fwd", {"kp-cuda": lambda: mlp(x), "torch.compile": lambda: comp(x)}, n=20)
