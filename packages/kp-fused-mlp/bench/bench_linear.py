"""kp-fused-mlp benchmarks: linear_act (GEMM with bias and activation in the epilogue).

    python packages/kp-fused-mlp/bench/bench_linear.py [--quick] [--filter SUBSTR] [--out DIR] [--no-plot]

Cases (bf16, issue 18's shapes):
- `gemm`: the bare GEMM (no bias, activation "none") at 8192^3 and at the MLP projections with 8192
  tokens, against torch.mm (cuBLAS). Compute-bound: the ceiling is the measured GEMM peak.
- `linear_act`: x [tokens, hidden] @ W^T + b, then SiLU / GELU-tanh, at 1-8192 tokens of Llama-3-8B
  (4096 -> 14336) and a larger model (8192 -> 28672), against torch eager (F.linear, then the
  activation) and torch.compile of the same expression (fp32 epilogue, one rounding). At 1-64
  tokens the call streams the weights: those cases report GB/s against copy bandwidth.
- `linear_train_<act>`: forward and backward (gradients of x, weight and bias) at 8192 tokens on
  the MLP projections (up: hidden -> intermediate, down: intermediate -> hidden), against torch
  eager and torch.compile of the same expression. Acceptance (issue 18): kp-cuda >= 1.0x
  torch.compile on an H200.
The compute-bound cases (the GEMMs, linear_act past 64 tokens, the training steps) are also timed
under sustained load (`sustained` columns: windows of back-to-back calls, kp_core.bench.sustained_ms):
back to back the power limit sets the clock, and cuBLAS loses more there than kp's pingpong rows.
Impls: kp-cuda and kp-triton (forced backends; the Triton level has no backward), torch,
torch.compile; torch.mm for `gemm`; QuACK's GEMM and GEMM + activation (quack_baselines.py) where
it is installed, forward only (QuACK has no standalone differentiable linear + activation).
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from kp_core import bench

kp_fused_mlp = bench.require("kp_fused_mlp", "bench_linear", "pip install -e packages/kp-core -e packages/kp-fused-mlp")
import quack_baselines as quack  # noqa: E402  (beside this script; without QuACK its rows are skipped)

DTYPE, BF16 = torch.bfloat16, 2  # bytes per element
MLP = [(4096, 14336), (8192, 28672)]  # (hidden, intermediate)
TOKENS = (1, 16, 64, 128, 1024, 8192)
DECODE_MAX = 64  # tokens up to which the call is bound by reading the weights
QUICK = {"gemm": [(8192, 8192, 8192)], "linear_act": [(8192, 4096, 14336), (16, 4096, 14336)]}
TRAIN_TOKENS = 8192
CPU = {"gemm": [(16, 64, 32)], "linear_act": [(16, 64, 32)], "train": [(16, 64, 32)]}  # the no-GPU smoke run only
ACTS = {"silu": F.silu, "gelu_tanh": functools.partial(F.gelu, approximate="tanh")}


def ref_linear_act(x, w, b, act):  # the torch.compile baseline: fp32 epilogue, one rounding
    return ACTS[act]((x @ w.t()).float() + b.float()).to(x.dtype)


@functools.cache
def _compiled(act):
    return torch.compile(functools.partial(ref_linear_act, act=act), dynamic=False)


def _gemm_cases(shapes, device):
    for m, k, n in shapes:
        def make(m=m, k=k, n=n):
            return torch.randn(m, k, device=device, dtype=DTYPE), torch.randn(n, k, device=device, dtype=DTYPE)
        yield bench.Case(
            op="gemm", label=f"{m}x{k}x{n}", params={"m": m, "k": k, "n": n, "dtype": "bf16"}, make_inputs=make,
            flops=2 * m * n * k, ceiling="gemm", sustained=True,
            impls={"kp-cuda": lambda x, w: kp_fused_mlp.linear_act(x, w, backend="cuda"),
                   "kp-triton": lambda x, w: kp_fused_mlp.linear_act(x, w, backend="triton"),
                   "torch.mm": lambda x, w: torch.mm(x, w.t()),
                   "quack": lambda x, w: quack.gemm(x, w)})


def _linear_act_cases(shapes, device):
    for tokens, hidden, inter in shapes:
        for act in ACTS:
            def make(tokens=tokens, hidden=hidden, inter=inter):
                return (torch.randn(tokens, hidden, device=device, dtype=DTYPE),
                        torch.randn(inter, hidden, device=device, dtype=DTYPE) / hidden ** 0.5,
                        torch.randn(inter, device=device, dtype=DTYPE))
            decode = tokens <= DECODE_MAX
            yield bench.Case(
                op=f"linear_{act}", label=f"{tokens}x{hidden}->{inter}",
                params={"tokens": tokens, "hidden": hidden, "intermediate": inter, "dtype": "bf16"},
                make_inputs=make, flops=2 * tokens * hidden * inter,
                bytes=(inter * hidden + tokens * (hidden + inter) + inter) * BF16,
                ceiling="copy" if decode else "gemm", host_timing=decode, sustained=not decode,
                impls={"kp-cuda": lambda x, w, b, act=act: kp_fused_mlp.linear_act(x, w, b, act, backend="cuda"),
                       "kp-triton": lambda x, w, b, act=act: kp_fused_mlp.linear_act(x, w, b, act, backend="triton"),
                       "torch": lambda x, w, b, act=act: ACTS[act](F.linear(x, w, b)),
                       "torch.compile": lambda x, w, b, act=act: _compiled(act)(x, w, b),
                       "quack": lambda x, w, b, act=act: quack.linear_act(x, w, b, act)})


def _train_step(fn):
    def run(x, w, b, dy):
        return torch.autograd.grad(fn(x, w, b), (x, w, b), dy)
    return run


def _train_cases(shapes, device):
    for tokens, k, n in shapes:
        for act in ACTS:
            def make(tokens=tokens, k=k, n=n):
                return (torch.randn(tokens, k, device=device, dtype=DTYPE, requires_grad=True),
                        (torch.randn(n, k, device=device, dtype=DTYPE) / k ** 0.5).requires_grad_(True),
                        torch.randn(n, device=device, dtype=DTYPE, requires_grad=True),
                        torch.randn(tokens, n, device=device, dtype=DTYPE))
            yield bench.Case(
                op=f"linear_train_{act}", label=f"{tokens}x{k}->{n}",
                params={"tokens": tokens, "in": k, "out": n, "dtype": "bf16"}, make_inputs=make,
                flops=6 * tokens * n * k, ceiling="gemm", sustained=True,
                impls={"kp-cuda": _train_step(lambda x, w, b, act=act: kp_fused_mlp.linear_act(x, w, b, act, backend="cuda")),
                       "torch": _train_step(lambda x, w, b, act=act: ACTS[act](F.linear(x, w, b))),
                       "torch.compile": _train_step(lambda x, w, b, act=act: _compiled(act)(x, w, b))})


def cases(quick: bool, device: str):
    train = [(TRAIN_TOKENS, h, i) for h, i in MLP] + [(TRAIN_TOKENS, i, h) for h, i in MLP]
    if device == "cpu":
        shapes = CPU
    elif quick:
        shapes = {**QUICK, "train": train[:1] + train[2:3]}  # Llama-3-8B's up and down projections
    else:
        shapes = {"gemm": [(8192, 8192, 8192)] + [(8192, h, i) for h, i in MLP] + [(8192, i, h) for h, i in MLP],
                  "linear_act": [(t, h, i) for h, i in MLP for t in TOKENS], "train": train}
    yield from _gemm_cases(shapes["gemm"], device)
    yield from _linear_act_cases(shapes["linear_act"], device)
    yield from _train_cases(shapes["train"], device)


if __name__ == "__main__":
    raise SystemExit(bench.main(cases, suite="linear"))
