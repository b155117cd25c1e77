"""What several of this package's test files share (imported by name: pytest puts tests/ on sys.path)."""
from __future__ import annotations

import contextlib

import pytest
import torch
from kp_core import testing as kt


def skip_interpreted_bf16(level, dtype) -> None:
    backend, device = level
    if backend == "triton" and device == "cpu" and dtype == torch.bfloat16:
        pytest.skip("the Triton interpreter's bf16 is unreliable")


def kernel_dtype(backend: str, device: str) -> torch.dtype:
    """A dtype each kernel level runs here: 16-bit on a GPU, float32 under Triton's interpreter."""
    return torch.bfloat16 if device == "cuda" and backend != "reference" else torch.float32


@contextlib.contextmanager
def poisoned_outputs(device, nbytes):
    """Outputs a kernel allocates with torch.empty start as NaN: on a GPU through the caching
    allocator (kt.poison_allocator), on the CPU through torch's deterministic mode, which fills
    uninitialized memory with NaN. An element the kernel forgets to write then fails the check."""
    if torch.device(device).type == "cuda":
        kt.poison_allocator(device, nbytes)
        yield
        return
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was)
