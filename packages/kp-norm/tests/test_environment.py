import subprocess
import sys


def test_python_m_kp_core_reports_kp_norm():
    out = subprocess.run([sys.executable, "-m", "kp_core"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "kp_norm" in out.stdout and "native" in out.stdout
    assert "auto on cpu: reference" in out.stdout
