"""Session 32: the fused decode kernel's down-projection K splits, swept (flushed calls, 3 rounds in turn, median)."""
import torch
from kp_core.bench import timing
from kp_core.bench.ceilings import measure
from kp_fused_mlp import _cuda

copy = measure("cuda")["copy"]["value"]
print(f"copy {copy:.0f} GB/s", flush=True)
for hidden, inter in ((4096, 14336), (8192, 28672)):
    g = torch.Generator(device="cuda").manual_seed(0)
    w_gu = torch.randn(2 * inter, hidden, device="cuda", dtype=torch.bfloat16, generator=g) * hidden**-0.5
    w_d = torch.randn(hidden, inter, device="cuda", dtype=torch.bfloat16, generator=g) * inter**-0.5
    wbytes = 3 * hidden * inter * 2
    for m in (8, 16):
        x = torch.randn(m, hidden, device="cuda", dtype=torch.bfloat16, generator=g)
        rule = _cuda.gated_mlp_decode_plan(m, hidden, inter)["splits"]
        cands = [None, 2, 4, 6, 8, 12, 16, 24, 32]
        fns = {s: (lambda s=s: _cuda.gated_mlp_decode(x, w_gu, None, w_d, None, "silu", decode_splits=s)) for s in cands}
        res = {s: [] for s in cands}
        for f in fns.values():
            f()
        for r in range(3):
            for s, f in (fns.items() if r % 2 == 0 else reversed(list(fns.items()))):
                res[s].append(timing.do_bench(f, device="cuda"))
        line = f"{hidden}/{inter} m={m} rule={rule}:"
        for s in cands:
            ms = sorted(res[s])[1]
            line += f" {s or 'rule'}:{ms*1e3:.1f}us/{wbytes/ms/1e6/copy*100:.1f}%"
        print(line, flush=True)
