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

import functools
import os
import re
import warnings
from typing import Optional

import pytest
import torch

from ..native import load as load_native
from ..op import triton_importable


def interpret_triton_without_gpu() -> None:
    """Without a GPU, run Triton kernels under Triton's interpreter. The switch must be set before
    `triton.jit` decorates the kernels, i.e. before the package's Triton module is imported."""
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


@functools.lru_cache(maxsize=None)
def interpreter_problem() -> Optional[str]:
    """Why Triton's interpreter cannot run kp's kernels here, or None. Before 3.7 it turns a tensor
    used as a loop bound into an int by int() of a 1-element array, which NumPy 2.4 refuses (torch
    2.11 and older pin such a Triton). Compiled kernels on a GPU are not affected."""
    try:
        import numpy
        import triton
    except ImportError:
        return None
    try:
        with warnings.catch_warnings():  # NumPy 1.25-2.3 deprecate what 2.4 refuses
            warnings.simplefilter("ignore", DeprecationWarning)
            int(numpy.ones(1, dtype=numpy.int32))
        return None
    except TypeError:
        pass
    version = re.match(r"(\d+)\.(\d+)", triton.__version__)
    if version is None or (int(version[1]), int(version[2])) >= (3, 7):
        return None
    return (
        f"Triton {triton.__version__}'s interpreter needs int() of 1-element arrays, which NumPy "
        f"{numpy.__version__} refuses: pip install 'numpy<2.4' to run the triton level on CPU"
    )


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
        backend, device = request.param
        if backend == "triton" and device == "cpu" and interpreter_problem():
            pytest.skip(interpreter_problem())
        if backend == "cuda":
            status = load_native(package)
            if not status.loaded:
                pytest.fail(f"the CUDA extension must load on a GPU machine: {status.error}")
        return request.param

    return level
