"""Registering kp ops with torch.library at low cost per eager call.

The pattern every package follows (see kp_norm/norm.py):
  * one `torch.library` op per kernel family, with a fake impl, so torch.compile(fullgraph=True)
    sees no graph break, CUDA graphs capture it, and `torch.library.opcheck` passes;
  * the public function calls the backend implementation *directly* in eager mode: going through
    the dispatcher and a Python-registered kernel costs several microseconds per call, which a
    norm on a small batch cannot afford. Only traced code (torch.compile) goes through the op.
"""
from __future__ import annotations

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
