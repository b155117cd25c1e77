"""kp-core: what every kp kernel package shares (dispatch, native loading, op registration).

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

__version__ = "0.1.4"

__all__ = [
    "BACKENDS",
    "BackendUnavailable",
    "NativeStatus",
    "Selector",
    "load_native",
    "requested_backend",
    "use_backend",
]
