"""RMSNorm and LayerNorm, plain or fused with a residual add: the checks, the one entry point of the
family, the eager no-grad fast path, and the public functions.

Eager calls run the chosen level directly (`NORM.apply` when a gradient is needed); under
torch.compile they go through the registered ops of ops.py.
"""
from __future__ import annotations

from typing import Optional

import torch
from kp_core import registry, requested_backend
from kp_core.dtypes import FLOATING
from kp_core.op import FastPath, as_rows, check_tensor, saveable

from . import _cuda
from .ops import LEVELS, NORM, NORM_FWD

# ---------------------------------------------------------------------------------------------
# Checks and the one entry point of the family


def _check_param(name: str, t: Optional[torch.Tensor], x: torch.Tensor, shape, op: str):
    if t is None:
        return None
    if not (isinstance(t, torch.Tensor) and t.dtype in FLOATING and t.device == x.device and t.shape == shape):
        check_tensor(op, name, t, like=x, dtypes=FLOATING, shape=shape, what_shape=" (x's normalized dims)")
    return t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)


def _check_residual(op, x, residual, residual_dtype):
    check_tensor(op, "residual", residual, like=x, dtypes=FLOATING, shape=x.shape)
    if residual_dtype is not None and residual_dtype not in FLOATING:
        raise TypeError(f"{op}: residual_dtype must be float32, float16 or bfloat16, got {residual_dtype}")


def norm(op: str, x, residual, weight, bias, eps, *, is_rms: bool, weight_offset: float = 0.0,
         residual_dtype=None, backend=None, normalized_ndim: Optional[int] = None):  # fmt: skip
    """Validate, flatten to rows, pick the level, run. Returns (y, residual_out or None)."""
    given = (weight, bias, weight_offset)  # as passed: a narrow residual_dtype re-enters with them
    if not isinstance(x, torch.Tensor) or x.dtype not in FLOATING:
        check_tensor(op, "x", x, dtypes=FLOATING)
    nd = normalized_ndim or (weight.dim() if isinstance(weight, torch.Tensor) else 1)
    if x.dim() < nd or nd < 1:
        raise ValueError(f"{op}: x of shape {tuple(x.shape)} has fewer than the {nd} normalized dims")
    norm_shape = x.shape[x.dim() - nd :]
    cols = 1
    for s in norm_shape:
        cols *= s
    if cols == 0:
        raise ValueError(f"{op}: cannot normalize over zero elements (x has shape {tuple(x.shape)})")
    weight = _check_param("weight", weight, x, norm_shape, op)
    bias = _check_param("bias", bias, x, norm_shape, op)
    if weight is not None and bias is not None and bias.dtype != weight.dtype:
        raise TypeError(f"{op}: weight is {weight.dtype} but bias is {bias.dtype}; give them one dtype")
    if bias is not None and weight is None:
        # The kernels take a bias only beside a weight: a weight of ones is the same function.
        weight, weight_offset = torch.ones_like(bias), 0.0
    if eps is None:
        eps = torch.finfo(x.dtype).eps
    elif not eps >= 0:
        raise ValueError(f"{op}: eps must be >= 0, got {eps}")
    if residual is not None:
        _check_residual(op, x, residual, residual_dtype)
        promoted = torch.promote_types(x.dtype, residual.dtype)
        residual_dtype = residual_dtype or promoted
        if torch.promote_types(promoted, residual_dtype) != residual_dtype:
            return _narrow_residual(op, x, residual, given, eps, is_rms, residual_dtype, promoted, backend, nd)
        if residual.dtype != residual_dtype:  # widening: exact
            residual = residual.to(residual_dtype)
        residual = as_rows(residual, cols)
    else:
        residual_dtype = None

    x2 = as_rows(x, cols)
    w_dtype = weight.dtype if weight is not None else None
    grad = torch.is_grad_enabled() and (
        x.requires_grad
        or (residual is not None and residual.requires_grad)
        or (weight is not None and weight.requires_grad)
        or (bias is not None and bias.requires_grad)
    )
    args = (x2, residual, weight, bias, float(eps), is_rms, float(weight_offset), residual_dtype, grad)
    if registry.is_compiling():
        name = LEVELS.traced(backend, x.device, x.dtype, w_dtype, residual_dtype)
        y, res_out, _, _ = NORM_FWD(*args, name)
        res_out = res_out if residual is not None else None
    else:
        name = LEVELS.resolve(backend, x.device, x.dtype, w_dtype, residual_dtype)
        if grad and (x2.is_inference() or (weight is not None and weight.is_inference())):
            # Autograd saves them (kp's levels, and torch's own CUDA norm the reference calls).
            args = (saveable(x2), residual, saveable(weight)) + args[3:]
        if grad and name != "reference":
            y, res_out, _, _ = NORM.apply(*args, name)
        else:
            # The reference level is plain PyTorch: autograd differentiates it to any order, in
            # forward mode too, and saves what it needs itself.
            y, res_out, _, _ = LEVELS.impl(name, "norm_fwd")(*args[:-1], False)
    if y.shape != x.shape:
        y = y.view(x.shape)
        res_out = res_out.view(x.shape) if res_out is not None else None
    return y, res_out


