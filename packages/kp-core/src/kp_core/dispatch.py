"""Backend selection: which level (cuda, triton, reference) serves a call.

Order of precedence: the call's `backend=` argument, the innermost `use_backend()` context, the
`KP_BACKEND` environment variable, then `auto`. A *named* backend that cannot serve the call raises
`BackendUnavailable`; only `auto` falls back.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
from typing import Callable, Iterator, Mapping, Optional

BACKENDS = ("auto", "cuda", "triton", "reference")
# `auto` tries these in order.
AUTO_ORDER = ("cuda", "triton", "reference")

# The `use_backend` stack: a context variable, so threads and interleaved asyncio tasks each see
# their own blocks. Dynamo cannot trace ContextVar.get: under torch.compile, packages resolve the
# request inside a constant-result function, which dynamo runs once at trace time.
_stack: contextvars.ContextVar = contextvars.ContextVar("kp_backend", default=())


def _env_reader(name: str) -> Callable[[], Optional[str]]:
    """A reader of one environment variable through os.environ's own live mapping.

    `os.environ.get` encodes the key on every call (0.6 us, a third of a small-batch call's Python).
    CPython's os.environ keeps its data in `_data`, keyed by `encodekey(name)`, and updates it on
    every assignment, so reading it directly sees the same values. Anything unexpected falls back to
    `os.environ.get`; so does a call under torch.compile, where dynamo traces that one.
    """
    env = os.environ
    try:
        data, key, decode = env._data, env.encodekey(name), env.decodevalue  # type: ignore[attr-defined]
    except AttributeError:
        return lambda: os.environ.get(name)

    def read() -> Optional[str]:
        if os.environ is not env or _is_compiling():
            return os.environ.get(name)
        v = data.get(key)
        return None if v is None else decode(v)

    return read


_compiling: Optional[Callable[[], bool]] = None


def _is_compiling() -> bool:
    global _compiling
    if _compiling is None:  # bound on first use: registry imports torch, this module does not
        from .registry import is_compiling

        _compiling = is_compiling
    return _compiling()


_backend_env = _env_reader("KP_BACKEND")


class BackendUnavailable(RuntimeError):
    """A backend was asked for by name and cannot serve this call."""


def _validate(name: str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"unknown kp backend {name!r}; choose one of {', '.join(BACKENDS)}")
    return name


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Force a backend for every kp call inside the block (per thread and per asyncio task).

    Under torch.compile the backend is read when a function is traced: a graph compiled outside
    the block is not recompiled inside it (call torch._dynamo.reset(), or pass `backend=`)."""
    token = _stack.set(_stack.get() + (_validate(name),))
    try:
        yield
    finally:
        _stack.reset(token)


def requested_backend(explicit: Optional[str] = None) -> str:
    """The backend asked for, before checking what can serve: argument > context > env > auto."""
    if explicit is not None:
        return _validate(explicit)
    stack = _stack.get()
    if stack:
        return stack[-1]
    env = _backend_env()
    return _validate(env) if env else "auto"


# A backend's `supports(forced, *facts)` returns None when it can serve, else a sentence saying why
# not. `forced` is True when the backend was named: a level may serve a named call it would not
# volunteer for under `auto` (Triton's CPU interpreter, say).
Supports = Callable[..., Optional[str]]


def select(op: str, checks: Mapping[str, Supports], requested: str, *facts) -> str:
    """Resolve `requested` into a concrete backend for this call.

    `checks` maps each backend of the op to its `supports(forced, *facts)`. The facts are plain values
    (device type and index, dtypes, sizes), so the result can be cached by the caller.
    """
    if requested != "auto":
        why = checks[requested](True, *facts)
        if why is not None:
            raise BackendUnavailable(f"{op}: backend {requested!r} cannot serve this call: {why}")
        return requested
    for name in AUTO_ORDER:
        if checks[name](False, *facts) is None:
            return name
    raise BackendUnavailable(f"{op}: no backend can serve this call")  # reference always can


class Selector:
    """`select` with a cache keyed by the facts: the hot path is one dict lookup."""

    def __init__(self, op: str, checks: Mapping[str, Supports]):
        missing = set(AUTO_ORDER) - set(checks)
        if missing:
            raise ValueError(f"{op}: every op needs all three levels, missing {sorted(missing)}")
        self.op, self.checks, self._cache = op, dict(checks), {}

    def __call__(self, requested: str, *facts) -> str:
        key = (requested, *facts)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = select(self.op, self.checks, requested, *facts)
        return hit

    def clear(self) -> None:
        self._cache.clear()
