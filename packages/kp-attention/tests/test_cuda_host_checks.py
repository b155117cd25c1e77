"""The CUDA forward's host checks (tools/check_fwd_host.cu), built with nvcc and run on the CPU: no GPU
needed. The kernel's CuTe layouts (P reused as the A operand of P V, row views, V^T) and its key
loop's blocks and masks against the visibility rule, on the kernel's own code."""
import pathlib

import pytest
from kp_core.testing.host_checks import run_host_check


@pytest.mark.slow
def test_forward_layouts_and_key_blocks_on_the_host(tmp_path):
    out = run_host_check(pathlib.Path(__file__).resolve().parents[1], "check_fwd_host", "sm_80", tmp_path)
    assert out.count("layouts ok") == 5 and out.count("blocks") == 3, out
