"""kp-core: what every kp kernel package shares (dispatch, native loading, op registration).

`kp_core.patch(model)` swaps every module an installed kp package can serve (each package registers
its patcher under the `kp_core.patches` entry-point group) and returns a `PatchReport`.

The test harness lives in `kp_core.testing` and the benchmark harness in `kp_core.bench`.
"""
from .dispatch import (
    BACKENDS,
    BackendUnavailable,
    Selector,
    requested_backend,
    use_backend,
)
from .native import NativeStatus, load as load_native
from .patching import PatchReport, Skip, Swap, patch

__version__ = "0.3.5"

__all__ = [
    "BACKENDS",
    "BackendUnavailable",
    "NativeStatus",
    "PatchReport",
    "Selector",
    "Skip",
    "Swap",
    "load_native",
    "patch",
    "requested_backend",
    "use_backend",
]
