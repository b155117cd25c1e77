"""The scaffolding a kp op is built on: its levels, its torch.library ops with their autograd, and
the eager path that shares that autograd.

A kp op family (kp-norm's `norm`, kp-fused-mlp's `swiglu`) is

* `Levels`: where its cuda, triton and reference implementations live, which of them can serve a
  call (`supports(forced, device_type, device_index, *facts)`, cached per facts), and the request
  resolved into one of them, eagerly or at trace time under torch.compile;
* `AutogradOp`: a forward and a backward `torch.library` op (fake impls included, so
  torch.compile sees no graph break and opcheck passes), whose autograd is registered, and an
  eager `autograd.Function` built from the same `setup_context` and `backward`, so eager, compiled
  and grad calls share one definition. Eager calls skip the dispatcher: on a small batch its
  microseconds are most of the call.

Conventions: each op's last argument is `str backend` (the level that runs it), its outputs are
tensors (an absent one comes back from the op as an empty `(0,)` tensor; the level impls return
None). See docs/adding-an-op.md for an op written on it end to end.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from typing import Callable, Optional, Sequence

import torch
import torch.autograd.forward_ad as _forward_ad

from . import registry
from .dispatch import BackendUnavailable, Selector, requested_backend

LEVELS = ("cuda", "triton", "reference")
_EMPTY = (0,)


@functools.lru_cache(maxsize=None)
def triton_importable() -> bool:
    """Whether triton can be imported (without importing it: that takes a second)."""
    return importlib.util.find_spec("triton") is not None


def triton_supports(forced: bool, device_type: str, *facts) -> Optional[str]:
    """The Triton level of any op: a GPU, or Triton's CPU interpreter when named (tests)."""
    if not triton_importable():
        return "triton is not installed"
    if device_type == "cuda":
        return None
    if forced and os.environ.get("TRITON_INTERPRET") == "1":
        return None  # CPU tensors run under Triton's interpreter; never chosen by auto
    return f"the tensors are on {device_type}; Triton kernels need a GPU (or TRITON_INTERPRET=1)"


def reference_supports(forced: bool, *facts) -> Optional[str]:
    """The reference level is plain PyTorch: it serves every call."""
    return None


_functorch_level = torch._C._functorch.maybe_current_level


def transforms_active() -> bool:
    """Forward-mode AD or a torch.func transform (jvp, vmap, grad) is active: levels that are
    autograd.Functions with a backward only cannot serve; the reference level (plain PyTorch) can."""
    return _forward_ad._current_level >= 0 or _functorch_level() is not None


class Levels:
    """The three levels of one op family.

    `modules` maps each level to its module (`"kp_norm._cuda"`); the triton module is imported on
    first use, as importing triton is slow. `supports` overrides a level's `supports`; by default
    the cuda level's is its module's `supports`, the others' are `triton_supports` and
    `reference_supports`.
    """

    def __init__(self, name: str, modules: dict, supports: Optional[dict] = None):
        missing = set(LEVELS) - set(modules)
        if missing:
            raise ValueError(f"{name}: every op needs all three levels, missing {sorted(missing)}")
        self.name, self._paths, self._modules, self._impls = name, dict(modules), {}, {}
        checks = {"triton": triton_supports, "reference": reference_supports, **(supports or {})}
        if "cuda" not in checks:
            checks["cuda"] = lambda *a: self.module("cuda").supports(*a)
        self.select = Selector(name, checks)
        """select(requested, device_type, device_index, *facts) -> level name (cached per facts)."""

        def resolve_text(backend, device_type, device_index, *facts) -> str:  # a function: dynamo marks it
            try:
                return self.select(requested_backend(backend), device_type, device_index, *facts)
            except (ValueError, BackendUnavailable) as e:
                return f"!{type(e).__name__}!{e}"

        self._traced = registry.constant_result(resolve_text)

    def module(self, level: str):
        mod = self._modules.get(level)
        if mod is None:
            mod = self._modules[level] = importlib.import_module(self._paths[level])
        return mod

    def impl(self, level: str, function: str) -> Callable:
        """`function` of that level's module, looked up once."""
        key = (level, function)
        fn = self._impls.get(key)
        if fn is None:
            fn = self._impls[key] = getattr(self.module(level), function)
        return fn

    def resolve(self, backend: Optional[str], device: torch.device, *facts) -> str:
        """The level of an eager call: the request (argument > use_backend > KP_BACKEND > auto),
        the reference level under forward-mode AD and torch.func transforms."""
        requested = requested_backend(backend)
        if _forward_ad._current_level >= 0 or _functorch_level() is not None:  # transforms_active()
            if requested not in ("auto", "reference"):
                raise BackendUnavailable(
                    f"{self.name}: backend {requested!r} cannot serve this call: forward-mode AD and torch.func "
                    f"transforms need backend='reference' (the {requested} level defines a backward only)"
                )
            return "reference"
        return self.select(requested, device.type, device.index, *facts)

    def traced(self, backend: Optional[str], device: torch.device, *facts) -> str:
        """The level of a call under torch.compile, resolved once at trace time.

        The request is read where dynamo runs the resolver instead of tracing it (it cannot trace
        a ContextVar); an error comes back as text, since raised inside a constant-result function
        it would reach the user as an internal dynamo error, and is raised here, in traced code."""
        answer = self._traced(backend, device.type, device.index, *facts)
        if answer[0] == "!":
            _, kind, text = answer.split("!", 2)
            raise (BackendUnavailable if kind == "BackendUnavailable" else ValueError)(text)
        return answer

    def describe(self, *facts) -> list:
        """Lines for `python -m kp_core`: what `auto` picks on each device for these facts."""
        devices = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        lines = []
        for d in devices:
            dev = torch.device(d)
            lines.append(f"auto on {d}: {self.select('auto', dev.type, dev.index, *facts)}")
        return lines


