"""Registering kp ops with torch.library at low cost per eager call (kp_core.op builds on it).

The pattern every package follows (kp_core.op.AutogradOp; kp_norm/ops.py uses it):
  * one `torch.library` op per kernel family, with a fake impl, so torch.compile(fullgraph=True)
    sees no graph break, CUDA graphs capture it, and `torch.library.opcheck` passes;
  * the public function calls the backend implementation *directly* in eager mode: going through
    the dispatcher and a Python-registered kernel costs several microseconds per call, which a
    norm on a small batch cannot afford. Only traced code (torch.compile) goes through the op.
"""
from __future__ import annotations

import contextlib

from typing import Callable, Optional, Sequence

import torch

_LIBS: dict = {}


def library(namespace: str) -> torch.library.Library:
    """The Library fragment of one namespace (`kp_norm`), kept alive for the process."""
    lib = _LIBS.get(namespace)
    if lib is None:
        lib = _LIBS[namespace] = torch.library.Library(namespace, "FRAGMENT")
    return lib


def define(
    namespace: str,
    schema: str,
    impl: Callable,
    fake: Callable,
    *,
    backward: Optional[Callable] = None,
    setup_context: Optional[Callable] = None,
    dispatch_keys: Sequence[str] = ("CPU", "CUDA"),
):
    """Define `namespace::<schema>` with one real impl for every device key and a fake impl.

    Returns the op's default overload (`torch.ops.<namespace>.<name>.default`).
    """
    lib = library(namespace)
    name = schema.split("(", 1)[0].strip()
    lib.define(schema)
    for key in dispatch_keys:
        lib.impl(name, impl, key)
    qualname = f"{namespace}::{name}"
    torch.library.register_fake(qualname, fake, lib=lib)
    if backward is not None:
        torch.library.register_autograd(qualname, backward, setup_context=setup_context, lib=lib)
    return getattr(getattr(torch.ops, namespace), name).default


# The resolver of a call's backend depends only on plain values (strings, dtypes, ints), so under
# torch.compile it is evaluated once at trace time and its answer baked into the graph.
constant_result = torch.compiler.assume_constant_result
is_compiling = torch.compiler.is_compiling


def _raw_stream_getter():
    fast = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if fast is not None:
        return fast
    return lambda index: torch.cuda.current_stream(index).cuda_stream


current_stream = _raw_stream_getter()
"""current_stream(device_index) -> int: torch's current CUDA stream handle, cheaply."""

_NO_DEVICE_SWITCH = contextlib.nullcontext()


def on_device_of(t: torch.Tensor):
    """A context in which `t`'s GPU is torch's current device. Triton launches on the current
    device, not the tensors': switch only when `t` lives elsewhere (a no-op context otherwise)."""
    if t.is_cuda and t.device.index != torch.cuda.current_device():
        return torch.cuda.device(t.device)
    return _NO_DEVICE_SWITCH


def once_differentiable(grads: tuple, what: str) -> tuple:
    """Gradients computed by a backward with no derivative of its own, under create_graph=True.

    They come back attached to a node that raises when differentiated again: a second-order
    gradient (a gradient penalty, a Hessian-vector product) fails with a clear error instead of
    silently leaving out the terms that flow through this backward. torch's `once_differentiable`
    only looks at the incoming gradients, which in a gradient penalty (`autograd.grad(y.sum(), x,
    create_graph=True)`) do not require grad, so it would let exactly that case through.
    """
    tensors = [g for g in grads if g is not None]
    if not tensors:
        return grads
    message = (
        f"{what} computes first derivatives only: double backward (create_graph=True followed by "
        f"another backward) is not supported. Use backend='reference' (plain PyTorch autograd) for "
        f"higher-order gradients."
    )
    delayed = torch._C._functions.DelayedError(message.encode(), len(tensors))
    out = delayed(*[g.detach().requires_grad_(True) for g in tensors])
    wrapped = iter((out,) if isinstance(out, torch.Tensor) else out)
    return tuple(None if g is None else next(wrapped) for g in grads)
