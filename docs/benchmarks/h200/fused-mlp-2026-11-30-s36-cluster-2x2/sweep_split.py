"""Session 36: the split launch (row 4) under scheduler overrides (swizzle x raster, applied to both
of its grids): the default swizzle 8 along N pads the quads' band of 204 tile columns to 208 (2%
more tiles); swizzle 2 pads nothing. Llama-3-8B's gated shape, 8192 tokens, bf16, without and with
P, against the table's c2x1 row: paired rounds, windows (clock, power), spaced calls.

    python sweep_split.py <kp-fused-mlp/tools>"""
import sys
import time
import torch
from kp_fused_mlp import _cuda
sys.path.insert(0, sys.argv[1])
from gemm_sustained import Sampler, three_regimes  # noqa: E402

dev, dt, M, hidden, inter = "cuda", torch.bfloat16, 8192, 4096, 14336
rows = list(_cuda.NATIVE.module.gated_configs())
pp, split = rows.index("pingpong_128x128_c2x1"), rows.index("pingpong_128x128_c2x2")
x = torch.randn(M, hidden, device=dev, dtype=dt)
w = torch.randn(2 * inter, hidden, device=dev, dtype=dt) / hidden**0.5
sampler = Sampler()
time.sleep(0.5)  # its first samples
for save in (False, True):
    fns = {"c2x1 (table)": lambda: _cuda.gated_linear_fwd(x, w, None, "silu", save, config=pp)}
    for sw, ra in ((8, 2), (2, 2), (4, 2), (2, 1), (4, 1), (8, 1)):
        fns[f"split sw{sw} {'N' if ra == 2 else 'M'}"] = (
            lambda sw=sw, ra=ra: _cuda.gated_linear_fwd(x, w, None, "silu", save, config=split, swizzle=sw, raster=ra))
    print(f"== {hidden} -> 2 x {inter}, save P {save} (x: speed over c2x1 (table))", flush=True)
    three_regimes(fns, sampler, "c2x1 (table)", calls=30, width=16)
sampler.stop()
