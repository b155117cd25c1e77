"""Timers. Every time is in milliseconds.

GPU: the median of `triton.testing.do_bench` (it flushes the L2 before each call and times each
call with CUDA events), or the same scheme written with torch.cuda events when Triton is missing.
CPU (the no-GPU smoke run): time.perf_counter around single calls.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

WARMUP_MS = 25
REP_MS = 100
_FLUSH_BYTES = 256 << 20  # larger than any current L2, like triton's own flush buffer
_flush: dict[Any, torch.Tensor] = {}


def is_cuda(device: Any) -> bool:
    return torch.device(device).type == "cuda"


def sync(device: Any) -> None:
    if is_cuda(device):
        torch.cuda.synchronize()


def do_bench(fn: Callable[[], Any], *, device: Any = "cuda", warmup: float = WARMUP_MS,
             rep: float = REP_MS) -> float:
    """Median time of one call of `fn` in ms (device time on a GPU, wall time on CPU)."""
    if not is_cuda(device):
        return _cpu_median(fn, rep)
    try:
        import triton.testing
    except ImportError:
        return _event_median(fn, warmup, rep)
    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def timer_name(device: Any) -> str:
    """Which timer `do_bench` uses on `device`, for the report header."""
    if not is_cuda(device):
        return "time.perf_counter"
    try:
        import triton.testing  # noqa: F401
    except ImportError:
        return "torch.cuda.Event"
    return "triton.testing.do_bench"


def host_ms(fn: Callable[[], Any], *, device: Any = "cuda", calls: int = 300,
            repeats: int = 9) -> float:
    """Wall time per call over `calls` back-to-back calls with one sync at the end, the fastest of
    `repeats` loops. For launch-bound sizes this is the host overhead a model loop pays; the
    device-time figure of `do_bench` hides it. The minimum, not the median: other work on the
    host only ever adds time, and a few microseconds of it decided comparisons run to run."""
    return host_ms_interleaved({"fn": fn}, device=device, calls=calls, repeats=repeats)["fn"]


def host_ms_interleaved(fns: dict[str, Callable[[], Any]], *, device: Any = "cuda", calls: int = 300,
                        repeats: int = 9) -> dict[str, float]:
    """`host_ms` of several functions, their loops taken in turn (the order reversed every other
    round). The GPU machines' host time is bimodal (about 10-11 us or 15-17 us a small-batch call
    for kp and torch alike, switching every few tens of ms): timed one after the other, an impl
    could spend all of its loops in the slow state and lose a comparison it wins in the same state."""
    for fn in fns.values():
        for _ in range(min(calls, 50)):  # warm caches, allocator and dispatch paths
            fn()
    sync(device)
    best = {name: float("inf") for name in fns}
    order = list(fns)
    for r in range(repeats):
        for name in order if r % 2 == 0 else reversed(order):
            fn = fns[name]
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            sync(device)
            best[name] = min(best[name], (time.perf_counter() - t0) * 1e3 / calls)
    return best


def _cpu_median(fn: Callable[[], Any], rep: float, max_calls: int = 10) -> float:
    # The CPU run is a smoke test of the code paths, not a measurement: a few calls suffice.
    times: list[float] = []
    budget_end = time.perf_counter() + rep / 1e3
    while len(times) < max_calls and (not times or time.perf_counter() < budget_end):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _event_median(fn: Callable[[], Any], warmup: float, rep: float) -> float:
    """do_bench's scheme without Triton: estimate, warm up, then flush L2 + time each call."""
    dev = torch.cuda.current_device()
    if dev not in _flush:
        _flush[dev] = torch.empty(_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    flush = _flush[dev]
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-3)
    for _ in range(max(1, int(warmup / estimate))):
        fn()
    n = max(1, int(rep / estimate))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(n)]
    for s, e in events:
        flush.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)
