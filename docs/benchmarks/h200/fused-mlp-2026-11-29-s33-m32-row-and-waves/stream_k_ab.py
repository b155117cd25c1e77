"""Session 33: stream-K rows (forced) against the table's row and torch.mm at the 8192-token GEMMs,
and GatedMLP's forward with its down projection on kp's stream-K row instead of nn.Linear (cuBLAS).
sustained: windows of back-to-back calls, A B .. B A (kp_core's sustained_ms, 3 rounds);
flushed: kp_core's do_bench, impls in turn over 3 rounds (median of the round medians)."""
import statistics, sys
import torch
from torch import nn
import torch.nn.functional as F
from kp_core.bench.timing import sustained_ms, do_bench
import kp_fused_mlp
from kp_fused_mlp import _cuda
dev, dt = "cuda", torch.bfloat16
names = _cuda.NATIVE.module.gemm_configs()


def flushed(fns, rounds=3):
    t = {k: [] for k in fns}
    for r in range(rounds):
        for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            t[k].append(do_bench(fns[k], device=dev, warmup=10, rep=80))
    return {k: statistics.median(v) for k, v in t.items()}


def report(title, fns, base, flops):
    for f in fns.values():
        f()
    torch.cuda.synchronize()
    s = sustained_ms(fns, device=dev, window_ms=200, rounds=3)
    f = flushed(fns)
    print(f"== {title}")
    for k in fns:
        print(f"  {k:28s} sustained {s[k]*1e3:8.1f} us {flops/s[k]/1e9:6.1f} TF  x{s[base]/s[k]:.3f} {base} | "
              f"flushed {f[k]*1e3:8.1f} us {flops/f[k]/1e9:6.1f} TF  x{f[base]/f[k]:.3f}", flush=True)


M = 8192
for n, k in [(4096, 14336), (14336, 4096), (4096, 28672), (28672, 8192), (8192, 28672)]:
    x = torch.randn(M, k, device=dev, dtype=dt)
    w = torch.randn(n, k, device=dev, dtype=dt) / k**0.5
    table = _cuda.gemm_plan(M, n, k)
    fns = {"torch.mm": lambda: torch.mm(x, w.t()), f"kp table ({table})": lambda: _cuda.linear_act_fwd(x, w, None, "none")}
    for row in ("coop_128x256_c2x1_sk", "coop_256x192_c1x2_sk"):
        c = names.index(row)
        fns[row] = lambda c=c: _cuda.linear_act_fwd(x, w, None, "none", config=c)
    y0 = torch.mm(x, w.t()).float()
    for kk, fn in fns.items():
        d = (fn().float() - y0).abs().max().item()
        assert d < 0.05, (kk, d)
    report(f"{M} x {k} -> {n}", fns, "torch.mm", 2 * M * n * k)
    del x, w

# GatedMLP forward (inference) at 8192 tokens: kp's module (down = nn.Linear: cuBLAS), the same with
# the down projection on a stream-K row, torch.compile of the unfused module.
class Unfused(nn.Module):
    def __init__(s, h, i):
        super().__init__()
        kw = dict(bias=False, device=dev, dtype=dt)
        s.gate_proj, s.up_proj, s.down_proj = nn.Linear(h, i, **kw), nn.Linear(h, i, **kw), nn.Linear(i, h, **kw)
    def forward(s, x):
        return s.down_proj(F.silu(s.gate_proj(x)) * s.up_proj(x))

for hidden, inter in [(4096, 14336), (8192, 28672)]:
    torch.manual_seed(0)
    un = Unfused(hidden, inter)
    comp = torch.compile(un, dynamic=False)
    kp = kp_fused_mlp.GatedMLP(hidden, inter, device=dev, dtype=dt).eval()
    kp.load_state_dict(un.state_dict())
    x = torch.randn(M, hidden, device=dev, dtype=dt)
    wd = kp.down_proj.weight
    sk = {row: names.index(row) for row in ("coop_128x256_c2x1_sk", "coop_256x192_c1x2_sk")}
    def kp_down(c):
        h = kp_fused_mlp.gated_linear(x, kp.gate_up_weight, kp.activation, kp.gate_up_bias, backend="cuda")
        return _cuda.linear_act_fwd(h, wd, None, "none", config=c)
    fns = {"torch.compile": lambda: comp(x), "kp GatedMLP": lambda: kp(x),
           "kp, down on kp table": lambda: kp_down(-1)}
    for row, c in sk.items():
        fns[f"kp, down {row}"] = lambda c=c: kp_down(c)
    with torch.no_grad():
        y0 = comp(x).float()
        for kk, fn in fns.items():
            d = (fn().float() - y0).abs().max().item()
            print(f"  {kk}: maxdiff vs compile {d:.3g}")
        report(f"GatedMLP fwd {M} x {hidden} / {inter}", fns, "torch.compile", 6 * M * hidden * inter)
