"""kp-fused-mlp benchmarks: the decode path (1-64 tokens), where a linear layer's time is the time
to read its weight once. Every row reports GB/s against the copy bandwidth measured in the same run.

    python packages/kp-fused-mlp/bench/bench_decode.py [--quick] [--filter SUBSTR] [--out DIR] [--no-plot]

Cases (bf16), at 1, 2, 8, 16, 32 and 64 tokens:
- `decode_linear`: x [tokens, K] @ W^T, no bias or activation, for Llama-3-8B's up and down
  projections (4096 -> 14336, 14336 -> 4096) and a larger model's (8192 -> 28672, 28672 -> 8192).
  Impls: kp-cuda (linear_act's cuda level: the decode kernels up to the cut of
  csrc/decode_table.h, 8 or 16 tokens by shape, the GEMM above), kp-cuda-decode (the decode
  kernels forced, also at 64 tokens: where the cut should be), kp-cuda-mma8 (the decode_m8 mma
  row forced at <= 8 tokens: what the fma rows at 1-2 tokens replace),
  kp-cuda-gemm (kp's GEMM forced: its pingpong 64 x 128 row, what decode ran on before), torch
  (F.linear: cuBLAS) and torch.compile of it.
- `decode_gated_mlp`: the whole block down(silu(gate(x)) * up(x)) at (4096, 14336) and (8192,
  28672). Impls: kp-cuda (GatedMLP, auto: at 3-16 tokens on sm90 both projections in one kernel,
  csrc/decode_mlp.cu; else gated_linear's decode kernel and the down projection through
  linear_act), kp-cuda-2kernel (the same without the fused kernel), kp-triton (GatedMLP at the Triton level, cuBLAS down projection), torch
  (the unfused module, eager) and torch.compile of it.
Acceptance (issue 18): GatedMLP forward at 1 and 16 tokens >= 85% of copy bandwidth (torch.compile
~78%). The weights (117 MB and up) are larger than the H200's L2 (50 MB), and the timer flushes
the L2 before each call (kp_core.bench.timing), so every call reads them from HBM.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from kp_core import bench

kp_fused_mlp = bench.require("kp_fused_mlp", "bench_decode", "pip install -e packages/kp-core -e packages/kp-fused-mlp")
from bench_gated_mlp import UnfusedMLP, _no_grad  # noqa: E402  (this folder is on sys.path)
from kp_fused_mlp import _cuda  # noqa: E402

DTYPE, BF16 = torch.bfloat16, 2  # bytes per element
LINEAR = [(4096, 14336), (14336, 4096), (8192, 28672), (28672, 8192)]  # (K, N)
MLP = [(4096, 14336), (8192, 28672)]  # (hidden, intermediate)
TOKENS = (1, 2, 8, 16, 32, 64)
QUICK = {"linear": [(4096, 14336), (14336, 4096)], "mlp": [(4096, 14336)], "tokens": (1, 16)}
CPU = {"linear": [(64, 96)], "mlp": [(64, 96)], "tokens": (1,)}  # the no-GPU smoke run only


@functools.cache
def _modules(hidden, inter, device):
    """(unfused, compiled unfused, kp GatedMLP auto, kp GatedMLP triton, kp GatedMLP without the fused
    decode kernel), one set of weights."""
    torch.manual_seed(0)
    unfused = UnfusedMLP(hidden, inter, device).eval()
    kp = kp_fused_mlp.GatedMLP(hidden, inter, device=device, dtype=DTYPE).eval()
    kp.load_state_dict(unfused.state_dict())
    kp_triton = kp_fused_mlp.GatedMLP(hidden, inter, device=device, dtype=DTYPE, backend="triton").eval()
    kp_triton.load_state_dict(unfused.state_dict())
    kp_2kernel = kp_fused_mlp.GatedMLP(hidden, inter, device=device, dtype=DTYPE).eval()
    kp_2kernel.load_state_dict(unfused.state_dict())
    kp_2kernel.fused_decode = False
    return unfused, torch.compile(unfused, dynamic=False), kp, kp_triton, kp_2kernel


@functools.cache
def _compiled_linear():
    return torch.compile(F.linear, dynamic=False)


def _forced(config, row=None):
    """linear_act's cuda level with a config forced (its index in gemm_configs()), and a decode row."""
    def run(x, w):
        return _cuda.linear_act_fwd(x, w, None, "none", config=config, decode_row=row)
    return run


def _linear_cases(shapes, tokens, device):
    forced = {}
    if device != "cpu" and _cuda.NATIVE.loaded:
        forced = {"kp-cuda-decode": _forced(_cuda.decode_config()), "kp-cuda-gemm": _forced(0)}
    for k, n in shapes:
        for t in tokens:
            def make(t=t, k=k, n=n):
                return (torch.randn(t, k, device=device, dtype=DTYPE),
                        torch.randn(n, k, device=device, dtype=DTYPE) / k ** 0.5)
            yield bench.Case(
                op="decode_linear", label=f"{t}x{k}->{n}", params={"tokens": t, "k": k, "n": n, "dtype": "bf16"},
                make_inputs=make, flops=2 * t * n * k, bytes=(n * k + t * (k + n)) * BF16, ceiling="copy",
                host_timing=True, sweep="tokens",
                impls={"kp-cuda": lambda x, w: kp_fused_mlp.linear_act(x, w, backend="cuda"), **forced,
                       **({"kp-cuda-mma8": _forced(_cuda.decode_config(), "decode_m8")} if forced and t <= 8 else {}),
                       "torch": lambda x, w: F.linear(x, w),
                       "torch.compile": lambda x, w: _compiled_linear()(x, w)})


def _mlp_cases(shapes, tokens, device):
    for hidden, inter in shapes:
        unfused, compiled, kp, kp_triton, kp_2kernel = _modules(hidden, inter, device)
        for t in tokens:
            def make(t=t, hidden=hidden):
                return (torch.randn(t, hidden, device=device, dtype=DTYPE),)
            yield bench.Case(
                op="decode_gated_mlp", label=f"{t}x{hidden}->{inter}",
                params={"tokens": t, "hidden": hidden, "intermediate": inter, "dtype": "bf16"}, make_inputs=make,
                flops=6 * t * hidden * inter, bytes=(3 * hidden * inter + 2 * t * hidden) * BF16, ceiling="copy",
                host_timing=True, sweep="tokens",
                impls={"kp-cuda": _no_grad(kp), "kp-cuda-2kernel": _no_grad(kp_2kernel), "kp-triton": _no_grad(kp_triton),
                       "torch": _no_grad(unfused),
                       "torch.compile": _no_grad(compiled)})


def cases(quick: bool, device: str):
    shapes = CPU if device == "cpu" else QUICK if quick else {"linear": LINEAR, "mlp": MLP, "tokens": TOKENS}
    yield from _linear_cases(shapes["linear"], shapes["tokens"], device)
    yield from _mlp_cases(shapes["mlp"], shapes["tokens"], device)


if __name__ == "__main__":
    raise SystemExit(bench.main(cases, suite="decode"))
