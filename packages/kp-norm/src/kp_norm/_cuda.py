"""The cuda level: the native kernels of `kp_norm._C`, called with raw pointers (no libtorch)."""
from __future__ import annotations

from typing import Optional

import torch
from kp_core import dtypes, load_native
from kp_core.native import ptr as _ptr, row_stride as _stride
from kp_core.registry import current_stream

NATIVE = load_native("kp_norm")
_F32 = torch.float32


def supports(forced: bool, device_type: str, device_index, dtype, weight_dtype, residual_dtype) -> Optional[str]:
    if device_type != "cuda":
        return f"the tensors are on {device_type}; the CUDA kernels need a CUDA device"
    if not NATIVE.loaded:
        return NATIVE.error
    if residual_dtype is not None and residual_dtype not in (dtype, _F32):
        return f"residual_dtype {residual_dtype} must be the activation dtype {dtype} or float32"
    return NATIVE.device_problem(device_index)


def kernel_weight_dtype(w_dtype: torch.dtype, act: torch.dtype) -> torch.dtype:
    """The dtype the kernels read weights in: the activation dtype or fp32 (others widened once)."""
    return w_dtype if w_dtype in (act, _F32) else _F32


def _kernel_weight(w: Optional[torch.Tensor], act: torch.dtype) -> Optional[torch.Tensor]:
    return w if w is None or kernel_weight_dtype(w.dtype, act) == w.dtype else w.float()


def norm_fwd(x, residual, weight, bias, eps, is_rms, weight_offset, residual_dtype, save_stats):
    rows, cols = x.shape
    dev = x.device
    y = torch.empty((rows, cols), dtype=x.dtype, device=dev)
    res_out = None if residual is None else torch.empty((rows, cols), dtype=residual_dtype, device=dev)
    rstd = torch.empty(rows, dtype=_F32, device=dev) if save_stats else None
    mean = torch.empty(rows, dtype=_F32, device=dev) if save_stats and not is_rms else None
    if rows == 0:
        return y, res_out, mean, rstd
    w = _kernel_weight(weight, x.dtype)
    b = _kernel_weight(bias, x.dtype)
    if w is not None and b is not None and b.dtype != w.dtype:
        b = b.to(w.dtype)
    index = dev.index
    NATIVE.module.norm_fwd(
        x.data_ptr(), x.stride(0), _ptr(residual), _stride(residual), _ptr(w), _ptr(b),
        y.data_ptr(), cols, _ptr(res_out), cols, _ptr(mean), _ptr(rstd),
        rows, cols, dtypes.code(x.dtype),
        dtypes.code(w.dtype if w is not None else (b.dtype if b is not None else x.dtype)),
        dtypes.code(residual_dtype if residual is not None else x.dtype),
        float(eps), float(weight_offset), bool(is_rms), index, current_stream(index),
    )  # fmt: skip
    return y, res_out, mean, rstd


def inference_fwd(x_dtype, w_dtype, b_dtype, device_index):
    """A launcher for eager no-grad calls without a residual, specialised once per dtype/device.

    The small-batch hot path: a norm over a few rows costs less on the GPU than its Python, so
    everything that does not change between calls (dtype codes, the module, the device) is bound
    here, and a call is one allocation plus one native call.
    """
    act = dtypes.CODES[x_dtype]
    wcode = dtypes.CODES[w_dtype]
    launch = NATIVE.module.norm_fwd_rows
    stream = current_stream
    has_bias = b_dtype is not None

    def run(x, w, b, eps, is_rms, weight_offset, rows, cols):  # x: (rows, cols), contiguous
        y = torch.empty_like(x)
        if rows:
            launch(x.data_ptr(), w.data_ptr(), b.data_ptr() if has_bias else 0, y.data_ptr(), rows, cols,
                   act, wcode, eps, weight_offset, is_rms, device_index, stream(device_index))  # fmt: skip
        return y

    return run


def norm_bwd(dy, x, dres, weight, mean, rstd, is_rms, weight_offset, need_dw, need_db):
    rows, cols = x.shape
    dev = x.device
    dx = torch.empty((rows, cols), dtype=x.dtype, device=dev)
    # dw needs a weight; db takes the weight's dtype, or dy's when there is none (the public API
    # always passes a weight beside a bias, a direct op call may not).
    need_dw = need_dw and weight is not None
    grad_dtype = weight.dtype if weight is not None else dy.dtype
    if rows == 0:
        zeros = lambda: torch.zeros(cols, dtype=grad_dtype, device=dev)  # noqa: E731
        return dx, zeros() if need_dw else None, zeros() if need_db else None
    w = _kernel_weight(weight, dy.dtype)
    act, xc = dtypes.code(dy.dtype), dtypes.code(x.dtype)
    index = dev.index
    mod = NATIVE.module
    parts = mod.norm_bwd_partials(rows, cols, act, xc, bool(need_db), index)
    # One buffer for both partials and one col_sum launch for dw and db: fewer host steps ahead of
    # the kernels (for a large backward, the host time before the first launch is exposed).
    n_part = int(need_dw) + int(need_db)
    part = torch.empty((n_part, parts, cols), dtype=_F32, device=dev) if n_part else None
    dw_part = part[0] if need_dw else None
    db_part = part[n_part - 1] if need_db else None
    stream = current_stream(index)
    mod.norm_bwd(
        dy.data_ptr(), dy.stride(0), x.data_ptr(), x.stride(0), _ptr(dres), _stride(dres),
        _ptr(w), _ptr(mean), rstd.data_ptr(), dx.data_ptr(), cols, _ptr(dw_part), _ptr(db_part),
        parts, rows, cols, act, xc, dtypes.code(w.dtype if w is not None else dy.dtype),
        float(weight_offset), bool(is_rms), index, stream,
    )  # fmt: skip
    dw = torch.empty(cols, dtype=grad_dtype, device=dev) if need_dw else None
    db = torch.empty(cols, dtype=grad_dtype, device=dev) if need_db else None
    if n_part:
        first, second = (dw, db) if need_dw else (db, None)
        mod.col_sum(part[0].data_ptr(), parts, cols, first.data_ptr(), dtypes.code(grad_dtype), index, stream,
                    _ptr(part[1]) if second is not None else 0, _ptr(second))  # fmt: skip
    return dx, dw, db
