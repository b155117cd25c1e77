import os

import pytest
import torch

# Without a GPU the Triton kernels run under Triton's interpreter; the switch must be set before
# triton.jit decorates the kernels, i.e. before kp_norm.triton is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kp_norm.norm import _triton_importable  # noqa: E402

# kp's markers, options and seed fixture: opt-in, so installing kp never changes another project's tests.
pytest_plugins = ("kp_core.testing.pytest_plugin",)


def available_levels() -> list:
    """(backend, device) pairs this machine can run."""
    levels = [("reference", "cpu")]
    if _triton_importable() and not torch.cuda.is_available():
        levels.append(("triton", "cpu"))
    if torch.cuda.is_available():
        levels += [("reference", "cuda"), ("cuda", "cuda")]
        if _triton_importable():
            levels.append(("triton", "cuda"))
    return levels


@pytest.fixture(params=available_levels(), ids=lambda p: f"{p[0]}-{p[1]}")
def level(request):
    backend, device = request.param
    if backend == "cuda":
        from kp_norm._cuda import NATIVE

        if not NATIVE.loaded:
            pytest.fail(f"the CUDA extension must load on a GPU machine: {NATIVE.error}")
    return request.param
