import subprocess
import sys


def test_python_m_kp_core_reports_kp_norm():
    out = subprocess.run([sys.executable, "-m", "kp_core"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "kp_norm" in out.stdout and "native" in out.stdout
    assert "auto on cpu: reference" in out.stdout


def test_the_built_extension_loads():
    """Where the CUDA level was built, its module imports on any machine: a kernel that the plan
    names but no translation unit instantiates is an undefined symbol at import."""
    import pathlib

    import pytest
    from kp_core import load_native

    import kp_norm

    if not list(pathlib.Path(kp_norm.__file__).parent.glob("_C*.so")):
        pytest.skip("installed without its CUDA level (no nvcc, or KP_SKIP_CUDA_BUILD=1)")
    status = load_native("kp_norm")
    assert status.loaded, status.error
    assert status.archs or status.ptx
    # The machine code as compiled ("90a" for a module with sm_90a-only kernels) and the same archs as the numbers.
    names, numbers = list(status.module.compiled_arch_names()), list(status.module.compiled_archs())
    assert status.archs == names and [int(n.rstrip("af")) for n in names] == numbers, (names, numbers)
