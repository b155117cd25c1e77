"""pytest plugin of kp packages' tests: markers, options, seeds.

Opt-in: a test suite loads it with `pytest_plugins = ("kp_core.testing.pytest_plugin",)` in its conftest.py
(or `-p kp_core.testing.pytest_plugin`). It is not registered as a global pytest11 plugin, so installing
kp never changes how another project's tests run."""
from __future__ import annotations

import os

import pytest

from .inputs import seed_from

MARKERS = {
    "gpu": "needs a CUDA GPU; skipped without one",
    "large": "tensors over 2^31 elements; run with --run-large or KP_TEST_LARGE=1 (GPU only)",
    "slow": "takes more than a few seconds; run with --run-slow or KP_TEST_SLOW=1",
    "distributed": "needs two or more GPUs",
}


def pytest_addoption(parser):
    group = parser.getgroup("kp")
    group.addoption("--run-large", action="store_true", help="run tests marked large")
    group.addoption("--run-slow", action="store_true", help="run tests marked slow")


def pytest_configure(config):
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")


def _flag(config, option: str, env: str) -> bool:
    return bool(config.getoption(option)) or os.environ.get(env, "") not in ("", "0")


def pytest_collection_modifyitems(config, items):
    import torch

    n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    run_large = _flag(config, "--run-large", "KP_TEST_LARGE")
    run_slow = _flag(config, "--run-slow", "KP_TEST_SLOW")
    for item in items:
        # Markers, not keywords: a test's keywords also hold its parameter ids, so a case named
        # "slow" (kp-norm's GPU class) was skipped as if it were marked slow.
        marked = lambda name: item.get_closest_marker(name) is not None  # noqa: E731
        if (marked("gpu") or marked("large")) and n_gpus == 0:
            item.add_marker(pytest.mark.skip(reason="no CUDA GPU"))
        elif marked("distributed") and n_gpus < 2:
            item.add_marker(pytest.mark.skip(reason="needs 2+ GPUs"))
        elif marked("large") and not run_large:
            item.add_marker(pytest.mark.skip(reason="large: pass --run-large"))
        elif marked("slow") and not run_slow:
            item.add_marker(pytest.mark.skip(reason="slow: pass --run-slow"))


@pytest.fixture
def seed(request) -> int:
    """A seed derived from the test id: fresh per case, the same on every rerun."""
    return seed_from(request.node.nodeid)
