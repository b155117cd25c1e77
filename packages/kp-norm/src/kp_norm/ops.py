"""kp-norm's levels and its two ops, `kp_norm::norm_fwd` and `kp_norm::norm_bwd`, with their fakes
and autograd (kp_core.op): what torch.compile traces, opcheck checks, and eager grad calls run
(through `NORM.apply`, without the dispatcher). The checks and public functions are in norm.py.
"""
from __future__ import annotations

import torch
from kp_core import registry
from kp_core.op import AutogradOp, Levels, as_rows, empty

LEVELS = Levels("kp_norm", {"cuda": "kp_norm._cuda", "triton": "kp_norm.triton.norm", "reference": "kp_norm.reference"})
"""Facts a level's `supports` reads: device type and index, x dtype, weight dtype, residual dtype."""


def describe_backends() -> list:
    """Lines for `python -m kp_core`: what `auto` picks for bf16 on each device."""
    return LEVELS.describe(torch.bfloat16, torch.bfloat16, None)


# ---------------------------------------------------------------------------------------------
# torch.library registration (what torch.compile and opcheck see)


def _op_fwd(x, residual, weight, bias, eps, is_rms, weight_offset, residual_dtype, save_stats, backend):
    # residual_dtype None: torch's promotion of x and residual, as the public functions default to,
    # so every implementation and the fake agree on it.
    if residual is not None:
        residual_dtype = residual_dtype or torch.promote_types(x.dtype, residual.dtype)
        residual = residual if residual.dtype == residual_dtype else residual.to(residual_dtype)
    impl = LEVELS.impl(backend, "norm_fwd")
    return impl(x, residual, weight, bias, eps, is_rms, weight_offset, residual_dtype, save_stats)


def _op_fwd_fake(x, residual, weight, bias, eps, is_rms, weight_offset, residual_dtype, save_stats, backend):
    residual_dtype = residual_dtype or (None if residual is None else torch.promote_types(x.dtype, residual.dtype))
    rows = x.shape[0]
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    res_out = empty(x) if residual is None else x.new_empty(x.shape, dtype=residual_dtype)
    rstd = x.new_empty((rows,), dtype=torch.float32) if save_stats else empty(x)
    mean = x.new_empty((rows,), dtype=torch.float32) if save_stats and not is_rms else empty(x)
    return y, res_out, mean, rstd


def _op_bwd_fake(dy, x, dres, weight, mean, rstd, is_rms, weight_offset, need_dw, need_db, backend):
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    cols = x.shape[1]
    grad_dtype = weight.dtype if weight is not None else dy.dtype
    dw = x.new_empty((cols,), dtype=grad_dtype) if need_dw and weight is not None else empty(x)
    db = x.new_empty((cols,), dtype=grad_dtype) if need_db else empty(x)
    return dx, dw, db


def _setup_context(ctx, inputs, output):
    x, residual, weight, bias, eps, is_rms, weight_offset, residual_dtype, save_stats, backend = inputs
    _, res_out, mean, rstd = output
    normalized = x if residual is None else res_out
    ctx.save_for_backward(normalized, weight, mean if not is_rms else None, rstd)
    ctx.meta = (is_rms, weight_offset, backend, residual is not None, x.dtype)
    ctx.needs = (weight is not None and ctx.needs_input_grad[2], bias is not None and ctx.needs_input_grad[3])
    # The statistics (and res_out without a residual) take no gradient, and no zeros are made for
    # outputs nobody differentiated: each zero tensor is an allocation and a launch per backward.
    ctx.mark_non_differentiable(*[t for t in (mean, rstd) + (() if residual is not None else (res_out,)) if t is not None])
    ctx.set_materialize_grads(False)


def _backward(ctx, run_bwd, dy, dres, dmean, drstd):
    normalized, weight, mean, rstd = ctx.saved_tensors
    is_rms, weight_offset, backend, fused, x_dtype = ctx.meta
    need_dw, need_db = ctx.needs
    if dy is None:  # only the residual output was used downstream
        dy = torch.zeros(normalized.shape, dtype=x_dtype, device=normalized.device)
    # Gradients often arrive expanded (the backward of a sum is a stride-0 view of ones).
    dy = as_rows(dy, dy.shape[1])
    if dres is not None:
        dres = as_rows(dres, dres.shape[1])
    twice = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (dy, dres, normalized, weight)
    )  # fmt: skip
    with torch.no_grad():
        dh, dw, db = run_bwd(dy, normalized, dres if fused else None, weight, mean, rstd, is_rms, weight_offset, need_dw, need_db, backend)
        dx = dh if dh.dtype == x_dtype else dh.to(x_dtype)
    grads = (dx, (dh if fused else None), (dw if need_dw else None), (db if need_db else None))
    if twice:  # create_graph=True: these gradients carry a node that refuses a second differentiation
        grads = registry.once_differentiable(grads, f"kp_norm: the {backend} backend")
    return (*grads, None, None, None, None, None, None)


NORM = AutogradOp(
    "kp_norm",
    LEVELS,
    fwd_schema="norm_fwd(Tensor x, Tensor? residual, Tensor? weight, Tensor? bias, float eps, bool is_rms, "
    "float weight_offset, ScalarType? residual_dtype, bool save_stats, str backend) -> (Tensor, Tensor, Tensor, Tensor)",
    fwd_fake=_op_fwd_fake,
    bwd_schema="norm_bwd(Tensor dy, Tensor x, Tensor? dres, Tensor? weight, Tensor? mean, Tensor rstd, bool is_rms, "
    "float weight_offset, bool need_dw, bool need_db, str backend) -> (Tensor, Tensor, Tensor)",
    bwd_fake=_op_bwd_fake,
    setup_context=_setup_context,
    backward=_backward,
    fwd=_op_fwd,
)
NORM_FWD, NORM_BWD = NORM.fwd_op, NORM.bwd_op
