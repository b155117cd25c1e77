"""Dtype codes shared with the native modules (see shared_cuda/include/kp/dtype.cuh)."""
import torch

FLOAT32, FLOAT16, BFLOAT16 = 0, 1, 2

CODES = {torch.float32: FLOAT32, torch.float16: FLOAT16, torch.bfloat16: BFLOAT16}
_CODES = CODES
FLOATING = tuple(_CODES)


def code(dtype: torch.dtype) -> int:
    """The native dtype code of `dtype`; ValueError for dtypes kernels do not take."""
    try:
        return _CODES[dtype]
    except KeyError:
        raise ValueError(f"kp kernels take float32, float16 or bfloat16, not {dtype}") from None


def short_name(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}.get(dtype, str(dtype))
