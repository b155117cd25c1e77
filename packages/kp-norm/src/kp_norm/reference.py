"""The reference level: plain PyTorch, written for clarity. It also serves as the float64 oracle.

Every backend implements these two functions with the same arguments and the same rounding:
the residual sum is rounded to `residual_dtype` and that rounded value is what gets normalized;
all other math is in `acc` (fp32 for the backends, fp64 for the oracle) and rounded once at the end.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F


def norm_fwd(
    x: torch.Tensor,
    residual: Optional[torch.Tensor],
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    eps: float,
    is_rms: bool,
    weight_offset: float,
    residual_dtype: Optional[torch.dtype],
    save_stats: bool,
    *,
    acc: torch.dtype = torch.float32,
    out_dtype: Optional[torch.dtype] = None,
):
    """x, residual: [M, N]; weight, bias: [N]. Returns (y, residual_out, mean, rstd).

    Where torch's own op computes this very function (no statistics wanted, fp32 math, output,
    weight and bias of x's dtype, no offset), the backends' reference *is* that op: several times
    faster than the formula on CPU, where `auto` runs this level, and as accurate.
    """
    residual_out = None
    if residual is not None:
        residual_out = (x.to(acc) + residual.to(acc)).to(residual_dtype)
    if not save_stats and acc == torch.float32 and out_dtype is None and _torch_op_serves(x, residual_out, weight, bias, weight_offset, is_rms):
        h = x if residual_out is None else residual_out
        shape = (h.shape[-1],)
        y = F.rms_norm(h, shape, weight, eps) if is_rms else F.layer_norm(h, shape, weight, bias, eps)
        return y, residual_out, None, None
    h = x.to(acc) if residual_out is None else residual_out.to(acc)
    mean = None
    if is_rms:
        rstd = torch.rsqrt(h.square().mean(-1) + eps)
        xhat = h * rstd[:, None]
    else:
        # Two passes: the mean of what the first mean left over corrects it. Rows whose mean is
        # large against their spread (1e4 against 1e-3) otherwise lose every digit of the
        # centered values to the rounding of the mean.
        mean = h.mean(-1)
        centered = h - mean[:, None]
        shift = centered.mean(-1)
        centered = centered - shift[:, None]
        mean = mean + shift
        rstd = torch.rsqrt(centered.square().mean(-1) + eps)
        xhat = centered * rstd[:, None]
    y = xhat
    if weight is not None:
        y = y * (weight.to(acc) + weight_offset)
    if bias is not None:
        y = y + bias.to(acc)
    y = y.to(out_dtype or x.dtype)
    if not save_stats:
        mean = rstd = None
    return y, residual_out, mean, rstd


def _torch_op_serves(x, residual_out, weight, bias, weight_offset, is_rms) -> bool:
    same = x.dtype
    return (
        weight_offset == 0
        # LayerNorm only in fp32 and over more than one column. torch's CPU LayerNorm of 16-bit
        # rows with a large mean against their spread loses what the two-pass formula keeps
        # (fuzzed: fp16 rows of mean 3000, std 10: dw 3e-2 off, dx 4-70%; a constant bf16 row gave
        # -0.05 for 0). A one-column LayerNorm is all cancellation (x_hat = 0, y = bias): torch
        # leaves rounding residue in x_hat and so in dw, the formula gives exact zeros.
        and (is_rms or (same == torch.float32 and x.shape[-1] > 1))
        and (residual_out is None or residual_out.dtype == same)
        and (weight is None or weight.dtype == same)
        and (bias is None or bias.dtype == same)
        and (same not in (torch.float16, torch.bfloat16) or _RMS_NORM_EXACT_IN_16_BITS)
    )


def _rms_norm_exact_in_16_bits() -> bool:
    """Whether torch's rms_norm of a 16-bit x (and weight, or none) computes this level's function
    bit for bit: fp32 math, rounded once. torch 2.6 rounds x_hat to x's dtype before the weight
    (Llama's order) and rounds some x_hat an ulp apart even without one; there the formula serves
    16-bit calls. A probe, not a version check; where it cannot run, the formula serves."""
    try:
        g = torch.Generator().manual_seed(0)
        for dtype in (torch.bfloat16, torch.float16):
            x = torch.randn(8, 64, generator=g).to(dtype)
            for w in (None, (1 + 0.3 * torch.randn(64, generator=g)).to(dtype)):
                want, _, _, _ = norm_fwd(x, None, w, None, 1e-6, True, 0.0, None, True)
                if not torch.equal(F.rms_norm(x, (64,), w, 1e-6), want):
                    return False
        return True
    except Exception:
        return False


_RMS_NORM_EXACT_IN_16_BITS = _rms_norm_exact_in_16_bits()


def norm_bwd(
    dy: torch.Tensor,
    x: torch.Tensor,
    dres: Optional[torch.Tensor],
    weight: Optional[torch.Tensor],
    mean: Optional[torch.Tensor],
    rstd: torch.Tensor,
    is_rms: bool,
    weight_offset: float,
    need_dw: bool,
    need_db: bool,
    *,
    acc: torch.dtype = torch.float32,
):
    """Gradients of norm_fwd given the saved statistics. x is the tensor that was normalized.

    With g = dy * w_eff and xhat the normalized input:
      RMSNorm   dx = rstd * (g - xhat * mean(g * xhat))
      LayerNorm dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
    plus the gradient of the residual output, if any. Returns (dx, dw, db).
    """
    dyf = dy.to(acc)
    r = rstd.to(acc)[:, None]
    xhat = x.to(acc) * r if is_rms else (x.to(acc) - mean.to(acc)[:, None]) * r
    g = dyf * (weight.to(acc) + weight_offset) if weight is not None else dyf
    dx = g - xhat * (g * xhat).mean(-1, keepdim=True)
    if not is_rms:
        dx = dx - g.mean(-1, keepdim=True)
    dx = dx * r
    if dres is not None:
        dx = dx + dres.to(acc)
    grad_dtype = weight.dtype if weight is not None else dy.dtype
    dw = (dyf * xhat).sum(0).to(grad_dtype) if need_dw and weight is not None else None
    db = dyf.sum(0).to(grad_dtype) if need_db else None
    return dx.to(x.dtype), dw, db
