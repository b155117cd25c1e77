"""Timers. Every time is in milliseconds.

GPU: the median device time of one call, each call timed with CUDA events after an L2 flush, plus
a stream hold. The flush READS a 256 MB buffer: triton.testing.do_bench zero-fills one instead,
which leaves the L2 full of dirty lines whose write-back then competes with the timed call (H200,
2026-11-26: a 117 MB read took 37.3 us after a zero fill, 29.2 us after a read; 28% charged to
the op for the flush's own writes, less the larger the op). The stream hold: a spin kernel between the flush and the start
event that lasts longer than the host takes to issue the call. Without it, a call whose host work
outlasts the flush (an autograd backward through a Python Function: 100-300 us of host time
against a ~90 us flush) finds the GPU idle, and the window measures host launch latency, not the
kernels; the same kernels read 50% or 90% of copy depending on how busy the host was. Host time
is its own figure (`host_ms`), and so is the time under sustained load (`sustained_ms`): windows of
back-to-back calls, no flush, no gap, for ops that real use runs back to back.
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
FLUSH = "read"  # how the L2 is flushed (reports name it; results before kp-core 0.3.3 used a zero fill)
_flush: dict[Any, torch.Tensor] = {}


def _flush_l2(buf: torch.Tensor) -> None:
    """Evict the L2 and leave its lines clean: whatever the last call wrote is written back here,
    untimed, and the timed call starts with cold, clean lines."""
    torch.sum(buf)


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
    return _event_median(fn, warmup, rep)


def timer_name(device: Any) -> str:
    """Which timer `do_bench` uses on `device`, for the report header."""
    if not is_cuda(device):
        return "time.perf_counter"
    return "CUDA events around each call"


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


SUSTAINED_WINDOW_MS = 250  # a window: back-to-back calls of one impl lasting about this long
SUSTAINED_ROUNDS = 3  # rounds of windows, each round A B .. B A


def sustained_ms(fns: dict[str, Callable[[], Any]], *, device: Any = "cuda", window_ms: float = SUSTAINED_WINDOW_MS,
                 rounds: int = SUSTAINED_ROUNDS) -> dict[str, float]:
    """Time per call under sustained load: for each impl, windows of back-to-back calls (no flush,
    no hold), the impls in turn in A B .. B A order, `rounds` times; the median window's time per
    call. A flushed single call starts on a cool GPU at its highest clock; back to back, a
    compute-bound kernel runs at the clock the power limit allows, which depends on the kernel
    (H200, 2026-11-29: cuBLAS GEMMs 10-20% slower back to back than flushed, kp's pingpong GEMM rows
    0-3%: which of two is faster can differ between the two figures). Interleaving keeps one impl
    from always inheriting the other's heat. Device time (CUDA events around each window) on a GPU,
    wall time on CPU."""
    gpu = is_cuda(device)
    calls = {}
    for name, fn in fns.items():  # calls per window, from one timed call after a warm-up call
        fn()
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        calls[name] = max(1, min(1000, int(window_ms / max((time.perf_counter() - t0) * 1e3, 1e-3))))
    times: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns)
    for _ in range(rounds):
        for name in order + order[::-1]:
            fn, n = fns[name], calls[name]
            if gpu:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(n):
                    fn()
                end.record()
                torch.cuda.synchronize()
                times[name].append(start.elapsed_time(end) / n)
            else:
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                times[name].append((time.perf_counter() - t0) * 1e3 / n)
    return {name: statistics.median(t) for name, t in times.items()}


def _cpu_median(fn: Callable[[], Any], rep: float, max_calls: int = 10) -> float:
    # The CPU run is a smoke test of the code paths, not a measurement: a few calls suffice.
    times: list[float] = []
    budget_end = time.perf_counter() + rep / 1e3
    while len(times) < max_calls and (not times or time.perf_counter() < budget_end):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


# The hold outlasts the host's issue time of one call (its median) by this factor: the GPU
# machines' host time is bimodal, one state ~1.5x the other (host_ms_interleaved), and a hold
# of 1.5x read a 16-row LayerNorm backward at 65 us of device time, 4 and 64 rows at 11 (H100).
HOLD_FACTOR = 3.0
_HOLD_MARGIN_MS = 0.05


def _event_median(fn: Callable[[], Any], warmup: float, rep: float) -> float:
    """Estimate, warm up, then per call: flush the L2, hold the stream, time the call."""
    dev = torch.cuda.current_device()
    if dev not in _flush:
        _flush[dev] = torch.zeros(_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    flush = _flush[dev]
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        _flush_l2(flush)
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-3)
    for _ in range(max(1, int(warmup / estimate))):
        fn()
    hold = _hold_cycles(HOLD_FACTOR * _issue_ms(fn) + _HOLD_MARGIN_MS)
    n = max(1, int(rep / estimate))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(n)]
    for s, e in events:
        _flush_l2(flush)
        torch.cuda._sleep(hold)  # the GPU waits here while the host issues the call below
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)


def _issue_ms(fn: Callable[[], Any], calls: int = 20) -> float:
    """Host time to issue one call, the median over `calls` unsynchronised calls. The GPU is kept
    busy meanwhile, so no call waits for it (the host then measures only itself)."""
    torch.cuda._sleep(_hold_cycles(1.0 * calls))
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


_cycles_per_ms: dict[int, float] = {}


def _hold_cycles(ms: float) -> int:
    """Spin-kernel cycles lasting about `ms` on this GPU (calibrated once per device)."""
    dev = torch.cuda.current_device()
    if dev not in _cycles_per_ms:
        probe = 10_000_000
        torch.cuda._sleep(probe // 10)  # the clocks ramp up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(probe)
        end.record()
        torch.cuda.synchronize()
        _cycles_per_ms[dev] = probe / max(start.elapsed_time(end), 1e-3)
    return max(1, int(ms * _cycles_per_ms[dev]))
