"""The CUDA level's launch plans: which row of the plan table (csrc/DESIGN.md) and which kernel a
call gets, and an explicit override of the table's values for sweeps.

    >>> kp_norm.cuda_plan("rms_norm", 65536, torch.bfloat16, rows=2048)["row"]
    'direct.wide'
    >>> with kp_norm.plan_override(fwd_stages=2):   # every call inside re-plans with this value
    ...     y = kp_norm.rms_norm(x, w)

Plans are cached per signature (the key holds the override's generation, so entering or leaving an
override re-plans). An override that names a kernel outside the release lists raises ValueError in
a release build; a `KP_NORM_TUNING` build instantiates every kernel the plans can name.
"""
from __future__ import annotations

import contextlib
from typing import Optional

import torch
from kp_core import dtypes

from ._cuda import NATIVE, kernel_weight_dtype

_OPS = ("rms_norm", "layer_norm")


def _module():
    if not NATIVE.loaded:
        raise RuntimeError(f"kp_norm's CUDA level is not available: {NATIVE.error}")
    return NATIVE.module


def cuda_plan(op: str, hidden: int, dtype: torch.dtype = torch.bfloat16, *, rows: int = 1,
              weight_dtype: Optional[torch.dtype] = None, weight: bool = True, bias: bool = False,
              residual_dtype: Optional[torch.dtype] = None, backward: bool = False, aligned: bool = True,
              device=None) -> dict:  # fmt: skip
    """The plan the CUDA level runs for this call (a dict: row, kernel, e, threads, csize, stages,
    smem, grid; backward adds partials and wrp).

    `weight_dtype` defaults to `dtype`; `residual_dtype` set means the fused residual add (forward)
    or a residual gradient (backward); `bias` is LayerNorm's (in the backward: db is computed);
    `aligned=False` asks for the scalar path that unaligned or odd-width rows take.
    """
    if op not in _OPS:
        raise ValueError(f"cuda_plan: op must be one of {_OPS}, got {op!r}")
    if not isinstance(hidden, int) or hidden < 1:
        raise ValueError(f"cuda_plan: hidden must be a positive int, got {hidden!r}")
    if not isinstance(rows, int) or rows < 1:
        raise ValueError(f"cuda_plan: rows must be a positive int, got {rows!r}")
    if not torch.cuda.is_available():
        raise RuntimeError("cuda_plan: no CUDA device here (the plans depend on the GPU)")
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"cuda_plan: the CUDA level plans for a CUDA device, got {dev}")
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    is_rms = op == "rms_norm"
    bias = bias and not is_rms
    weight = weight or bias  # as the functions do: a bias alone is served beside a weight of ones
    # What the calls hand the kernels: weights of the activation dtype or fp32 (others widened once),
    # the activation dtype's code when there is no weight, and the scalar path for rows whose width
    # is not a whole number of 16-byte chunks.
    w_dtype = kernel_weight_dtype(weight_dtype or dtype, dtype) if weight else dtype
    act, wcode = dtypes.code(dtype), dtypes.code(w_dtype)
    vector = aligned and hidden % (16 // dtype.itemsize) == 0
    mod = _module()
    if backward:
        x_code = dtypes.code(residual_dtype) if residual_dtype is not None else act
        return mod.plan_bwd(rows, hidden, act, x_code, wcode, vector, bias, residual_dtype is not None, index)
    n_affine = int(weight) + int(bias)
    rcode = dtypes.code(residual_dtype) if residual_dtype is not None else act
    return mod.plan_fwd(rows, hidden, act, wcode, rcode, vector, residual_dtype is not None, is_rms, n_affine, index)


def plan_override_names() -> list:
    """The names `plan_override` accepts (the table values a sweep may replace)."""
    return list(_module().plan_override_names())


@contextlib.contextmanager
def plan_override(**values: int):
    """Replace plan-table values by name inside the block, e.g. `plan_override(fwd_stages=2)`.

    For sweeps and tests: process-wide (not per thread), and not nestable (the inner one replaces
    the outer one until it exits, then the table's values return).
    """
    mod = _module()
    known = set(mod.plan_override_names())
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"plan_override: unknown name(s) {unknown}; known: {sorted(known)}")
    for name, v in values.items():
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"plan_override: {name} must be an int, got {v!r}")
    mod.set_plan_override(list(values.items()))
    try:
        yield
    finally:
        mod.set_plan_override([])
