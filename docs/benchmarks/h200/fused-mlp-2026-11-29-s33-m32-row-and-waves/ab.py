"""Session 32 A/B: GatedMLP decode, the fused kernel against the two-kernel path and torch.compile
of the unfused module, flushed single calls (kp_core's do_bench) and back-to-back calls (host_ms
interleaved), % of copy of the weight bytes; three rounds, impls in turn."""
import sys, torch, torch.nn.functional as F
from torch import nn
from kp_core.bench import timing
from kp_core.bench.ceilings import measure
import kp_fused_mlp
from kp_fused_mlp import _cuda

dev = "cuda"
ceil = measure(dev)
copy = ceil["copy"]["value"]  # GB/s
print(f"copy {copy:.0f} GB/s  gemm {ceil['gemm']['value']:.0f} TFLOP/s", flush=True)

class Unfused(nn.Module):
    def __init__(s, h, i):
        super().__init__()
        kw = dict(bias=False, device=dev, dtype=torch.bfloat16)
        s.gate_proj, s.up_proj, s.down_proj = nn.Linear(h, i, **kw), nn.Linear(h, i, **kw), nn.Linear(i, h, **kw)
    def forward(s, x):
        return s.down_proj(F.silu(s.gate_proj(x)) * s.up_proj(x))

shapes = [(4096, 14336), (8192, 28672)]
tokens = [int(t) for t in sys.argv[1].split(",")] if len(sys.argv) > 1 else [3, 8, 16]
for hidden, inter in shapes:
    torch.manual_seed(0)
    un = Unfused(hidden, inter)
    comp = torch.compile(un, dynamic=False)
    kp = kp_fused_mlp.GatedMLP(hidden, inter, device=dev, dtype=torch.bfloat16)
    kp.load_state_dict(un.state_dict())
    kp2 = kp_fused_mlp.GatedMLP(hidden, inter, device=dev, dtype=torch.bfloat16)
    kp2.load_state_dict(un.state_dict())
    kp2.fused_decode = False
    wbytes = 3 * hidden * inter * 2
    for m in tokens:
        x = torch.randn(m, hidden, device=dev, dtype=torch.bfloat16)
        plan = _cuda.gated_mlp_decode_plan(m, hidden, inter)
        fns = {"fused": lambda: kp(x), "two-kernel": lambda: kp2(x), "torch.compile": lambda: comp(x)}
        with torch.no_grad():
            for f in fns.values():
                f(); f()
            ya, yb = fns["fused"](), fns["two-kernel"]()
            diff = (ya.float() - yb.float()).abs().max().item()
            res = {k: [] for k in fns}
            for rnd in range(3):
                for k, f in fns.items():
                    res[k].append(timing.do_bench(f, device=dev))
            b2b = timing.host_ms_interleaved(fns, device=dev)
        line = f"{hidden}/{inter} m={m:2d} plan={plan['row'] or '-'} splits={plan['splits']} maxdiff={diff:.3g} |"
        for k in fns:
            ms = sorted(res[k])[1]
            line += f" {k} {ms*1e3:7.1f} us {wbytes/ms/1e6/copy*100:5.1f}% |"
        line += " b2b:" + " ".join(f"{k} {v*1e3:.1f}" for k, v in b2b.items())
        print(line, flush=True)
