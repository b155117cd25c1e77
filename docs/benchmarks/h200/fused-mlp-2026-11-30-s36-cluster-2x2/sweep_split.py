"""Session 36: the split launch (row 4) under scheduler overrides (swizzle x raster, applied to both
of its grids): the default swizzle 8 along N pads the quads' band of 204 tile columns to 208 (2%
more tiles); swizzle 2 pads nothing. Llama-3-8B's gated shape, 8192 tokens, bf16, without and with
P, against the table's c2x1 row: paired rounds, windows (clock, power), spaced calls."""
import statistics, sys, time
import torch
from kp_fused_mlp import _cuda
sys.path.insert(0, sys.argv[1])
from gemm_sustained import Sampler, paired_medians, sustained_windows
sys.path.insert(0, sys.argv[2])
from ab_split import spaced_medians  # noqa: E402  (runs nothing at import: guarded below)

dev, dt, M, hidden, inter = "cuda", torch.bfloat16, 8192, 4096, 14336
rows = list(_cuda.NATIVE.module.gated_configs())
pp, split = rows.index("pingpong_128x128_c2x1"), rows.index("pingpong_128x128_c2x2")
x = torch.randn(M, hidden, device=dev, dtype=dt)
w = torch.randn(2 * inter, hidden, device=dev, dtype=dt) / hidden**0.5
sampler = Sampler(); time.sleep(0.5)
for save in (False, True):
    fns = {"c2x1 (table)": lambda: _cuda.gated_linear_fwd(x, w, None, "silu", save, config=pp)}
    for sw, ra in ((8, 2), (2, 2), (4, 2), (2, 1), (4, 1), (8, 1)):
        fns[f"split sw{sw} {'N' if ra == 2 else 'M'}"] = (
            lambda sw=sw, ra=ra: _cuda.gated_linear_fwd(x, w, None, "silu", save, config=split, swizzle=sw, raster=ra))
    t = paired_medians(fns, rounds=30)
    wn = sustained_windows(fns, sampler, calls=30, rounds=3)
    sp = spaced_medians(fns, rounds=12)
    base = "c2x1 (table)"
    tw = {k: statistics.median(v[0] for v in wn[k]) for k in fns}
    print(f"== {hidden} -> 2 x {inter}, save P {save} (x: speed over {base})", flush=True)
    for k in fns:
        clk = statistics.mean(v[1] for v in wn[k]); pw = statistics.mean(v[2] for v in wn[k])
        print(f"  {k:16s} paired {t[k]*1e3:7.0f} us x{t[base]/t[k]:.3f} | windows {tw[k]*1e3:7.0f} us "
              f"x{tw[base]/tw[k]:.3f} {clk:5.0f} MHz {pw:4.0f} W | spaced {sp[k]*1e3:7.0f} us x{sp[base]/sp[k]:.3f}", flush=True)
sampler.stop()
