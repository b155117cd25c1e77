"""kp-fused-mlp benchmarks: the gated MLP block (GatedMLP, gated_linear), bf16.

    python packages/kp-fused-mlp/bench/bench_gated_mlp.py [--quick] [--filter SUBSTR] [--out DIR] [--no-plot]

Cases, at Llama-3-8B's sizes (hidden 4096, intermediate 14336) and 1-8192 tokens, and at 8192
tokens also hidden 8192, intermediate 28672:
- `gated_mlp_fwd`: the whole block, down(silu(gate(x)) * up(x)). kp-cuda and kp-triton are
  GatedMLP at the cuda level (kp's sm90a GEMM against the interleaved copy of the packed weight,
  the gated activation in its epilogue; at 3-16 tokens on sm90 both projections in one kernel,
  csrc/decode_mlp.cu, and kp-cuda-2kernel the same module without it) and at the Triton level,
  each followed by torch's down projection; baselines: the unfused module as Hugging Face writes it (three nn.Linear, eager)
  and torch.compile of that module. Acceptance (issue 18): kp-triton >= 0.85x and kp-cuda
  >= 1.05x torch.compile at 8192 tokens. The cuda level's interleaved copy is built by the
  warm-up call (cached per weight), not timed.
- `gated_linear_fwd`: the fused half alone (x -> [tokens, intermediate]) against F.linear onto
  the packed weight then silu(gate) * up, eager and compiled.
- `gated_mlp_train`: forward and backward of the block (gradients of x and every weight).
QuACK (quack_baselines.py: its gated GEMM with the activation in the epilogue, then its down GEMM,
forward and backward, on the same weights) where it is installed.
Compute-bound from 1024 tokens (the ceiling is the measured GEMM peak; those cases are also timed
under sustained load, back to back, as a training step or a prefill runs them: the `sustained`
columns); at 1-64 tokens the call streams the weights (GB/s against copy bandwidth).
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from kp_core import bench
from torch import nn

kp_fused_mlp = bench.require("kp_fused_mlp", "bench_gated_mlp", "pip install -e packages/kp-core -e packages/kp-fused-mlp")
import quack_baselines as quack  # noqa: E402  (beside this script; without QuACK its rows are skipped)

DTYPE, BF16 = torch.bfloat16, 2  # bytes per element
MLP = (4096, 14336)  # Llama-3-8B (hidden, intermediate)
TOKENS = (1, 16, 64, 128, 1024, 4096, 8192)
QUICK = (8192,)
WIDE = (8192, 28672)  # hidden, intermediate: also run at 8192 tokens
CPU = [(16, 64, 96), (96, 64, 96)]  # the no-GPU smoke run only exercises the code
DECODE_MAX = 64


class UnfusedMLP(nn.Module):
    """Hugging Face's LlamaMLP, without transformers."""

    def __init__(self, hidden, inter, device):
        super().__init__()
        kw = {"bias": False, "device": device, "dtype": DTYPE}
        self.gate_proj, self.up_proj = nn.Linear(hidden, inter, **kw), nn.Linear(hidden, inter, **kw)
        self.down_proj = nn.Linear(inter, hidden, **kw)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


@functools.cache
def _modules(hidden, inter, device):
    """(unfused, compiled unfused, {"kp-triton": GatedMLP, "kp-cuda": GatedMLP, "kp-cuda-2kernel":
    GatedMLP without the fused decode kernel}, {"quack": its MLP} or {} without QuACK), one set of
    weights."""
    torch.manual_seed(0)
    unfused = UnfusedMLP(hidden, inter, device)
    kp = {}
    for name, backend in (("kp-cuda", "cuda"), ("kp-triton", "triton"), ("kp-cuda-2kernel", "cuda")):
        kp[name] = kp_fused_mlp.GatedMLP(hidden, inter, device=device, dtype=DTYPE, backend=backend)
        kp[name].load_state_dict(unfused.state_dict())
    kp["kp-cuda-2kernel"].fused_decode = False  # the decode path before the fused kernel, for the A/B
    others = {}
    if not quack.QUACK_MISSING and device != "cpu":
        others["quack"] = quack.gated_mlp(hidden, inter, "silu", gate_up_weight=kp["kp-cuda"].gate_up_weight,
                                          down_weight=unfused.down_proj.weight, device=device)  # fmt: skip
    return unfused, torch.compile(unfused, dynamic=False), kp, others


