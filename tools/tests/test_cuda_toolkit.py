"""tools/cuda_toolkit.py: KP_CUDA's variants and where `nox -s build` finds each toolkit (no toolkit needed)."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import cuda_toolkit  # noqa: E402


def test_variants_are_parsed():
    assert cuda_toolkit.parse(None) == cuda_toolkit.parse("") == cuda_toolkit.parse(" , ") == ["system"]
    assert cuda_toolkit.parse("pypi-13.0, pypi-13.5,system,pypi-13.0") == ["pypi-13.0", "pypi-13.5", "system"]
    with pytest.raises(ValueError, match="cannot read 'cu130'"):
        cuda_toolkit.parse("cu130")
    with pytest.raises(ValueError, match="no complete CUDA 12 compiler.*CUDA_HOME"):
        cuda_toolkit.parse("pypi-12.9")


def test_pypi_toolkit():
    assert cuda_toolkit.pypi_requirement("pypi-13.5") == "cuda-toolkit[nvcc,cccl]==13.5.*"
    assert cuda_toolkit.pypi_home(pathlib.Path("/t"), "pypi-13.0") == pathlib.Path("/t/nvidia/cu13")


def test_pypi_fix_adds_the_links_a_system_toolkit_has(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libcudart.so.13").write_bytes(b"so")
    for _ in range(2):  # the second run (a reused venv) changes nothing
        cuda_toolkit.pypi_fix(tmp_path)
    assert (tmp_path / "lib64" / "libcudart.so.13").read_bytes() == b"so"
    assert (tmp_path / "lib" / "libcudart.so").resolve() == (tmp_path / "lib" / "libcudart.so.13")


def test_system_nvcc_order(tmp_path):
    (tmp_path / "nvcc").write_text("#!/bin/sh\n")
    (tmp_path / "nvcc").chmod(0o755)
    path = {"PATH": str(tmp_path)}
    assert cuda_toolkit.system_nvcc(path) == str(tmp_path / "nvcc")
    assert cuda_toolkit.system_nvcc({**path, "CUDA_HOME": "/opt/cuda-12.8"}) == "/opt/cuda-12.8/bin/nvcc"
    assert cuda_toolkit.system_nvcc({**path, "CUDA_HOME": "/opt/cuda-12.8", "CUDACXX": "/x/nvcc"}) == "/x/nvcc"
    assert cuda_toolkit.system_nvcc({"PATH": str(tmp_path / "none")}) is None


def test_variant_names(tmp_path):
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.8, V12.8.93'\n")
    nvcc.chmod(0o755)
    assert cuda_toolkit.variant_name(str(nvcc), {}) == "cu128"
    assert cuda_toolkit.variant_name(str(nvcc), {"KP_SKIP_CUDA_BUILD": "1"}) == "cpu"
    assert cuda_toolkit.variant_name(None, {}) == "cpu"
    with pytest.raises(ValueError, match="no nvcc at /nowhere/bin/nvcc"):
        cuda_toolkit.variant_name("/nowhere/bin/nvcc", {})
    assert cuda_toolkit.release("Cuda compilation tools, release 13.5, V13.5.37") == (13, 5)
    with pytest.raises(ValueError, match="cannot read a CUDA release"):
        cuda_toolkit.release("nvcc: command not found")
