"""The cuda level: the native kernels of `kp_fused_mlp._C`, called with raw pointers (no libtorch)."""
from __future__ import annotations

from typing import Optional

import torch
from kp_core import dtypes, load_native
from kp_core.registry import current_stream

NATIVE = load_native("kp_fused_mlp")


def supports(forced: bool, device_type: str, device_index, dtype) -> Optional[str]:
    if device_type != "cuda":
        return f"the tensors are on {device_type}; the CUDA kernels need a CUDA device"
    if not NATIVE.loaded:
        return NATIVE.error
    return NATIVE.device_problem(device_index)


def swiglu_fwd(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    rows, cols = gate.shape
    y = torch.empty((rows, cols), dtype=gate.dtype, device=gate.device)
    if rows and cols:
        index = gate.device.index
        NATIVE.module.swiglu_fwd(gate.data_ptr(), gate.stride(0), up.data_ptr(), up.stride(0), y.data_ptr(),
                                 rows, cols, dtypes.code(gate.dtype), index, current_stream(index))  # fmt: skip
    return y


def swiglu_bwd(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor):
    rows, cols = gate.shape
    dgate = torch.empty((rows, cols), dtype=gate.dtype, device=gate.device)
    dup = torch.empty((rows, cols), dtype=up.dtype, device=up.device)
    if rows and cols:
        index = gate.device.index
        NATIVE.module.swiglu_bwd(dy.data_ptr(), dy.stride(0), gate.data_ptr(), gate.stride(0), up.data_ptr(),
                                 up.stride(0), dgate.data_ptr(), dup.data_ptr(), rows, cols, dtypes.code(gate.dtype),
                                 index, current_stream(index))  # fmt: skip
    return dgate, dup
