"""Loading a package's native extension (`kp_<pkg>._C`) and explaining why it cannot serve."""
from __future__ import annotations

import functools
import importlib
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class NativeStatus:
    """What is known about one package's extension. `module` is None when it did not load."""

    package: str
    module: Optional[Any]
    error: Optional[str] = None
    archs: list = field(default_factory=list)
    ptx: list = field(default_factory=list)
    cuda_runtime: Optional[int] = None
    _problems: dict = field(default_factory=dict, repr=False)  # device index -> answer, asked once
    _warned: bool = field(default=False, repr=False)  # the missing extension, warned about once

    @property
    def loaded(self) -> bool:
        return self.module is not None

    def device_problem(self, device_index: int) -> Optional[str]:
        """None when the kernels run on that CUDA device, else a diagnostic sentence.

        A CUDA device with no extension to run on it is worth one warning a process: the package
        still works (Triton, reference), but slower than the user installed it for."""
        if self.module is None:
            if not self._warned:
                self._warned = True
                warnings.warn(f"{self.package}: the CUDA level is unavailable, other levels serve: {self.error}",
                              RuntimeWarning, stacklevel=2)
            return self.error
        if device_index not in self._problems:
            self._problems[device_index] = self.module.check_device(int(device_index)) or None
        return self._problems[device_index]

    def describe(self) -> str:
        if self.module is None:
            return f"not loaded: {self.error}"
        sass = ", ".join(f"sm_{a}" for a in self.archs) or "none"
        ptx = ", ".join(f"compute_{a}" for a in self.ptx) or "none"
        return f"loaded (machine code {sass}; PTX {ptx}; CUDA runtime {_cuda_version(self.cuda_runtime)})"


def _cuda_version(v: Optional[int]) -> str:
    return "?" if not v else f"{v // 1000}.{(v % 1000) // 10}"


@functools.lru_cache(maxsize=None)
def load(package: str) -> NativeStatus:
    """Import `<package>._C` once. Never raises: a missing or broken build is reported, not fatal."""
    try:
        mod = importlib.import_module(f"{package}._C")
    except ImportError as e:
        return NativeStatus(
            package,
            None,
            error=f"{package}._C is not importable ({e}). The package was built without its CUDA level (no nvcc "
            f"at build time, or KP_SKIP_CUDA_BUILD=1) or for another Python; reinstall with a CUDA toolkit "
            f"present (see docs/install.md).",
        )
    return NativeStatus(
        package,
        mod,
        # "90a" where the module says how it was compiled (kp-core 0.3.2+ modules), else numbers.
        archs=list(mod.compiled_arch_names()) if hasattr(mod, "compiled_arch_names") else list(mod.compiled_archs()),
        ptx=list(mod.ptx_archs()),
        cuda_runtime=int(mod.cuda_runtime_version()),
    )


# The native boundary: kernels take raw pointers and strides (no libtorch in the extension).


def ptr(t) -> int:
    """A tensor's data pointer, 0 for an absent (None) one."""
    return 0 if t is None else t.data_ptr()


def row_stride(t) -> int:
    """The row stride of a [rows, cols] tensor, 0 for an absent (None) one."""
    return 0 if t is None else t.stride(0)
