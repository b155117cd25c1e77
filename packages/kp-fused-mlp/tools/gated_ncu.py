"""The gated GEMM's table rows, forced, one call each between cudaProfilerStart / Stop: what ncu
measures with `--profile-from-start off` (DRAM and L2 bytes, clock, at a locked or free clock).

    ncu --profile-from-start off [--clock-control base|none] --metrics ... \\
        python packages/kp-fused-mlp/tools/gated_ncu.py HIDDEN INTER ROW [ROW ...]

8192 tokens, bf16, no saved pre-activations; ROW: gated_configs() names. Each row runs twice before
the profiled range (the interleaved weight built, the kernels loaded)."""
import sys

import torch

from kp_fused_mlp import _cuda


def main(argv) -> int:
    hidden, inter, names = int(argv[0]), int(argv[1]), argv[2:]
    x = torch.randn(8192, hidden, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2 * inter, hidden, device="cuda", dtype=torch.bfloat16) / hidden**0.5
    rows = list(_cuda.NATIVE.module.gated_configs())
    calls = [lambda c=rows.index(r): _cuda.gated_linear_fwd(x, w, None, "silu", False, config=c) for r in names]
    for f in calls:
        f()
        f()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for f in calls:
        f()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
