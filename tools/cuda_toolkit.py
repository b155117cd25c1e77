"""The CUDA toolkit a wheel build compiles with: KP_CUDA's variants, read by `nox -s build`.

KP_CUDA is a comma list of toolkits; the build makes every package's wheels once per entry, into
dist/<variant>/, the variant named from the toolkit's nvcc (release 13.0 -> cu130):

    system     (default) CUDACXX, else CUDA_HOME/bin/nvcc, else nvcc on PATH
    pypi-13.Y  NVIDIA's PyPI wheels of CUDA 13.Y (cuda-toolkit[nvcc,cccl]==13.Y.*), installed
               once into the build session's cuda/pypi-13.Y/: no system toolkit needed

CMake reads CUDACXX (and PATH, CUDA_PATH), never CUDA_HOME, so the build names the nvcc it chose
to CMake (CUDACXX and CMAKE_CUDA_COMPILER): a toolkit that cannot compile then fails the build
instead of leaving the wheels without their CUDA level. PyPI has no complete CUDA 12 compiler
(nvidia-cuda-nvcc-cu12 holds ptxas only): a cu12 variant is `system` with CUDA_HOME naming an
installed 12.x toolkit. With no nvcc at all, or KP_SKIP_CUDA_BUILD set, the wheels have no CUDA
level and land in dist/cpu/.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Mapping

PYPI = re.compile(r"pypi-(\d+)\.(\d+)")


def parse(spec: str | None) -> list[str]:
    """KP_CUDA's value -> its variants, in order ("" or unset: ["system"])."""
    variants = list(dict.fromkeys(v.strip() for v in (spec or "").split(",") if v.strip())) or ["system"]
    for v in variants:
        m = PYPI.fullmatch(v)
        if v != "system" and not m:
            raise ValueError(f"KP_CUDA: cannot read {v!r} (want 'system' or 'pypi-13.Y', e.g. pypi-13.0)")
        if m and int(m[1]) < 13:
            raise ValueError(f"KP_CUDA: {v!r}: PyPI has no complete CUDA {m[1]} compiler; build that variant "
                             f"with KP_CUDA=system and CUDA_HOME naming an installed {m[1]}.x toolkit")
    return variants


def pypi_requirement(variant: str) -> str:
    """pypi-13.0 -> the pip requirement of a matched compiler, runtime and CCCL headers of CUDA 13.0."""
    major, minor = PYPI.fullmatch(variant).groups()
    return f"cuda-toolkit[nvcc,cccl]=={major}.{minor}.*"


def pypi_home(target: Path, variant: str) -> Path:
    """Where `pip install --target <target>` of pypi_requirement(variant) puts the toolkit."""
    return Path(target) / "nvidia" / f"cu{PYPI.fullmatch(variant)[1]}"


def pypi_fix(home: Path) -> None:
    """Give an installed PyPI toolkit the two links of a system install that its wheels lack:
    lib64 -> lib (CUDA 13.0's nvcc.profile links the runtime from lib64/; 13.5's from lib/) and
    lib/libcudart.so (CMake's FindCUDAToolkit requires it, though kp links libcudart_static.a)."""
    home = Path(home)
    runtime = next((home / "lib").glob("libcudart.so.*"))
    for link, to in [(home / "lib64", "lib"), (home / "lib" / "libcudart.so", runtime.name)]:
        if not link.exists():
            link.symlink_to(to)


def system_nvcc(env: Mapping[str, str]) -> str | None:
    """The nvcc of the `system` variant: CUDACXX, else CUDA_HOME's, else the one on PATH (None: none)."""
    if env.get("CUDACXX"):
        return env["CUDACXX"]
    if env.get("CUDA_HOME"):
        return str(Path(env["CUDA_HOME"]) / "bin" / "nvcc")
    return shutil.which("nvcc", path=env.get("PATH"))


def release(version_output: str) -> tuple[int, int]:
    """`nvcc --version`'s text -> (major, minor)."""
    m = re.search(r"release (\d+)\.(\d+)", version_output)
    if not m:
        raise ValueError(f"cannot read a CUDA release from nvcc --version: {version_output!r}")
    return int(m[1]), int(m[2])


def variant_name(nvcc: str | None, env: Mapping[str, str]) -> str:
    """The dist folder (and make_index.py variant) of a build with this nvcc: cu130, cu129 ... or cpu."""
    if nvcc is None or re.fullmatch(r"1|ON|on|true|TRUE|yes", env.get("KP_SKIP_CUDA_BUILD", "")):
        return "cpu"
    if not shutil.which(nvcc):
        raise ValueError(f"no nvcc at {nvcc} (from CUDACXX, CUDA_HOME or PATH)")
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    major, minor = release(out)
    return f"cu{major}{minor}"
