"""The cuda level: the native kernels of `kp_fused_mlp._C`, called with raw pointers (no libtorch)."""
from __future__ import annotations

from typing import Optional

import torch
from kp_core import dtypes, load_native
from kp_core.registry import current_stream

from .glu import grad_outputs

NATIVE = load_native("kp_fused_mlp")


def supports(forced: bool, device_type: str, device_index, dtype) -> Optional[str]:
    if device_type != "cuda":
        return f"the tensors are on {device_type}; the CUDA kernels need a CUDA device"
    if not NATIVE.loaded:
        return NATIVE.error
    return NATIVE.device_problem(device_index)


def glu_fwd(gate: torch.Tensor, up: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    rows, cols = gate.shape
    y = torch.empty((rows, cols), dtype=gate.dtype, device=gate.device)
    if rows and cols:
        index = gate.device.index
        NATIVE.module.glu_fwd(gate.data_ptr(), gate.stride(0), up.data_ptr(), up.stride(0), y.data_ptr(), rows, cols,
                              ACT_CODES[activation], dtypes.code(gate.dtype), index, current_stream(index))  # fmt: skip
    return y


def glu_bwd(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, activation: str = "silu", packed: bool = False):
    """(dgate, dup); packed: (dgate_up, None), both halves written into one [rows, 2 * cols] tensor."""
    rows, cols = gate.shape
    dgate, dup, grads = grad_outputs(gate, up, packed)
    if rows and cols:
        index = gate.device.index
        NATIVE.module.glu_bwd(dy.data_ptr(), dy.stride(0), gate.data_ptr(), gate.stride(0), up.data_ptr(),
                              up.stride(0), dgate.data_ptr(), dup.data_ptr(), dgate.stride(0), rows, cols,
                              ACT_CODES[activation], dtypes.code(gate.dtype), index, current_stream(index))  # fmt: skip
    return grads


# ---------------------------------------------------------------------------------------------
# linear_act: the sm90a GEMM with a bias + activation epilogue (csrc/linear_act.cu)

_GEMM_DTYPES = (torch.float16, torch.bfloat16)
# TMA (the GEMM's loads and stores) needs 16-byte aligned addresses and row strides.
_TMA_ALIGN = 16


def tma_size_problem(n: int, k: int, itemsize: int) -> Optional[str]:
    """Why TMA cannot take rows of K (x, weight) and N (y) elements, naming the size to pad to."""
    mult = _TMA_ALIGN // itemsize
    for what, v in (("in_features K", k), ("out_features N", n)):
        if v % mult:
            return (f"{what}={v} is not a multiple of {mult}: TMA needs rows of a multiple of 16 bytes "
                    f"({mult} {8 * itemsize}-bit elements); pad it to {-(-v // mult) * mult}")  # fmt: skip
    return None


def linear_act_supports(forced: bool, device_type: str, device_index, dtype, grad: bool, n: int, k: int):
    if device_type != "cuda":
        return f"the tensors are on {device_type}; the CUDA kernels need a CUDA device"
    if dtype not in _GEMM_DTYPES:
        return f"the cuda GEMM takes float16 and bfloat16, not {dtype}"
    if grad:
        return ("the cuda level of linear_act has no backward yet (inference only); "
                "backend='auto' or 'reference' differentiates it")  # fmt: skip
    why = tma_size_problem(n, k, dtype.itemsize)
    if why:
        return why
    if not NATIVE.loaded:
        return NATIVE.error
    return NATIVE.device_problem(device_index) or _gemm_device_problem(device_index)


_gemm_problems: dict = {}


def _gemm_device_problem(index: int) -> Optional[str]:
    if index not in _gemm_problems:
        _gemm_problems[index] = NATIVE.module.gemm_device_problem(int(index)) or None
    return _gemm_problems[index]


def _tma_ready(t: torch.Tensor) -> torch.Tensor:
    """t ([rows, cols], unit column stride) as TMA takes it: 16-byte aligned start and row stride;
    else a contiguous copy (a fresh allocation is aligned)."""
    mult = _TMA_ALIGN // t.element_size()
    rows, cols = t.shape
    if t.data_ptr() % _TMA_ALIGN or t.stride(-1) != 1 or (rows > 1 and (t.stride(0) % mult or t.stride(0) < cols)):
        return t.clone(memory_format=torch.contiguous_format)
    return t


ACT_CODES = {"none": 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}  # kp::gemm::Act


def linear_act_fwd(x: torch.Tensor, weight: torch.Tensor, bias, activation: str, config: int = -1) -> torch.Tensor:
    """x [M, K] (unit column stride), weight [N, K], bias [N] or None, all one 16-bit dtype;
    M, N, K > 0. Returns y [M, N], contiguous."""
    (m, k), n = x.shape, weight.shape[0]
    x, weight = _tma_ready(x), _tma_ready(weight)
    if bias is not None:
        bias = _tma_ready(bias.view(1, n)).view(n)
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    index = x.device.index
    NATIVE.module.linear_act(
        x.data_ptr(), x.stride(0) if m > 1 else k, weight.data_ptr(), weight.stride(0) if n > 1 else k,
        0 if bias is None else bias.data_ptr(), y.data_ptr(), m, n, k, dtypes.code(x.dtype),
        ACT_CODES[activation], config, index, current_stream(index),
    )  # fmt: skip
    return y


def gemm_plan(m: int, n: int, k: int) -> str:
    """The name of the GEMM table row a call of this shape gets (csrc/gemm_table.h)."""
    return NATIVE.module.gemm_configs()[NATIVE.module.gemm_plan(m, n, k)]
