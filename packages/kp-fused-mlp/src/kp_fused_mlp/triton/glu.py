"""The Triton level: one program per (row, block of columns), fp32 math, one rounding on store."""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from kp_core.registry import on_device_of

BLOCK = 1024  # columns a program: 4 KB of bf16 per operand and row


@triton.jit
def _swiglu_fwd_kernel(G, U, Y, cols, stride_g, stride_u, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = c < cols
    g = tl.load(G + row * stride_g + c, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + row * stride_u + c, mask=mask, other=0.0).to(tl.float32)
    y = g * tl.sigmoid(g) * u
    tl.store(Y + row * cols + c, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_bwd_kernel(DY, G, U, DG, DU, cols, stride_dy, stride_g, stride_u, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = c < cols
    d = tl.load(DY + row * stride_dy + c, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + row * stride_g + c, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + row * stride_u + c, mask=mask, other=0.0).to(tl.float32)
    s = tl.sigmoid(g)
    tl.store(DG + row * cols + c, (d * u * s * (1.0 + g * (1.0 - s))).to(DG.dtype.element_ty), mask=mask)
    tl.store(DU + row * cols + c, (d * g * s).to(DU.dtype.element_ty), mask=mask)


def _grid(rows: int, cols: int):
    return (rows, triton.cdiv(cols, BLOCK))


def swiglu_fwd(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    rows, cols = gate.shape
    y = torch.empty((rows, cols), dtype=gate.dtype, device=gate.device)
    if rows and cols:
        with on_device_of(gate):
            _swiglu_fwd_kernel[_grid(rows, cols)](gate, up, y, cols, gate.stride(0), up.stride(0), BLOCK=BLOCK)
    return y


def swiglu_bwd(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor):
    rows, cols = gate.shape
    dgate = torch.empty((rows, cols), dtype=gate.dtype, device=gate.device)
    dup = torch.empty((rows, cols), dtype=up.dtype, device=up.device)
    if rows and cols:
        with on_device_of(gate):
            _swiglu_bwd_kernel[_grid(rows, cols)](
                dy, gate, up, dgate, dup, cols, dy.stride(0), gate.stride(0), up.stride(0), BLOCK=BLOCK
            )
    return dgate, dup