def or_empty(t: Optional[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """An absent output as the op returns it (torch.library ops return tensors, not None)."""
    return like.new_empty(_EMPTY) if t is None else t


def empty(like: torch.Tensor) -> torch.Tensor:
    """The placeholder a fake impl returns for an absent output."""
    return like.new_empty(_EMPTY)


class AutogradOp:
    """A forward op and its backward op, for traced and eager code alike.

    * `fwd_schema`/`bwd_schema`: the ops' schemas (last argument `str backend`), defined in
      `namespace`; `fwd_fake`/`bwd_fake` their fake impls.
    * `fwd`/`bwd`: the impls, called with the op's arguments; default: the function named after
      the op in the backend's level module, called without `backend`. Their absent outputs are
      None; the registered ops turn those into empty tensors.
    * `setup_context(ctx, inputs, output)` as torch.library's, and `backward(ctx, run_bwd, *grads)`:
      `run_bwd(*bwd_args)` runs the backward (through the backward op when traced, its level impl
      when eager; absent outputs may be None or empty, so the backward must pick by its own flags).
    """

    def __init__(
        self,
        namespace: str,
        levels: Levels,
        *,
        fwd_schema: str,
        fwd_fake: Callable,
        bwd_schema: str,
        bwd_fake: Callable,
        setup_context: Callable,
        backward: Callable,
        fwd: Optional[Callable] = None,
        bwd: Optional[Callable] = None,
    ):
        self.levels = levels
        fwd_name, bwd_name = (s.split("(", 1)[0].strip() for s in (fwd_schema, bwd_schema))
        self.fwd = fwd or (lambda *args: levels.impl(args[-1], fwd_name)(*args[:-1]))
        self.bwd = bwd or (lambda *args: levels.impl(args[-1], bwd_name)(*args[:-1]))

        def as_op(impl):
            def run(*args):
                out = impl(*args)
                return out if isinstance(out, torch.Tensor) else tuple(or_empty(t, args[0]) for t in out)

            return run

        self.bwd_op = registry.define(namespace, bwd_schema, as_op(self.bwd), bwd_fake)
        self.fwd_op = registry.define(
            namespace, fwd_schema, as_op(self.fwd), fwd_fake,
            backward=lambda ctx, *grads: backward(ctx, self.bwd_op, *grads), setup_context=setup_context,
        )  # fmt: skip
        self.apply = _eager_function(f"{namespace}_{fwd_name}", self.fwd, self.bwd, setup_context, backward).apply
        """apply(*fwd_args): the eager forward under autograd, without the dispatcher."""


def _eager_function(name: str, fwd: Callable, bwd: Callable, setup_context: Callable, backward: Callable):
    # Old-style (ctx in forward, no setup_context): with setup_context, Function.apply binds the
    # arguments through inspect.signature on every call, tens of microseconds of host time per call.
    def forward(ctx, *args):
        out = fwd(*args)
        setup_context(ctx, args, out)
        return out

    def backward_(ctx, *grads):
        return backward(ctx, bwd, *grads)

    return type(name, (torch.autograd.Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward_)})


def check_tensor(
    op: str,
    name: str,
    t,
    *,
    like: Optional[torch.Tensor] = None,
    dtypes: Sequence[torch.dtype] = (),
    shape: Optional[Sequence[int]] = None,
    what_shape: str = "",
) -> None:
    """Raise a clear TypeError/ValueError unless `t` is a tensor of one of `dtypes`, on `like`'s
    device, of `shape` (None: any)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a tensor, got {type(t).__name__}")
    if dtypes and t.dtype not in dtypes:
        names = [str(d).replace("torch.", "") for d in dtypes]
        names = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        raise TypeError(f"{op}: {name} must be {names}, got {t.dtype}")
    if like is not None and t.device != like.device:
        raise ValueError(f"{op}: x is on {like.device} but {name} is on {t.device}")
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{op}: {name} has shape {tuple(t.shape)}, expected {tuple(shape)}{what_shape}")


def as_rows(t: torch.Tensor, cols: int) -> torch.Tensor:
    """[..., cols-worth of trailing dims] -> [rows, cols] with a unit last stride and rows that do
    not overlap (a view when possible). Expanded (stride-0) and overlapping rows are copied: row
    kernels take one row stride of at least a row."""
    # Rows already: no view, so no ViewBackward node for the engine to run in every backward.
    t2 = t if t.dim() == 2 and t.shape[1] == cols else t.reshape(-1, cols)
    rows = t2.shape[0]
    if rows == 0 or (t2.stride(1) == 1 or cols == 1) and (rows == 1 or t2.stride(0) >= cols):
        return t2
    return t2.contiguous()


def saveable(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """What autograd saves must be a normal tensor: an inference-mode tensor is cloned."""
    return t.clone() if t is not None and t.is_inference() else t


class FastPath:
    """Eager no-grad runners cached by call signature.

    A runner skips every check the general path makes, so every fact those checks read must be
    in its key (a bias of another shape once hit a cached kp-norm runner and was read out of
    bounds). `make(*args)` returns a runner, or False where the general path must serve; an
    exception while making one means the same (the general path then raises its own error).
    """

    def __init__(self, make: Callable):
        self._make, self._runners = make, {}

    def get(self, key, *args):
        run = self._runners.get(key)
        if run is None:
            try:
                run = self._runners[key] = self._make(*args)
            except Exception:
                return None
        return run or None

    def clear(self) -> None:
        self._runners.clear()

    def __len__(self) -> int:
        return len(self._runners)