def _unfused_gated(x, w):  # the fused half as torch writes it: one GEMM onto the packed weight
    gate, up = F.linear(x, w).chunk(2, dim=-1)
    return F.silu(gate) * up


@functools.cache
def _compiled_gated():
    return torch.compile(_unfused_gated, dynamic=False)


def _quack_missing(*_):
    raise RuntimeError(quack.QUACK_MISSING or "QuACK runs on a GPU only")


def _no_grad(fn):
    def run(*args):
        with torch.no_grad():
            return fn(*args)
    return run


def _train_step(mlp):
    def run(x, dy):
        return torch.autograd.grad(mlp(x), (x, *mlp.parameters()), dy)
    return run


def cases(quick: bool, device: str):
    shapes = CPU if device == "cpu" else [(t, *MLP) for t in (QUICK if quick else TOKENS)] + [(8192, *WIDE)]
    for tokens, hidden, inter in shapes:
        unfused, compiled, kp, others = _modules(hidden, inter, device)
        w = kp["kp-cuda"].gate_up_weight.detach()
        params = {"tokens": tokens, "hidden": hidden, "intermediate": inter, "dtype": "bf16"}
        decode = tokens <= DECODE_MAX
        weights = 3 * hidden * inter * BF16

        def make(tokens=tokens, hidden=hidden):
            return (torch.randn(tokens, hidden, device=device, dtype=DTYPE),)
        yield bench.Case(  # inference: no gradient, so kp writes h alone (no saved pre-activations)
            op="gated_mlp_fwd", label=f"{tokens}x{hidden}->{inter}", params=params, make_inputs=make,
            flops=6 * tokens * hidden * inter, bytes=weights + tokens * 2 * hidden * BF16,
            ceiling="copy" if decode else "gemm", host_timing=decode, sustained=not decode,
            impls={**{k: _no_grad(m) for k, m in kp.items() if decode or k != "kp-cuda-2kernel"},
                   "torch": _no_grad(unfused),
                   "torch.compile": _no_grad(compiled), "quack": _no_grad(others.get("quack", _quack_missing))})
        yield bench.Case(
            op="gated_linear_fwd", label=f"{tokens}x{hidden}->{inter}", params=params, make_inputs=make,
            flops=4 * tokens * hidden * inter, bytes=2 * weights // 3 + tokens * (hidden + inter) * BF16,
            ceiling="copy" if decode else "gemm", host_timing=decode, sustained=not decode,
            impls={"kp-cuda": lambda x, w=w: kp_fused_mlp.gated_linear(x, w, backend="cuda"),
                   "kp-triton": lambda x, w=w: kp_fused_mlp.gated_linear(x, w, backend="triton"),
                   "torch": lambda x, w=w: _unfused_gated(x, w),
                   "torch.compile": lambda x, w=w: _compiled_gated()(x, w)})
        if decode:
            continue

        def make_train(tokens=tokens, hidden=hidden):
            return (torch.randn(tokens, hidden, device=device, dtype=DTYPE, requires_grad=True),
                    torch.randn(tokens, hidden, device=device, dtype=DTYPE))
        yield bench.Case(
            op="gated_mlp_train", label=f"{tokens}x{hidden}->{inter}", params=params, make_inputs=make_train,
            flops=18 * tokens * hidden * inter, ceiling="gemm", sustained=True,
            impls={**{k: _train_step(m) for k, m in kp.items() if k != "kp-cuda-2kernel"},
                   "torch": _train_step(unfused),
                   "torch.compile": _train_step(compiled),
                   "quack": _train_step(others["quack"]) if "quack" in others else _quack_missing})


if __name__ == "__main__":
    raise SystemExit(bench.main(cases, suite="gated_mlp"))
