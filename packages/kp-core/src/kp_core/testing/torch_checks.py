"""Checks of how an op plugs into PyTorch: opcheck, torch.compile without graph breaks, CUDA graphs."""
from __future__ import annotations

from typing import Callable, Optional

import torch


def opcheck(op, args: tuple, kwargs: Optional[dict] = None) -> None:
    """torch.library.opcheck with every utility; raises with the failing utility's name."""
    results = torch.library.opcheck(op, args, kwargs or {}, raise_exception=True)
    bad = {k: v for k, v in results.items() if v != "SUCCESS"}
    if bad:
        raise AssertionError(f"opcheck failed: {bad}")


def compiled(fn: Callable, *, device_type: str = "cpu") -> Callable:
    """torch.compile(fullgraph=True): a graph break raises instead of passing silently.

    Inductor on GPU (what users get); aot_eager on CPU, which traces the same graph without
    spending minutes in the C++ compiler of a 2-core CI machine.
    """
    torch._dynamo.reset()
    backend = "inductor" if device_type == "cuda" else "aot_eager"
    return torch.compile(fn, fullgraph=True, backend=backend)


def graph_captured(fn: Callable, *args):
    """Capture `fn(*args)` in a CUDA graph, replay it, and return its output."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(*args)  # warm-up outside capture: lazy init, autotuning, allocator pools
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*args)
    graph.replay()
    torch.cuda.synchronize()
    return out
