"""Session 31: the gated GEMM's pingpong rows at 8192 x 4096 -> 2 x 14336 by scheduler setting
(swizzle x raster), with and without P, paired and flushed, against torch.compile."""
import sys
import torch
import torch.nn.functional as F
from kp_fused_mlp import _cuda
sys.path.insert(0, __file__.rsplit("/", 1)[0])
import rows  # noqa: E402
rows.FLUSHED = True

M, H, I = 8192, 4096, 14336
torch.manual_seed(0)
x = torch.randn(M, H, device="cuda", dtype=torch.bfloat16)
w = torch.randn(2 * I, H, device="cuda", dtype=torch.bfloat16) * H**-0.5
wg, wu = w[:I].contiguous(), w[I:].contiguous()


@torch.compile
def unfused(x, wg, wu):
    return F.silu(F.linear(x, wg)) * F.linear(x, wu)


names = _cuda.NATIVE.module.gated_configs()
for save in (False, True):
    impls = {"torch.compile unfused": lambda: unfused(x, wg, wu)}
    for row in ("pingpong_128x128_c2x1", "pingpong_128x128_c1x2"):
        for sw in (1, 2, 4, 8):
            for raster, rname in ((1, "M"), (2, "N")):
                impls[f"{row} s{sw} {rname}"] = (lambda c=names.index(row), sw=sw, r=raster: _cuda.gated_linear_fwd(
                    x, w, None, "silu", save, config=c, swizzle=sw, raster=r))
    rows.compare(f"gated fwd {M} x {H} -> 2 x {I}" + (" saving P" if save else ""), impls, "torch.compile unfused",
                 n=20, rounds=1, prounds=20)