def _narrow_residual(op, x, residual, given, eps, is_rms, residual_dtype, promoted, backend, nd):
    """residual_dtype narrower than x + residual: add at the promoted precision and round once,
    exactly as the unfused `(x + residual).to(residual_dtype)`, then normalize that. (Rounding the
    residual first and adding in residual_dtype would round twice.) A rare configuration: one
    extra pass over memory."""
    h = (x.to(promoted) + residual.to(promoted)).to(residual_dtype)
    # Normalized at a precision that holds both h and the output dtype, so y is rounded once.
    inner = h if h.dtype == x.dtype else h.to(torch.promote_types(h.dtype, x.dtype))
    weight, bias, weight_offset = given
    y, _ = norm(op, inner, None, weight, bias, eps, is_rms=is_rms, weight_offset=weight_offset, backend=backend,
                normalized_ndim=nd)  # fmt: skip
    return (y if y.dtype == x.dtype else y.to(x.dtype)), h


# ---------------------------------------------------------------------------------------------
# The eager inference fast path


def _make_fast(requested, is_rms, x, weight, bias):
    """A runner of contiguous rows for this signature, or False where the general path must serve."""
    cols = x.shape[-1]
    ok = (
        x.dtype in FLOATING and weight.dtype in FLOATING and x.dim() >= 1 and cols >= 1
        and weight.dim() == 1 and weight.shape[0] == cols and weight.device == x.device
        and (bias is None or (bias.dtype == weight.dtype and bias.device == x.device and bias.shape == weight.shape))
    )  # fmt: skip
    if not ok:
        return False  # the general path explains what is wrong
    name = LEVELS.select(requested, x.device.type, x.device.index, x.dtype, weight.dtype, None)
    if name == "cuda" and weight.dtype in (x.dtype, torch.float32):
        return _cuda.inference_fwd(x.dtype, weight.dtype, None if bias is None else bias.dtype, x.device.index)
    impl = LEVELS.impl(name, "norm_fwd")
    return lambda x2, w, b, eps, rms, offset, rows, cols: impl(x2, None, w, b, eps, rms, offset, None, False)[0]


# Key: (backend asked for, is_rms, x dtype, x device, hidden, weight dtype, device and shape, bias
# (dtype, device, shape) or None): every fact the runner's skipped checks read.
_FAST = FastPath(_make_fast)
_forward_ad, _functorch_level = torch.autograd.forward_ad, torch._C._functorch.maybe_current_level


