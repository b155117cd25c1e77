import os
import threading
import warnings

import pytest

from kp_core import BackendUnavailable, Selector, requested_backend, use_backend


def _checks(cuda=None, triton=None):
    return {
        "cuda": lambda forced, *f: cuda,
        "triton": lambda forced, *f: triton,
        "reference": lambda forced, *f: None,
    }


def test_auto_takes_the_first_level_that_serves():
    assert Selector("op", _checks())("auto", "cuda") == "cuda"
    assert Selector("op", _checks(cuda="no extension"))("auto", "cuda") == "triton"
    assert Selector("op", _checks(cuda="x", triton="y"))("auto", "cpu") == "reference"


def test_named_backend_that_cannot_serve_raises_with_the_reason():
    sel = Selector("kp_x", _checks(cuda="built for sm_80 only"))
    with pytest.raises(BackendUnavailable, match="kp_x: backend 'cuda' cannot serve this call: built for sm_80 only"):
        sel("cuda", "cuda")


def test_selector_needs_every_level():
    with pytest.raises(ValueError, match="missing"):
        Selector("op", {"reference": lambda forced: None})


def test_precedence_argument_context_environment(monkeypatch):
    monkeypatch.delenv("KP_BACKEND", raising=False)
    assert requested_backend() == "auto"
    monkeypatch.setenv("KP_BACKEND", "triton")
    assert requested_backend() == "triton"
    with use_backend("reference"):
        assert requested_backend() == "reference"
        with use_backend("cuda"):
            assert requested_backend() == "cuda"
            assert requested_backend("triton") == "triton"
        assert requested_backend() == "reference"
    assert requested_backend() == "triton"


def test_unknown_backend_names_are_rejected(monkeypatch):
    with pytest.raises(ValueError, match="unknown kp backend 'tpu'"):
        requested_backend("tpu")
    monkeypatch.setenv("KP_BACKEND", "fast")
    with pytest.raises(ValueError, match="unknown kp backend 'fast'"):
        requested_backend()
    with pytest.raises(ValueError):
        with use_backend("cudnn"):
            pass


def test_context_is_per_thread(monkeypatch):
    monkeypatch.delenv("KP_BACKEND", raising=False)
    seen = []
    with use_backend("reference"):
        t = threading.Thread(target=lambda: seen.append(requested_backend()))
        t.start()
        t.join()
    assert seen == ["auto"]


def test_missing_native_extension_is_reported_not_raised():
    from kp_core import load_native

    status = load_native("kp_core_no_such_package")
    assert not status.loaded
    assert "not importable" in status.error and "reinstall" in status.error and "KP_SKIP_CUDA_BUILD" in status.error
    with pytest.warns(RuntimeWarning, match="the CUDA level is unavailable"):  # once a process
        assert status.device_problem(0) == status.error
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert status.device_problem(1) == status.error
    assert status.describe().startswith("not loaded")


def test_env_reader_sees_every_change_to_os_environ(monkeypatch):
    """The fast reader behind KP_BACKEND reads os.environ's own mapping: it must agree with
    os.environ.get after sets, overwrites (non-ASCII too) and deletes."""
    from kp_core.dispatch import _env_reader

    name = "KP_TEST_ENV_READER"
    monkeypatch.delenv(name, raising=False)
    read = _env_reader(name)
    assert read() is None
    for value in ("triton", "", "réf", "x" * 300):
        monkeypatch.setenv(name, value)
        assert read() == os.environ.get(name) == value
    monkeypatch.delenv(name)
    assert read() is None
