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
