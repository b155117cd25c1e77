"""Session 30's sustained-load measurements at 8192 tokens (H200), interleaved so that neither
implementation always runs on a hotter GPU:

    python sustained.py steps   training steps (fwd + bwd): linear_act SiLU (up, down projections)
                                and GatedMLP 4096 / 14336, kp-cuda against torch.compile and torch;
                                windows of back-to-back steps, A B .. B A x 3
    python sustained.py gated   the gated GEMM alone (kp's coop_256x192_c1x2 and coop_128x256_c2x1
                                rows, inference and saving P) against torch.compile of the unfused
                                gate/up projections + silu * mul; windows of 150 calls, then single
                                flushed calls interleaved
"""
import statistics
import sys

import torch
import torch.nn.functional as F
from kp_core.bench.timing import do_bench

import kp_fused_mlp
from kp_fused_mlp import _cuda

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


def linear_steps(k, n):
    """Training steps of linear_act SiLU, k -> n features at M tokens: kp-cuda, torch.compile, torch."""
    x = torch.randn(M, k, device=dev, dtype=dt, requires_grad=True)
    w = (torch.randn(n, k, device=dev, dtype=dt) * k**-0.5).requires_grad_(True)
    b = torch.randn(n, device=dev, dtype=dt).requires_grad_(True)
    dy = torch.randn(M, n, device=dev, dtype=dt)
    kp = lambda x, w, b: kp_fused_mlp.linear_act(x, w, b, "silu", backend="cuda")
    return {"kp-cuda": step_fn(kp, (x, w, b), dy), "torch.compile": step_fn(compiled_linear, (x, w, b), dy),
            "torch": step_fn(eager_linear, (x, w, b), dy)}


def gated_mlp_steps(h=4096, i=14336):
    """(training steps of GatedMLP: kp-cuda, torch.compile of the unfused module; their forwards)."""
    x = torch.randn(M, h, device=dev, dtype=dt, requires_grad=True)
    dy = torch.randn(M, h, device=dev, dtype=dt)
    mlp = kp_fused_mlp.GatedMLP(h, i, "silu", device=dev, dtype=dt, backend="cuda")
    comp = torch.compile(Unfused(h, i).to(dev, dt))
    return ({"kp-cuda": step_fn(lambda x: mlp(x), (x,), dy), "torch.compile": step_fn(lambda x: comp(x), (x,), dy)},
            {"kp-cuda": lambda: mlp(x), "torch.compile": lambda: comp(x)})


def steps():
    for k, n in ((4096, 14336), (14336, 4096)):
        compare(f"linear_act silu {k} -> {n}, fwd + bwd", linear_steps(k, n))
    train, forward = gated_mlp_steps()
    compare("GatedMLP 4096 / 14336, fwd + bwd", train, n=10)
    with torch.no_grad():
        compare("GatedMLP 4096 / 14336, fwd", forward, n=20)


def gated():
    H, I = 4096, 14336
    x = torch.randn(M, H, device=dev, dtype=dt)
    w = torch.randn(2 * I, H, device=dev, dtype=dt) * H**-0.5
    rows = list(_cuda.NATIVE.module.gated_configs())
    r256, r128 = rows.index("coop_256x192_c1x2"), rows.index("coop_128x256_c2x1")

    @torch.compile
    def unfused(x, wg, wu):
        return F.silu(F.linear(x, wg)) * F.linear(x, wu)

    wg, wu = w[:I].contiguous(), w[I:].contiguous()
    impls = {
        "torch.compile unfused": lambda: unfused(x, wg, wu),
        "kp coop_256x192_c1x2": lambda: _cuda.gated_linear_fwd(x, w, None, "silu", False, config=r256),
        "kp coop_128x256_c2x1": lambda: _cuda.gated_linear_fwd(x, w, None, "silu", False, config=r128),
        "kp coop_256x192_c1x2 saves P": lambda: _cuda.gated_linear_fwd(x, w, None, "silu", True, config=r256),
        "kp coop_128x256_c2x1 saves P": lambda: _cuda.gated_linear_fwd(x, w, None, "silu", True, config=r128),
    }
    for f in impls.values():
        f()
    torch.cuda.synchronize()
    times = {k: [] for k in impls}
    names = list(impls)
    for r in range(3):
        for k in names + names[::-1]:
            times[k].append(window(impls[k], 150))
    single = {k: [] for k in impls}
    for r in range(5):
        for k in names:
            single[k].append(do_bench(impls[k], warmup=5, rep=20) * 1e3)
    base_b, base_s = statistics.median(times[names[0]]), statistics.median(single[names[0]])
    for k in names:
        b, s = statistics.median(times[k]), statistics.median(single[k])
        print(f"{k:32s} sustained {b:7.0f} us ({base_b / b:.3f}x)  windows {' '.join(f'{t:.0f}' for t in times[k])}   "
              f"single {s:7.0f} us ({base_s / s:.3f}x)")


if __name__ == "__main__":
    {"steps": steps, "gated": gated}[sys.argv[1]]()
