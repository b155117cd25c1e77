"""Session 31: training steps at 8192 tokens (linear_act SiLU up / down, GatedMLP 4096 / 14336)
and the GatedMLP forward, kp-cuda against torch.compile (and torch), paired and in windows."""
import sys
import torch
import torch.nn.functional as F
import kp_fused_mlp
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from rows import compare  # noqa: E402
from sustained import Unfused, compiled_linear, eager_linear  # noqa: E402  (session 30's; rows puts it on the path)

dev, dt = "cuda", torch.bfloat16
M = 8192


def step_fn(fn, leaves, dy):
    def step():
        for t in leaves:
            t.grad = None  # optimizer.zero_grad(set_to_none=True)
        fn().backward(dy)
    return step


def linear(k, n):
    torch.manual_seed(0)
    x = torch.randn(M, k, device=dev, dtype=dt, requires_grad=True)
    w = (torch.randn(n, k, device=dev, dtype=dt) * k**-0.5).requires_grad_(True)
    b = torch.randn(n, device=dev, dtype=dt).requires_grad_(True)
    dy = torch.randn(M, n, device=dev, dtype=dt)
    impls = {"torch.compile": step_fn(lambda: compiled_linear(x, w, b), (x, w, b), dy),
             "kp-cuda": step_fn(lambda: kp_fused_mlp.linear_act(x, w, b, "silu", backend="cuda"), (x, w, b), dy),
             "torch": step_fn(lambda: eager_linear(x, w, b), (x, w, b), dy)}
    compare(f"linear_act silu {k} -> {n}, fwd + bwd", impls, "torch.compile", n=15, prounds=25)


def gated_mlp(h, i, train=True):
    torch.manual_seed(0)
    x = torch.randn(M, h, device=dev, dtype=dt, requires_grad=True)
    dy = torch.randn(M, h, device=dev, dtype=dt)
    mlp = kp_fused_mlp.GatedMLP(h, i, "silu", device=dev, dtype=dt, backend="cuda")
    ref = Unfused(h, i).to(dev, dt)
    comp = torch.compile(ref)
    if train:
        impls = {"torch.compile": step_fn(lambda: comp(x), (x, *ref.parameters()), dy),
                 "kp-cuda": step_fn(lambda: mlp(x), (x, *mlp.parameters()), dy)}
        compare(f"GatedMLP {h} / {i}, fwd + bwd", impls, "torch.compile", n=8, prounds=12)
    with torch.no_grad():
        impls = {"torch.compile": lambda: comp(x), "kp-cuda": lambda: mlp(x)}
        compare(f"GatedMLP {h} / {i}, fwd", impls, "torch.compile", n=15, prounds=25)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__)
    for a in sys.argv[1:]:
        {"up": lambda: linear(4096, 14336), "down": lambda: linear(14336, 4096), "mlp": lambda: gated_mlp(4096, 14336),
         "wide": lambda: gated_mlp(8192, 28672, False)}[a]()