def _fast_forward(x, weight, bias, eps, is_rms, weight_offset, backend):
    """Eager, no-grad calls with a weight on contiguous tensors: skip re-validating what a cached
    runner already checked for this signature. None when the call needs the general path.

    A 4-row call costs ~10 us of host time, against which each tensor attribute read here is
    ~0.05-0.1 us: the checks are ordered so the common case reads each attribute once (x.shape
    serves the rank, the hidden size and the launcher's rows), and grad mode is only asked about
    when a tensor requires grad."""
    if type(x) is not torch.Tensor or type(weight) is not torch.Tensor or registry.is_compiling():
        return None
    if _forward_ad._current_level >= 0 or _functorch_level() is not None:  # transforms_active(), inlined
        return None
    if bias is not None and (type(bias) is not torch.Tensor or not bias.is_contiguous()):
        return None
    if (x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)) and torch.is_grad_enabled():
        return None
    shape = x.shape
    if not shape or not x.is_contiguous() or not weight.is_contiguous():
        return None
    cols = shape[-1]
    requested = requested_backend(backend)
    key = (requested, is_rms, x.dtype, x.device, cols, weight.dtype, weight.device, weight.shape,
           None if bias is None else (bias.dtype, bias.device, bias.shape))  # fmt: skip
    run = _FAST.get(key, requested, is_rms, x, weight, bias)
    if run is None:
        return None
    if eps is None:
        eps = torch.finfo(x.dtype).eps
    elif not eps >= 0:
        return None
    if len(shape) == 2:
        return run(x, weight, bias, float(eps), is_rms, float(weight_offset), shape[0], cols)
    rows = x.numel() // cols
    return run(x.view(-1, cols), weight, bias, float(eps), is_rms, float(weight_offset), rows, cols).view(shape)


# ---------------------------------------------------------------------------------------------
# Public functions (exported by __init__.py)


def rms_norm(x, weight=None, eps=None, *, weight_offset=0.0, backend=None):
    """RMSNorm over the trailing `weight.dim()` dims of x (the last dim without a weight).

    y = x / sqrt(mean(x^2) + eps) * (weight + weight_offset), in fp32, rounded once to x.dtype.
    `eps=None` means torch.finfo(x.dtype).eps, as in torch.nn.functional.rms_norm.
    `weight_offset=1.0` gives Gemma's (1 + weight), added in fp32.
    """
    if weight is not None:
        y = _fast_forward(x, weight, None, eps, True, weight_offset, backend)
        if y is not None:
            return y
    return norm("rms_norm", x, None, weight, None, eps, is_rms=True, weight_offset=weight_offset, backend=backend)[0]


def layer_norm(x, weight=None, bias=None, eps=1e-5, *, weight_offset=0.0, backend=None):
    """LayerNorm over the trailing `weight.dim()` dims of x: (x - mean) / sqrt(var + eps) * w + b."""
    if weight is not None:
        y = _fast_forward(x, weight, bias, eps, False, weight_offset, backend)
        if y is not None:
            return y
    return norm("layer_norm", x, None, weight, bias, eps, is_rms=False, weight_offset=weight_offset, backend=backend)[0]


def fused_add_rms_norm(x, residual, weight=None, eps=None, *, weight_offset=0.0, residual_dtype=None, backend=None):
    """h = x + residual; returns (rms_norm(h), h) in one pass over memory.

    h is rounded to `residual_dtype` (default: torch's promotion of x and residual, exactly what
    the unfused `residual = x + residual` stores) before it is normalized; pass
    `residual_dtype=torch.float32` to keep the sum unrounded in fp32.
    """
    return norm("fused_add_rms_norm", x, residual, weight, None, eps, is_rms=True, weight_offset=weight_offset,
                residual_dtype=residual_dtype, backend=backend)  # fmt: skip


def fused_add_layer_norm(
    x, residual, weight=None, bias=None, eps=1e-5, *, weight_offset=0.0, residual_dtype=None, backend=None
):
    """h = x + residual; returns (layer_norm(h), h). Rounding of h as in fused_add_rms_norm."""
    return norm("fused_add_layer_norm", x, residual, weight, bias, eps, is_rms=False, weight_offset=weight_offset,
                residual_dtype=residual_dtype, backend=backend)  # fmt: skip
