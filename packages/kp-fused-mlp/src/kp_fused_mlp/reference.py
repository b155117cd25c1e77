"""The reference level: plain PyTorch, computed in fp32 and rounded once to the input dtype.

Autograd differentiates it (to any order, forward mode too); `swiglu_bwd` is the same derivative
written out, which the registered backward op runs at this level.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def swiglu_fwd(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    acc = torch.promote_types(gate.dtype, torch.float32)
    return (F.silu(gate.to(acc)) * up.to(acc)).to(gate.dtype)


def swiglu_bwd(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor):
    """d/dgate [g s(g) u] = dy u s (1 + g (1 - s)),  d/dup = dy g s,  s = sigmoid(g)."""
    acc = torch.promote_types(gate.dtype, torch.float32)
    d, g, u = dy.to(acc), gate.to(acc), up.to(acc)
    s = torch.sigmoid(g)
    return (d * u * s * (1 + g * (1 - s))).to(gate.dtype), (d * g * s).to(up.dtype)


# The activations of linear_act, by name (kp::gemm::Act codes follow this order).
ACTIVATIONS = {
    "none": lambda t: t,
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
    "silu": F.silu,
}


def linear_act_fwd(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias,
    activation: str,
    *,
    acc: torch.dtype = torch.float32,
    out_dtype=None,
) -> torch.Tensor:
    """act(x @ weight^T + bias): x [..., K], weight [N, K], bias [N] or None.

    The matmul, bias and activation in `acc` (fp32 for the backends, fp64 for the oracle), rounded
    once to `out_dtype` (x's dtype): what the cuda level's GEMM epilogue computes from its fp32
    accumulators. torch's own bf16 F.linear then F.gelu rounds twice.
    """
    y = F.linear(x.to(acc), weight.to(acc), None if bias is None else bias.to(acc))
    return ACTIVATIONS[activation](y).to(out_dtype or x.dtype)
