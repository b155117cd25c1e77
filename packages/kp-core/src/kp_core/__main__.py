"""`python -m kp_core`: the environment, which backend each installed kp package would use, and the
patchers `kp_core.patch(model)` would run."""
from __future__ import annotations

import importlib.metadata as md
import platform

import torch

from . import __version__, native, patching


def _installed_packages() -> list:
    """Installed kp packages as (import name, entry point), found through the `kp_core.packages`
    entry point group; each entry point names a function returning lines that describe the
    package's backends."""
    eps = md.entry_points(group="kp_core.packages")
    return sorted(((ep.name, ep) for ep in eps), key=lambda t: t[0])


def _gpu_lines() -> list:
    if not torch.cuda.is_available():
        return ["GPU      none visible to torch (torch.cuda.is_available() is False)"]
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append(
            f"GPU {i}    {p.name}, sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, "
            f"{p.total_memory / 2**30:.0f} GiB"
        )
    return out


def main() -> None:
    try:
        import triton

        triton_version = triton.__version__
    except Exception as e:  # triton is optional
        triton_version = f"not importable ({type(e).__name__})"
    print(f"kp-core  {__version__}")
    print(f"python   {platform.python_version()}")
    print(f"torch    {torch.__version__} (CUDA {torch.version.cuda or 'none'})")
    print(f"triton   {triton_version}")
    for line in _gpu_lines():
        print(line)
    pkgs = _installed_packages()
    if not pkgs:
        print("no kp kernel packages installed")
    for pkg, ep in pkgs:
        version = md.version(pkg.replace("_", "-"))
        status = native.load(pkg)
        print(f"\n{pkg} {version}\n  native   {status.describe()}")
        if torch.cuda.is_available() and status.loaded:
            for i in range(torch.cuda.device_count()):
                print(f"  cuda:{i}   {status.device_problem(i) or 'kernels run here'}")
        try:
            lines = ep.load()()
        except Exception as e:  # a broken package must not hide the others
            lines = [f"backends: cannot describe ({type(e).__name__}: {e})"]
        for line in lines:
            print(f"  {line}")
    patchers = patching.registered()
    listed = ", ".join(f"{n} ({v})" for n, v in patchers) if patchers else "no patchers registered"
    print(f"\nkp_core.patch runs: {listed}")


if __name__ == "__main__":
    main()
