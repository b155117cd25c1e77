"""The Triton level: one program per (row, block of columns), fp32 math, one rounding on store.

One forward and one backward kernel for every gated activation (ACT, a constexpr: "silu" for
swiglu, "gelu"/"gelu_tanh" for geglu); the formulas are torch's (kp_fused_mlp.reference).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from kp_core.registry import on_device_of

from ..glu import grad_outputs

from .activations import activation_and_grad, apply_activation

BLOCK = 1024  # columns a program: 4 KB of bf16 per operand and row


@triton.jit
def _glu_fwd_kernel(G, U, Y, cols, stride_g, stride_u, ACT: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = c < cols
    g = tl.load(G + row * stride_g + c, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + row * stride_u + c, mask=mask, other=0.0).to(tl.float32)
    y = apply_activation(g, ACT) * u
    tl.store(Y + row * cols + c, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _glu_bwd_kernel(
    DY, G, U, DG, DU, cols, stride_dy, stride_g, stride_u, stride_out, ACT: tl.constexpr, BLOCK: tl.constexpr
):
    # d/dg [act(g) u] = u act'(g), d/du = act(g). DG and DU share a row stride: separate [rows, cols]
    # tensors (cols) or the two halves of one packed [rows, 2 * cols] gradient (2 * cols).
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = c < cols
    d = tl.load(DY + row * stride_dy + c, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + row * stride_g + c, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + row * stride_u + c, mask=mask, other=0.0).to(tl.float32)
    f, df = activation_and_grad(g, ACT)
    tl.store(DG + row * stride_out + c, (d * u * df).to(DG.dtype.element_ty), mask=mask)
    tl.store(DU + row * stride_out + c, (d * f).to(DU.dtype.element_ty), mask=mask)


def _grid(rows: int, cols: int):
    return (rows, triton.cdiv(cols, BLOCK))


def glu_fwd(gate: torch.Tensor, up: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    rows, cols = gate.shape
    y = torch.empty((rows, cols), dtype=gate.dtype, device=gate.device)
    if rows and cols:
        with on_device_of(gate):
            _glu_fwd_kernel[_grid(rows, cols)](
                gate, up, y, cols, gate.stride(0), up.stride(0), ACT=activation, BLOCK=BLOCK
            )
    return y


def glu_bwd(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, activation: str = "silu", packed: bool = False):
    """(dgate, dup); packed: (dgate_up, None), both halves written into one [rows, 2 * cols] tensor."""
    rows, cols = gate.shape
    dgate, dup, grads = grad_outputs(gate, up, packed)
    if rows and cols:
        with on_device_of(gate):
            _glu_bwd_kernel[_grid(rows, cols)](
                dy, gate, up, dgate, dup, cols, dy.stride(0), gate.stride(0), up.stride(0), dgate.stride(0),
                ACT=activation, BLOCK=BLOCK,
            )  # fmt: skip
    return grads
