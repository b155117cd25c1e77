"""Host checks of CUDA code: a package's `tools/<name>.cu`, built with nvcc against its csrc/,
shared_cuda and the CUTLASS headers, and run on the CPU (no GPU). Kernels keep their layout and
index logic in `__host__ __device__` functions; such a program runs that very code over whole
problems and prints what it checked."""
from __future__ import annotations

import importlib.util
import pathlib
import shutil
import subprocess


def run_host_check(package_dir: pathlib.Path, tool: str, arch: str, tmp_path: pathlib.Path) -> str:
    """Build `package_dir/tools/<tool>.cu` for `arch` (e.g. "sm_90a") and run it; returns its
    stdout after asserting a zero exit and no "FAILED" line. Skips the calling test when nvcc or
    the nvidia-cutlass wheel's headers are missing."""
    import pytest

    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    spec = importlib.util.find_spec("cutlass_library")  # found, not imported (its import runs generators)
    if not pathlib.Path(nvcc).exists() or spec is None:
        pytest.skip("needs nvcc and the CUTLASS headers of the nvidia-cutlass wheel")
    cutlass = pathlib.Path(list(spec.submodule_search_locations)[0]) / "source" / "include"
    exe = tmp_path / tool
    subprocess.run([nvcc, "-std=c++17", f"-arch={arch}", "--expt-relaxed-constexpr",
                    "-I", str(package_dir / "shared_cuda" / "include"), "-isystem", str(cutlass),
                    "-I", str(package_dir / "csrc"), str(package_dir / "tools" / f"{tool}.cu"), "-o", str(exe)],
                   check=True)  # fmt: skip
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0 and "FAILED" not in run.stdout, run.stdout + run.stderr
    return run.stdout
