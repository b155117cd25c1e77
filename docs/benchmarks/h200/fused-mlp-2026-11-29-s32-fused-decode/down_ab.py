"""Session 31: linear_act SiLU training step 14336 -> 4096 at 8192 tokens, the new rows (save and dX
on the pingpong row) against the old (save coop_128x256, dX coop_256x192), dW coop_128x256 in both,
in the bench harness (flushed and sustained), with torch.compile."""
import torch
import torch.nn.functional as F
from kp_core import bench
from kp_fused_mlp import _cuda

rows = _cuda.NATIVE.module.gemm_configs()
PP, C256, C128 = (rows.index(r) for r in ("pingpong_128x128_c2x1", "coop_256x192_c1x2", "coop_128x256_c2x1"))
comp = torch.compile(lambda x, w, b: F.silu(F.linear(x, w, b)))


def manual(save_row, dx_row):
    def run(x, w, b, dy):
        y, z = _cuda.linear_act_train(x, w, b, "silu", config=save_row)
        dx, _, db = _cuda.linear_act_bwd(dy, x, w, z, "silu", True, False, True, config=dx_row)
        _, dw, _ = _cuda.linear_act_bwd(dy, x, w, z, "silu", False, True, False, config=C128)
        return y, dx, dw, db
    return run


def train(x, w, b, dy):
    return torch.autograd.grad(comp(x, w, b), (x, w, b), dy)


def cases(quick, device):
    M, K, N = 8192, 14336, 4096
    def make():
        return (torch.randn(M, K, device=device, dtype=torch.bfloat16, requires_grad=True),
                (torch.randn(N, K, device=device, dtype=torch.bfloat16) / K**0.5).requires_grad_(True),
                torch.randn(N, device=device, dtype=torch.bfloat16, requires_grad=True),
                torch.randn(M, N, device=device, dtype=torch.bfloat16))
    yield bench.Case(op="down_step", label="8192x14336->4096", params={"tokens": M}, make_inputs=make,
                     flops=6 * M * N * K, ceiling="gemm", sustained=True,
                     impls={"kp-new": manual(PP, PP), "kp-old": manual(C128, C256), "kp-save-old": manual(C128, PP),
                            "torch.compile": train})


if __name__ == "__main__":
    raise SystemExit(bench.main(cases, suite="down_ab"))
