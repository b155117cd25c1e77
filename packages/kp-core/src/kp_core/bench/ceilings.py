"""The ceilings every row is compared with, measured in the same run on the same device.

copy: device-to-device copy of a 1 GiB buffer, bytes read + written counted (what a
      memory-bound op that reads its input once and writes its output once can reach).
gemm: an 8192^3 bf16 matrix product on random data (zeros would flatter the tensor cores,
      which draw less power and clock higher on them).
Without a GPU both are measured at small sizes only so the CPU smoke run exercises the code.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from .timing import do_bench, is_cuda

GPU_COPY_BYTES = 1 << 30
GPU_GEMM_N = 8192
CPU_COPY_BYTES = 64 << 20
CPU_GEMM_N = 512


def measure(device: Any, *, timer: Callable[..., float] = do_bench) -> dict[str, dict]:
    """{"copy": {...GB/s...}, "gemm": {...TFLOP/s...}}; a ceiling that fails holds "error"."""
    gpu = is_cuda(device)
    out = {}
    for name, fn in (("copy", _copy), ("gemm", _gemm)):
        try:
            out[name] = fn(device, gpu, timer)
        except Exception as e:  # an OOM here must not stop the run: the rows keep their GB/s
            out[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        finally:
            if gpu:
                torch.cuda.empty_cache()
    return out


def _copy(device: Any, gpu: bool, timer: Callable[..., float]) -> dict:
    nbytes = GPU_COPY_BYTES if gpu else CPU_COPY_BYTES
    src = torch.randn(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    ms = timer(lambda: dst.copy_(src), device=device)
    return {"value": 2 * nbytes / ms / 1e6, "unit": "GB/s", "ms": ms,
            "what": f"{'device-to-device' if gpu else 'host memory'} copy of {_size(nbytes)}, "
                    "read + write counted"}


def _gemm(device: Any, gpu: bool, timer: Callable[..., float]) -> dict:
    n = GPU_GEMM_N if gpu else CPU_GEMM_N
    dtype = torch.bfloat16 if gpu else torch.float32  # CPU bf16 matmul is emulated and slow
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    ms = timer(lambda: torch.mm(a, b), device=device)
    return {"value": 2 * n**3 / ms / 1e9, "unit": "TFLOP/s", "ms": ms,
            "what": f"{str(dtype).removeprefix('torch.')} GEMM {n}^3, random data"}


def _size(nbytes: int) -> str:
    return f"{nbytes >> 30} GiB" if nbytes >= 1 << 30 else f"{nbytes >> 20} MiB"
