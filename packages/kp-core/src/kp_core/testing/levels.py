"""The `level` fixture: every (backend, device) pair this machine can run, for a package's tests.

    # tests/conftest.py of a kp package
    from kp_core.testing.levels import interpret_triton_without_gpu, level_fixture
    interpret_triton_without_gpu()  # before the package's Triton kernels are imported
    level = level_fixture("kp_mypkg")

A test taking `level` gets `(backend, device)` and runs once per pair: reference and Triton's
interpreter on a CPU machine; reference, triton and cuda on a GPU one. On a GPU machine the cuda
level must load: a package whose extension is missing there fails instead of skipping.
"""
from __future__ import annotations

import os

import pytest
import torch

from ..native import load as load_native
from ..op import triton_importable


def interpret_triton_without_gpu() -> None:
    """Without a GPU, run Triton kernels under Triton's interpreter. The switch must be set before
    `triton.jit` decorates the kernels, i.e. before the package's Triton module is imported."""
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


def available_levels() -> list:
    """(backend, device) pairs this machine can run."""
    levels = [("reference", "cpu")]
    if triton_importable() and not torch.cuda.is_available():
        levels.append(("triton", "cpu"))
    if torch.cuda.is_available():
        levels += [("reference", "cuda"), ("cuda", "cuda")]
        if triton_importable():
            levels.append(("triton", "cuda"))
    return levels


def level_fixture(package: str):
    """A pytest fixture named `level`, parametrized over `available_levels()`."""

    @pytest.fixture(name="level", params=available_levels(), ids=lambda p: f"{p[0]}-{p[1]}")
    def level(request):
        backend, _ = request.param
        if backend == "cuda":
            status = load_native(package)
            if not status.loaded:
                pytest.fail(f"the CUDA extension must load on a GPU machine: {status.error}")
        return request.param

    return level
